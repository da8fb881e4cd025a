"""K/V rows live in arenas: logged by reference, mapped (not read) on restart, kept out of snapshots
by reference, and arena space is reclaimed after a snapshot once nothing refers to it."""

from __future__ import annotations

import os

import pytest
import redis

from pion.storage import wal
from tests.recovery.helpers import DirServer

ROWS, DIM = 64, 1024


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data")
    yield srv
    srv.stop()


def store(r, sid: str, blob: bytes) -> None:
    r.execute_command("V.CREATE", sid, DIM, "VQUANT", "fp16")
    assert r.execute_command("V.STOREBATCH", sid, 0, 0, ROWS, blob, "FMT", "RAW") == b"OK"


def fetch(r, sid: str) -> bytes:
    return r.execute_command("V.FETCH", sid, 0, "RANGE", 0, ROWS, "FMT", "RAW")


def held_views(node) -> int:
    return len(node.call(node.server.parts.arenas.held))


def test_rows_are_logged_by_reference_and_mapped_after_a_restart(node):
    node.start()
    r = node.client()
    blob = os.urandom(ROWS * DIM * 2)
    store(r, "s", blob)
    log_bytes = sum(os.path.getsize(p) for _, p in wal.list_segments(str(node.datadir / "wal")))
    assert log_bytes < 4096  # the 128 KiB of rows are in the arena, the record holds a ref
    node.restart()
    r = node.client()
    assert fetch(r, "s") == blob
    assert held_views(node) >= 1  # the engine kept the mapped view it got on replay
    assert node.server.parts.persistence.recovery.records >= 2


def test_a_snapshot_refers_to_rows_instead_of_copying_them(node):
    node.start()
    r = node.client()
    blobs = [os.urandom(ROWS * DIM * 2) for _ in range(4)]
    for i, blob in enumerate(blobs):
        store(r, f"s{i}", blob)
    r.execute_command("SAVE")
    assert os.path.getsize(node.datadir / "snapshot.pion") < 64 * 1024
    assert not wal.list_segments(str(node.datadir / "wal"))  # covered segments are gone
    node.restart()
    r = node.client()
    assert [fetch(r, f"s{i}") for i in range(4)] == blobs
    assert held_views(node) >= 4


def test_dropped_rows_are_reclaimed_after_a_snapshot(node):
    node.start()
    r = node.client()
    keep, drop = os.urandom(ROWS * DIM * 2), os.urandom(ROWS * DIM * 2)
    store(r, "keep", keep)
    store(r, "drop", drop)
    node.restart()  # the rows now sit in an old (read-only) arena
    r = node.client()
    assert r.execute_command("V.DROP", "drop") == 1
    arenas = node.server.parts.arenas
    before = arenas.reclaimed_bytes
    r.execute_command("SAVE")
    assert arenas.reclaimed_bytes - before >= len(drop) - 8192
    node.restart()
    r = node.client()
    assert fetch(r, "keep") == keep
    with pytest.raises(redis.exceptions.ResponseError, match="not found"):
        r.execute_command("V.INFO", "drop")
