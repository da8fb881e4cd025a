"""The reader's held bytes of a long pipeline are trimmed by the returned frames' sizes; what
comes after (an inline command, a malformed frame) is still parsed from the right byte."""

from __future__ import annotations

import pytest

from pion.protocol.errors import ProtocolError
from pion.protocol.multibulk import skip_frames
from pion.protocol.reader import RequestReader


def _frame(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _drain(reader: RequestReader) -> list[list[bytes]]:
    out = []
    while (argv := reader.next_command()) is not None:
        out.append(argv)
    return out


def _stream(count: int) -> bytes:
    # argument lengths of 1, 2 and 3+ digits, an empty argument and an empty frame
    return b"".join(_frame(b"SET", b"k%d" % i, b"v" * (i % 150), b"") + (b"*0\r\n" if i % 97 == 0 else b"")
                    for i in range(count))


def test_long_pipeline_without_a_boundary_then_inline() -> None:
    reader = RequestReader()
    data = _stream(40_000) + b"PING\r\n"
    seen: list[list[bytes]] = []
    # reads that end inside a frame every time: the held bytes pass the trim size many times
    step = 65_537
    for start in range(0, len(data), step):
        reader.feed(data[start:start + step])
        seen.extend(_drain(reader))
    expected = [[b"SET", b"k%d" % i, b"v" * (i % 150), b""] for i in range(40_000)]
    assert [argv for argv in seen if argv] == expected + [[b"PING"]]
    assert reader.buffered() == 0


def test_trimmed_stream_then_a_split_inline_command() -> None:
    reader = RequestReader()
    data = _stream(30_000)
    reader.feed(data + _frame(b"GET", b"x")[:7])  # held: a frame in progress, after > 1 MiB of frames
    assert len(_drain(reader)) > 29_000
    # the size count matches a walk of the held bytes (else the trim would walk every time)
    assert reader._consumed == skip_frames(reader._joined(), reader._frames_since) > 0
    reader.feed(_frame(b"GET", b"x")[7:] + b"ECHO hi\r\n")
    assert _drain(reader)[-2:] == [[b"GET", b"x"], [b"ECHO", b"hi"]]


def test_simple_string_element_is_not_miscounted() -> None:
    """``+simple`` inside a frame breaks the size count: the trim walks instead and refuses it."""
    reader = RequestReader()
    bad = b"*2\r\n$3\r\nGET\r\n+key\r\n"
    data = bad + _stream(30_000) + _frame(b"GET", b"x")[:7]
    with pytest.raises(ProtocolError):
        reader.feed(data)
        _drain(reader)
