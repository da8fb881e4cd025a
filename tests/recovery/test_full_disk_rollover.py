"""Issue #26's exact sequence on a real full disk: a group-commit batch that spans a log
rollover while the disk has no byte left, the writer's retry, then the disk freed.

A 4 MiB tmpfs holds the data directory (``--wal-segment-size 64kb --appendfsync always --save
""``). 440 acknowledged SETs fill segment N to about 500 bytes short of its rollover; the disk is
filled to its last byte; one packet of 10 SETs arrives: its first records fit N's last page, the
next segment's header needs a new page and gets ENOSPC. Before the fix, the retry re-opened N
with ``O_TRUNC`` (the truncation freed pages, so the retry "succeeded" and INFO said ok again)
and all 440 acknowledged keys were gone after a SIGKILL. Now: while the disk is full INFO says
``err``, and after the disk is freed, one more acknowledged SET, SIGKILL and a restart, every
acknowledged write is there (the 440, those of the 10 answered OK, the last one); a SET of the
packet answered -MISCONF may be there (the later acknowledged SET follows its record) but only
with its own value.
"""

from __future__ import annotations

import time

import redis

from pion.storage import wal
from tests.recovery.fault_matrix import breadcrumbs_outside, client
from tests.support.disks import Filler, tmpfs
from tests.support.servers import ProcessServer

SEGMENT = 64 * 1024
SHORT_BY = 500


def _record_size(key: bytes, value: bytes) -> int:
    return len(wal.frame(wal.encode_effects([(0, [b"SET", key, value])])))


def _values(keys: list[bytes], total: int) -> list[bytes]:
    """Values that make the records of ``keys`` take ``total`` bytes together (sizes differ by
    at most one byte)."""
    base = _record_size(keys[0], b"")
    per, extra = divmod(total, len(keys))
    out = []
    for i, key in enumerate(keys):
        want = per + (1 if i < extra else 0)
        size = want - base
        while _record_size(key, b"v" * size) > want:  # the length prefix grew a digit
            size -= 1
        out.append(b"v" * size)
    return out


def _try_set(r: redis.Redis, key: bytes, value: bytes) -> bool:
    try:
        return bool(r.set(key, value))
    except redis.ResponseError as exc:
        assert str(exc).startswith("MISCONF"), exc
        return False


def test_a_batch_across_a_rollover_on_a_full_disk_loses_nothing(tmp_path):
    with tmpfs(tmp_path / "disk", "4m") as disk:
        datadir = disk / "data"
        server = ProcessServer(datadir, "--wal-segment-size", "64kb", "--appendfsync", "always", "--save", "",
                               *breadcrumbs_outside(disk / "elsewhere"))
        server.log_path = tmp_path / "server.log"  # not on the full disk
        filler = Filler(disk / "filler")
        try:
            server.start(timeout=120)
            r = client(server.port)
            keys = [b"a:%03d" % i for i in range(440)]
            values = _values(keys, SEGMENT - wal.HEADER_SIZE - SHORT_BY)
            for key, value in zip(keys, values, strict=True):
                assert r.set(key, value)
            number, path = wal.list_segments(str(datadir / "wal"))[-1]
            room = SEGMENT - (datadir / "wal" / path.rsplit("/", 1)[1]).stat().st_size
            assert SHORT_BY - 100 <= room <= SHORT_BY + 100, f"segment {number} is {room} bytes short of its rollover"

            filler.fill()
            batch = [(b"b:%d" % i, b"w" * (len(values[0]) - 1)) for i in range(10)]
            pipe = r.pipeline(transaction=False)
            for key, value in batch:
                pipe.set(key, value)
            replies = pipe.execute(raise_on_error=False)
            for reply in replies:
                assert reply is True or str(reply).startswith("MISCONF"), reply
            refused = [key for (key, _), reply in zip(batch, replies, strict=True) if reply is not True]
            assert refused, "the disk was full: the next segment could not start"
            time.sleep(2.5)  # the writer retries every second: two retries against the full disk
            assert r.info("persistence")["aof_last_write_status"] == "err", \
                "INFO says ok while the disk is full and the packet's records are not on it"

            filler.free()
            deadline = time.monotonic() + 15
            while not _try_set(r, b"last", b"after the disk was freed"):
                assert time.monotonic() < deadline, "writes still refused 15 s after the disk was freed"
                time.sleep(0.1)
            assert r.info("persistence")["aof_last_write_status"] == "ok"

            server.kill9()
            server.start(timeout=120)
            r = client(server.port)
            got = r.mget(keys)
            lost = [key for key, value, seen in zip(keys, values, got, strict=True) if seen != value]
            assert not lost, f"{len(lost)} of the 440 acknowledged SETs lost, e.g. {lost[:5]}"
            assert r.get(b"last") == b"after the disk was freed"
            for (key, value), reply in zip(batch, replies, strict=True):
                seen = r.get(key)
                if reply is True:
                    assert seen == value, f"{key!r} was acknowledged, recovered {seen!r:.40}"
                else:
                    assert seen in (None, value), f"{key!r} was refused, recovered {seen!r:.40}"
        finally:
            server.kill9()
            filler.free()
