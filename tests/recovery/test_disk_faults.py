"""A failing disk under big values and K/V rows (issue #13, item 1): a failed arena write answers
-MISCONF and changes nothing, the write status says so, nobody reads a change that was not made
durable, and acknowledged writes survive kill -9. Faults come from the injection layer
(``pion.storage.faults``: ENOSPC and EIO at exact points) and from a real, small, full tmpfs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import redis

from pion.storage import faults, wal
from tests.recovery.helpers import DirServer, wait_for
from tests.support.disks import Filler, tmpfs
from tests.support.servers import ProcessServer

BIG = 1_228_800  # over blob-threshold (1 MiB): goes to an arena


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm()


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data").start()
    yield srv
    srv.stop()


def write_status(r: redis.Redis) -> str:
    return r.info("persistence")["aof_last_write_status"]


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EIO"])
def test_a_failed_arena_write_answers_misconf_and_changes_nothing(node, errno_name):
    r, other = node.client(), node.client()
    r.set("big", b"a" * BIG)
    faults.arm("arena.write", errno_name)
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        r.set("big", b"b" * BIG)
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        r.set("new", b"c" * BIG)
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        r.append("big", b"d" * BIG)
    assert other.get("big") == b"a" * BIG and other.exists("new") == 0
    assert write_status(other) == "err"
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        r.set("small", "1")  # while the error lasts every write is refused, as for the log
    faults.disarm()
    wait_for(lambda: _try_set(r, "small", "1"), timeout=5)
    assert write_status(r) == "ok"
    r.append("big", "tail")
    node.restart()
    r = node.client()
    assert r.strlen("big") == BIG + 4 and r.exists("new") == 0 and r.get("small") == b"1"


def _try_set(r: redis.Redis, key: str, value: str) -> bool:
    try:
        return bool(r.set(key, value))
    except redis.ResponseError:
        return False


def test_a_transaction_with_a_big_value_on_a_failing_disk_is_discarded_whole(node):
    r = node.client()
    faults.arm("arena.write", "ENOSPC", count=1)
    pipe = r.pipeline(transaction=True)
    pipe.set("a", "1").incr("ctr").set("big", b"x" * BIG).set("b", "1")
    with pytest.raises(redis.ResponseError, match="discarded because of: MISCONF"):
        pipe.execute()
    assert r.mget("a", "ctr", "big", "b") == [None] * 4


def test_a_value_the_server_builds_is_logged_inline_when_the_arena_fails(node):
    """SETRANGE far past the end makes a big value from small arguments: nothing to write before
    the command runs, so the record carries the bytes itself and stays durable."""
    r = node.client()
    faults.arm("arena.write", "EIO", count=-1)
    pipe = r.pipeline(transaction=True)  # EXEC's staging has nothing big to write either
    pipe.setrange("built", BIG, b"end")
    assert pipe.execute() == [BIG + 3]
    faults.disarm()
    node.restart()
    value = node.client().get("built")
    assert len(value) == BIG + 3 and value.endswith(b"end")


@pytest.mark.parametrize("point", ["arena.sync", "wal.write", "wal.sync"])
def test_a_failed_log_or_arena_sync_answers_misconf_then_the_retry_makes_it_durable(node, point):
    r = node.client()
    faults.arm(point, "EIO", count=1)
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        r.set("big", b"z" * BIG)
    wait_for(lambda: write_status(r) == "ok", timeout=5)
    node.restart()
    assert node.client().strlen("big") == BIG  # the change was kept and written by the retry


@pytest.mark.parametrize("rows", [64, 4096])  # the small path on the loop, the deferred one in workers
def test_kv_rows_on_a_failing_disk_answer_misconf_and_store_nothing(node, rows):
    r = node.client()
    r.execute_command("V.CREATE", "s", 64, "VQUANT", "fp16")
    blob = np.ones((rows, 64), dtype=np.float32).tobytes()
    faults.arm("arena.write", "ENOSPC", count=-1)
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        r.execute_command("V.STOREBATCH", "s", 0, 0, rows, blob)
    assert b"layer_0_tokens" not in r.execute_command("V.INFO", "s")
    faults.disarm()
    wait_for(lambda: _try_store(r, rows, blob), timeout=5)
    node.restart()
    assert b"layer_0_tokens:%d" % rows in node.client().execute_command("V.INFO", "s")


def _try_store(r: redis.Redis, rows: int, blob: bytes) -> bool:
    try:
        return r.execute_command("V.STOREBATCH", "s", 0, 0, rows, blob) == b"OK"
    except redis.ResponseError:
        return False


def test_no_reply_shows_a_write_before_its_record_is_durable(node, monkeypatch):
    """A reader on another connection must not see a write whose fsync has not returned: had the
    server died then, it would have seen a value that never existed."""
    gate = threading.Event()
    real_sync = wal.SegmentWriter.sync

    def slow_sync(self):
        gate.wait(10)
        real_sync(self)

    writer, reader = node.client(), node.client()
    writer.set("warm", "up")  # the segment exists; its next sync waits for the gate
    monkeypatch.setattr(wal.SegmentWriter, "sync", slow_sync)
    results: dict[str, object] = {}
    threading.Thread(target=lambda: results.setdefault("set", writer.set("x", "new")), daemon=True).start()
    wait_for(lambda: node.call(lambda: node.server.journal.seq) >= 2)
    threading.Thread(target=lambda: results.setdefault("get", reader.get("x")), daemon=True).start()
    time.sleep(0.3)
    assert results == {}  # neither the write's reply nor the read that would show it left
    gate.set()
    wait_for(lambda: len(results) == 2)
    assert results == {"set": True, "get": b"new"}


# -- a real full disk --------------------------------------------------------------------------


def test_full_tmpfs_big_values_misconf_then_recover_and_survive_kill9(tmp_path):
    """Issue #13's reproduction: on a full disk SET of a 1.2 MB value answered nothing, the value
    stayed in memory unlogged, and a later acknowledged APPEND was lost after kill -9."""
    with tmpfs(tmp_path / "disk", "64m") as disk:
        server = ProcessServer(disk / "data").start()
        filler = Filler(disk / "filler")
        try:
            r, other = redis.Redis(port=server.port, socket_timeout=20), redis.Redis(port=server.port, socket_timeout=20)
            r.set("big", b"x" * BIG)
            filler.fill()
            with pytest.raises(redis.ResponseError, match="^MISCONF"):
                r.set("big2", b"y" * BIG)
            assert other.exists("big2") == 0 and other.strlen("big") == BIG
            assert write_status(other) == "err"
            assert "arena write failed" in (disk / "data" / "server.log").read_text()
            filler.free()
            wait_for(lambda: _try_set(r, "ok", "1"), timeout=10)
            r.set("big2", b"y" * BIG)
            assert r.append("big2", "tail") == BIG + 4
            server.kill9()
            server.start()
            r = redis.Redis(port=server.port, socket_timeout=20)
            assert r.strlen("big2") == BIG + 4 and r.strlen("big") == BIG and r.get("ok") == b"1"
        finally:
            server.stop()


def _store_attention(r: redis.Redis) -> object:
    side = np.ones((2, 512, 64), np.float32).tobytes()
    return r.execute_command("ATTEND.PREFIX.STORE", "att", 0, 2, 512, 64, side, side)


def _store_state(r: redis.Redis) -> object:
    return r.execute_command("SSM.PREFIX.STORE", "ssm", 0, b"s" * 300_000)


def _import_artifact(r: redis.Redis) -> object:
    return r.execute_command("KV.PREFIX.IMPORT", _import_artifact.blob)


@pytest.mark.parametrize(("store", "stored"), [
    (_store_attention, lambda r: r.execute_command("ATTEND.PREFIX.LOOKUP", "att", 0) != b"MISS"),
    (_store_state, lambda r: r.execute_command("SSM.PREFIX.FETCH", "ssm", 0) is not None),
    (_import_artifact, lambda r: r.execute_command("KV.PREFIX.MANIFEST", "art") is not None),
], ids=["attend-store", "ssm-store", "prefix-import"])
def test_other_arena_writers_on_a_failing_disk_answer_misconf_and_store_nothing(node, store, stored):
    """The same rule for every command that puts bytes in an arena (issue #13, item 1, same class)."""
    from pion.codecs.artifact import Artifact, pack

    rows = np.ones((64, 64), np.float16).tobytes()
    _import_artifact.blob = pack(Artifact(
        ns=b"art", kv_dim=64, vquant="fp16", manifest_raw=b'{"n_layers": 1, "token_count": 64}',
        tokens=np.arange(64, dtype=np.uint32), k_codecs=["fp16"], v_codecs=["fp16"], rows=[(rows, rows)]))
    r = node.client()
    faults.arm("arena.write", "ENOSPC", count=-1)
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        store(r)
    assert not stored(r) and write_status(r) == "err"
    faults.disarm()
    wait_for(lambda: _try(store, r), timeout=5)
    node.restart()
    assert stored(node.client())


def _try(store, r: redis.Redis) -> bool:
    try:
        store(r)
        return True
    except redis.ResponseError:
        return False
