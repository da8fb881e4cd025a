"""A failed log write never erases, rewrites or duplicates what is already in the log.

The sequence of the full-disk report: a group-commit batch spans a segment rollover, the new
segment's first write fails (ENOSPC), the writer retries. Before the fix the retry re-queued the
whole batch and re-opened the previous segment with ``O_TRUNC``: every acknowledged record in it
was gone after the next kill -9. These tests run a real server in-process and check the files
on disk while it runs: a copy of the data directory taken at any moment is what a ``kill -9``
at that moment would leave (the page cache survives a killed process), so each "restart" here
starts a second server on such a copy.
"""

from __future__ import annotations

import errno
import os
import shutil
import time

import pytest
import redis

from pion.storage import wal
from tests.recovery.helpers import DirServer, wait_for


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data")
    yield srv
    srv.stop()


def after_kill(node: DirServer, tmp_path, name: str) -> DirServer:
    """A server started on a copy of ``node``'s data directory as a kill -9 now would leave it."""
    copy = tmp_path / name
    shutil.copytree(node.datadir, copy, ignore=shutil.ignore_patterns("pion.lock"))
    return DirServer(copy, save="", appendfsync="always").start()


class FailOpen:
    """``os.open`` of one path fails with ``err`` the first ``times`` times (the rest untouched)."""

    def __init__(self, path: str, err: int = errno.ENOSPC, times: int = 1) -> None:
        self.path, self.err, self.times = path, err, times
        self.real = os.open

    def __call__(self, path, flags, *args, **kwargs):
        if os.fspath(path) == self.path and self.times > 0:
            self.times -= 1
            raise OSError(self.err, os.strerror(self.err), self.path)
        return self.real(path, flags, *args, **kwargs)


def fill_segment_to_its_rollover(node: DirServer, r: redis.Redis, margin: int = 500) -> list[str]:
    """SET a:0, a:1, ... until the current segment is ``margin`` bytes short of its size."""
    journal = node.server.journal
    keys = []
    first = journal.segment
    while journal.segment_size - journal._segment_bytes > margin:
        key = f"a:{len(keys)}"
        assert r.set(key, "v" * 100)
        keys.append(key)
    assert journal.segment == first
    return keys


def test_a_rollover_whose_new_segment_cannot_be_opened_keeps_every_acknowledged_record(node, tmp_path, monkeypatch):
    node.start(appendfsync="always", save="", wal_segment_size=64 * 1024)
    r = node.client()
    journal = node.server.journal
    acked = fill_segment_to_its_rollover(node, r)
    assert len(acked) > 400
    full_segment = journal.segment
    before = os.path.getsize(wal.segment_path(journal.wal_dir, full_segment))
    monkeypatch.setattr(os, "open", FailOpen(wal.segment_path(journal.wal_dir, full_segment + 1)))

    pipe = r.pipeline(transaction=False)
    for j in range(10):
        pipe.set(f"b:{j}", "w" * 100)
    replies = pipe.execute(raise_on_error=False)
    ok = [f"b:{j}" for j, reply in enumerate(replies) if reply is True]
    refused = [f"b:{j}" for j, reply in enumerate(replies) if isinstance(reply, redis.ResponseError)]
    assert len(ok) + len(refused) == 10 and refused, replies
    assert all("MISCONF" in str(reply) for reply in replies if reply is not True)
    # the part of the batch that fit the full segment was synced there: it is acknowledged
    assert ok == [f"b:{j}" for j in range(len(ok))]
    assert r.info("persistence")["aof_last_write_status"] == "err"

    wait_for(lambda: journal.write_error() is None, 10)  # the disk probe succeeded
    # the full segment was never cut: it holds every record it held, and the acknowledged part
    assert os.path.getsize(wal.segment_path(journal.wal_dir, full_segment)) >= before
    # killed now: everything acknowledged is there, nothing answered -MISCONF is
    early = after_kill(node, tmp_path, "killed-before-next-write")
    c = early.client()
    assert all(c.get(key) == b"v" * 100 for key in acked)
    assert all(c.get(key) == b"w" * 100 for key in ok)
    assert all(c.get(key) is None for key in refused)
    early.stop()

    assert r.set("c", "last")  # a later acknowledged write takes the held records with it
    assert r.info("persistence")["aof_last_write_status"] == "ok"
    late = after_kill(node, tmp_path, "killed-after-next-write")
    c = late.client()
    assert sum(c.get(key) == b"v" * 100 for key in acked) == len(acked)
    assert all(c.get(key) == b"w" * 100 for key in ok + refused)
    assert c.get("c") == b"last"
    late.stop()


