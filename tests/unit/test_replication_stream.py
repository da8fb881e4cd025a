"""The replication stream's encoding and backlog (pion.server.replication.stream): records
parse back to their effects, offsets count exactly the bytes the replica measures, big
arguments are not copied, and the backlog serves exactly the bytes after a requested offset."""

from __future__ import annotations

import hiredis

from pion.server.replication.replica import encoded_size
from pion.server.replication.stream import BIG_ARG, Backlog, StreamEncoder, command


def parse(data: bytes) -> list:
    reader = hiredis.Reader()
    reader.feed(data)
    out = []
    while (item := reader.gets()) is not False:
        out.append(item)
    return out


def joined(chunks) -> bytes:
    return b"".join(bytes(c) for c in chunks)


def test_a_record_selects_its_database_once_and_frames_several_effects():
    enc = StreamEncoder()
    chunks, total = enc.record([(0, [b"SET", b"k", b"v"])])
    assert parse(joined(chunks)) == [[b"SELECT", b"0"], [b"SET", b"k", b"v"]]
    assert total == len(joined(chunks)) == encoded_size([b"SELECT", b"0"]) + encoded_size([b"SET", b"k", b"v"])
    chunks, _ = enc.record([(0, [b"INCR", b"n"]), (2, [b"DEL", b"x"])])
    assert parse(joined(chunks)) == [[b"MULTI"], [b"INCR", b"n"], [b"SELECT", b"2"], [b"DEL", b"x"], [b"EXEC"]]
    chunks, _ = enc.record([(2, [b"DEL", b"y"])])
    assert parse(joined(chunks)) == [[b"DEL", b"y"]]


def test_big_arguments_are_the_callers_buffers_and_mutable_ones_are_copied():
    enc = StreamEncoder()
    big = b"x" * BIG_ARG
    view = memoryview(b"y" * (BIG_ARG + 5))
    mutable = bytearray(b"z" * BIG_ARG)
    chunks, total = enc.record([(0, [b"V.STOREBATCH", b"ns", big, view, mutable])])
    assert any(c is big for c in chunks) and any(c is view for c in chunks)
    assert not any(c is mutable for c in chunks)
    mutable[:] = b"!" * BIG_ARG  # changed after the record: the stream keeps what was logged
    assert parse(joined(chunks))[-1] == [b"V.STOREBATCH", b"ns", big, bytes(view), b"z" * BIG_ARG]
    assert total == len(joined(chunks))


def test_the_backlog_serves_the_bytes_after_an_offset_and_forgets_the_oldest():
    backlog = Backlog(size=100, offset=0)
    stream = b""
    for i in range(30):
        data = command(b"SET", b"k%d" % i, b"v")
        backlog.add([data], len(data))
        stream += data
    assert backlog.offset == len(stream)
    assert backlog.histlen >= 100 and backlog.first > 1  # trimmed from the front, whole chunks
    assert not backlog.can_serve(1) and backlog.can_serve(backlog.offset + 1)
    for wanted in (backlog.first, backlog.first + 7, backlog.offset - 3, backlog.offset + 1):
        assert backlog.can_serve(wanted)
        assert joined(backlog.since(wanted)) == stream[wanted - 1:]
    assert not backlog.can_serve(backlog.offset + 2)
    backlog.resize(20)
    assert backlog.histlen < 100 + 40
