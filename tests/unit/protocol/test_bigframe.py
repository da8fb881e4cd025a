"""Frames with large arguments: taken back from hiredis and received into their own buffers."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.protocol.bigframe import BIG_ARG, BigFrame
from pion.protocol.errors import ProtocolError
from pion.protocol.reader import RequestReader

ZERO_COPY = frozenset({b"v.storebatch"})


def frame(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def drain(reader: RequestReader, data: bytes, cuts: list[int]) -> list[list]:
    """Feed ``data`` cut at ``cuts`` (fractions of its length, in millionths), reading after each."""
    out, last = [], 0
    for cut in sorted({c * len(data) // 1_000_000 for c in cuts} | {len(data)}):
        reader.feed(data[last:cut])
        last = cut
        while (argv := reader.next_command()) is not None:
            out.append(argv)
    return out


def big(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([b"V.STOREBATCH", b"SET", b"v.storebatch"]),
                       st.sampled_from([0, 5, BIG_ARG - 1, BIG_ARG, 300_000, 1_100_000])), min_size=1, max_size=4),
    st.lists(st.integers(0, 1_000_000), max_size=12),
    st.booleans(),
)
def test_frames_parse_the_same_however_they_are_cut(commands, cuts, inline_after):
    argvs = [[name, b"key", big(size, size), b"FMT"] for name, size in commands]
    data = b"".join(frame(a) for a in argvs) + (b"PING\r\n" if inline_after else b"")
    reader = RequestReader()
    reader.zero_copy = ZERO_COPY
    got = drain(reader, data, cuts)
    assert [[bytes(a) for a in argv] for argv in got] == argvs + ([[b"PING"]] if inline_after else [])
    for argv in got:
        for arg in argv:
            if arg.__class__ is memoryview:  # only large arguments of zero_copy commands, read-only
                assert argv[0].lower() in ZERO_COPY and arg.nbytes >= BIG_ARG and arg.readonly
            else:
                assert arg.__class__ is bytes
    assert reader.buffered() == 0


def test_a_large_argument_of_a_zero_copy_command_stays_a_view():
    reader = RequestReader()
    reader.zero_copy = ZERO_COPY
    payload = big(2_000_000)
    got = drain(reader, frame([b"V.STOREBATCH", b"s", payload]) + frame([b"SET", b"k", payload]),
                list(range(0, 1_000_000, 60_000)))
    assert got[0][2].__class__ is memoryview and got[0][2] == payload
    assert got[1][2].__class__ is bytes and got[1][2] == payload


def test_the_socket_can_receive_straight_into_the_argument():
    reader = RequestReader()
    payload = big(1_000_000)
    data = frame([b"SET", b"k", payload]) + frame([b"GET", b"k"])
    reader.feed(data[:300_000])
    assert reader.next_command() is None
    pos = 300_000
    while (target := reader.recv_target()) is not None:
        count = min(len(target), 100_000)
        target[:count] = data[pos:pos + count]
        reader.received(count)
        pos += count
    assert 0 < len(data) - pos < 200_000  # the end of the argument and what follows: an ordinary read
    reader.feed(data[pos:])
    assert reader.next_command() == [b"SET", b"k", payload]
    assert reader.next_command() == [b"GET", b"k"]
    assert reader.next_command() is None


def test_an_oversize_length_is_refused_before_its_payload_arrives():
    reader = RequestReader(max_bulk_len=1_000_000)
    reader.feed(frame([b"SET", b"k", big(500_000)])[:300_000])
    assert reader.next_command() is None
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        BigFrame(10, 1000).feed(b"*2\r\n$3\r\nSET\r\n$1001\r\n")
    reader = RequestReader(max_bulk_len=400_000)
    reader.feed(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$300000\r\n" + bytes(290_000))
    assert reader.next_command() is None  # taken over: 300000 is allowed
    reader.feed(bytes(10_000) + b"\r\n*2\r\n$3\r\nSET\r\n$500000\r\n")
    assert len(reader.next_command()[2]) == 300_000
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        reader.feed(bytes(300_000))
        reader.next_command()


def test_a_frame_in_progress_counts_against_the_query_buffer():
    reader = RequestReader()
    reader.feed(frame([b"SET", b"k", big(1_000_000)])[:600_000])
    assert reader.next_command() is None
    assert reader.buffered() >= 590_000


def test_switching_to_pre_auth_caps_mid_frame_is_a_protocol_error():
    reader = RequestReader()
    reader.feed(frame([b"SET", b"k", big(1_000_000)])[:400_000])
    assert reader.next_command() is None
    with pytest.raises(ProtocolError, match="unauthenticated bulk length"):
        reader.set_strict(True)