def test_a_failed_fsync_under_always_cuts_only_unacknowledged_records(node, tmp_path):
    node.start(appendfsync="always", save="")
    r = node.client()
    journal = node.server.journal
    for i in range(50):
        r.set(f"k{i}", i)
    from pion.storage import faults

    faults.arm("wal.sync", "EIO", count=1)
    try:
        with pytest.raises(redis.ResponseError, match="MISCONF"):
            r.set("refused", "x")
    finally:
        faults.disarm()
    wait_for(lambda: journal.write_error() is None, 10)
    killed = after_kill(node, tmp_path, "killed")
    c = killed.client()
    assert [c.get(f"k{i}") for i in range(50)] == [str(i).encode() for i in range(50)]
    assert c.get("refused") is None  # answered -MISCONF and no later write: not in the log
    killed.stop()
    assert r.get("refused") == b"x"  # it did run: memory has it, as Redis's would


def test_under_everysec_a_failed_fsync_never_cuts_acknowledged_records(node, tmp_path):
    node.start(appendfsync="everysec", save="")
    r = node.client()
    journal = node.server.journal
    from pion.storage import faults

    faults.arm("wal.sync", "EIO", count=-1)
    try:
        for i in range(30):
            try:
                r.set(f"k{i}", i)
            except redis.ResponseError as exc:
                assert "MISCONF" in str(exc)
        wait_for(lambda: journal.write_error() is not None, 10)
        acked = [i for i in range(30) if r.get(f"k{i}") is not None]
        # everysec answers a write once it is in the file: those answered OK are never cut
        killed = after_kill(node, tmp_path, "killed-while-fsync-fails")
        c = killed.client()
        assert [c.get(f"k{i}") for i in acked] == [str(i).encode() for i in acked]
        killed.stop()
    finally:
        faults.disarm()
    wait_for(lambda: journal.write_error() is None, 10)
    assert r.set("after", "1")


def test_a_reopened_segment_is_resumed_never_truncated(tmp_path):
    directory = str(tmp_path)
    writer = wal.SegmentWriter(directory, 7)
    records = [wal.frame(wal.encode_effects([(0, [b"SET", b"k%d" % i, b"v"])])) for i in range(5)]
    writer.write(b"".join(records))
    writer.sync()
    size = writer.size
    writer.write(b"\x05\x00\x00")  # a failed write's leftovers past the last record
    writer.close()
    again = wal.SegmentWriter(directory, 7)
    assert again.resumed and again.size == size == os.path.getsize(wal.segment_path(directory, 7))
    again.write(records[0])
    again.sync()
    again.close()
    assert len(list(wal.SegmentScan(wal.segment_path(directory, 7)))) == 6


def test_a_segment_with_a_header_cut_short_is_started_again(tmp_path):
    path = wal.segment_path(str(tmp_path), 3)
    with open(path, "wb") as handle:
        handle.write(wal.MAGIC[:5])
    writer = wal.SegmentWriter(str(tmp_path), 3)
    assert not writer.resumed and writer.size == wal.HEADER_SIZE
    writer.close()


def test_a_file_that_is_not_a_segment_is_never_overwritten(tmp_path):
    path = wal.segment_path(str(tmp_path), 4)
    with open(path, "wb") as handle:
        handle.write(b"somebody else's data" * 10)
    with pytest.raises(OSError, match="not a Pion log segment"):
        wal.SegmentWriter(str(tmp_path), 4)
    assert open(path, "rb").read() == b"somebody else's data" * 10


def test_a_failed_open_of_a_new_segment_leaks_no_descriptor(tmp_path, monkeypatch):
    fds_before = len(os.listdir("/proc/self/fd"))
    real_write = os.pwrite

    def failing(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", failing)
    for number in range(20):
        with pytest.raises(OSError):
            wal.SegmentWriter(str(tmp_path), number)
    monkeypatch.setattr(os, "pwrite", real_write)
    time.sleep(0)
    assert len(os.listdir("/proc/self/fd")) <= fds_before
