"""Snapshots end to end: BGSAVE/SAVE/BGREWRITEAOF replies, save rules, automatic rewrite, the
snapshot + log equal to the live state (also under concurrent writes and FLUSHALL/SWAPDB), INFO."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from pion.storage import wal
from tests.conftest import RawConnection
from tests.recovery.helpers import DirServer, full_dump, populate, wait_for


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data")
    yield srv
    srv.stop()


def test_snapshot_plus_log_replay_equals_the_live_state(node):
    node.start()
    r = node.client()
    populate(r, 200)
    assert r.bgsave()
    wait_for(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0)
    for i in range(100):  # after the snapshot: only in the log
        r.set(f"after{i}", i)
        r.hset("h", f"f{i}", i)
        r.lpush("l", i)
    r.delete("s10")
    live = full_dump(r)
    segments_before = wal.list_segments(str(node.datadir / "wal"))
    node.restart()
    assert full_dump(node.client()) == live
    assert all(n > segments_before[0][0] - 1 for n, _ in segments_before)


def test_bgsave_under_concurrent_writes_is_exactly_the_cut(node):
    node.start()
    r = node.client()
    pipe = r.pipeline(transaction=False)
    for i in range(20000):
        pipe.set(f"k{i}", "x" * 20)
    pipe.execute()
    stop = threading.Event()

    def writer() -> None:
        w = node.client()
        i = 0
        while not stop.is_set():
            w.incr("ctr")
            w.hset("hh", f"f{i % 50}", i)
            w.lpush("ll", i)
            w.delete(f"k{i}")
            w.set(f"new{i}", i)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.05)
    assert r.bgsave()
    wait_for(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 60)
    stop.set()
    thread.join()
    info = r.info("persistence")
    assert info["rdb_last_bgsave_status"] == "ok" and info["rdb_saves"] >= 1
    live = full_dump(r, databases=1)
    node.restart()
    assert full_dump(node.client(), databases=1) == live


def test_automatic_rewrite_compacts_the_log(node):
    node.start(auto_aof_rewrite_min_size=4096, auto_aof_rewrite_percentage=100)
    r = node.client()
    for i in range(300):
        r.set("same-key", "v" * 40 + str(i))
    wait_for(lambda: r.info("persistence")["aof_rewrites"] >= 1, 10)
    assert r.info("persistence")["aof_current_size"] < 20000
    node.restart()
    assert node.client().get("same-key") == b"v" * 40 + b"299"


def test_save_rules_trigger_a_background_save(node):
    node.start(save="1 1")
    r = node.client()
    first = r.lastsave()
    r.set("k", "v")
    wait_for(lambda: r.info("persistence")["rdb_saves"] >= 1, 10)
    assert r.lastsave() >= first and r.info("persistence")["rdb_changes_since_last_save"] == 0
    assert os.path.exists(node.datadir / "snapshot.pion")


def test_save_bgsave_bgrewriteaof_replies(node):
    node.start()
    r = node.client()
    raw = RawConnection(node.port)
    r.set("k", "v")

    def reply(*argv: str) -> bytes:
        raw.cmd(*argv)
        time.sleep(0.05)
        return raw.read_some()

    assert reply("SAVE") == b"+OK\r\n"
    assert r.info("persistence")["rdb_saves"] == 1
    assert reply("BGSAVE") == b"+Background saving started\r\n"
    wait_for(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0)
    assert reply("BGREWRITEAOF") == b"+Background append only file rewriting started\r\n"
    wait_for(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0)
    assert r.info("persistence")["aof_rewrites"] == 1
    assert reply("BGSAVE", "NOW") == b"-ERR syntax error\r\n"
    assert reply("BGSAVE", "SCHEDULE") == b"+Background saving started\r\n"
    wait_for(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0)
    assert reply("LASTSAVE").startswith(b":")
    raw.close()


def test_debug_reload_keeps_the_data(node):
    node.start(enable_debug_command="yes")
    r = node.client()
    populate(r)
    live = full_dump(r)
    assert r.execute_command("DEBUG", "RELOAD") == b"OK"
    assert full_dump(r) == live


def test_info_persistence_is_truthful(node):
    node.start()
    r = node.client()
    info = r.info("persistence")
    assert info["aof_enabled"] == 1 and info["loading"] == 0 and info["rdb_bgsave_in_progress"] == 0
    r.set("a", 1)
    r.set("b", 2)
    assert r.info("persistence")["rdb_changes_since_last_save"] == 2
    r.execute_command("SAVE")
    info = r.info("persistence")
    assert info["rdb_changes_since_last_save"] == 0 and info["rdb_last_bgsave_status"] == "ok"
    assert abs(info["rdb_last_save_time"] - time.time()) < 5
    assert info["aof_current_size"] >= info["aof_base_size"] > 0


def test_appendonly_no_keeps_snapshots_only(node):
    node.start(appendonly=False)
    r = node.client()
    r.set("k", "v")
    assert r.info("persistence")["aof_enabled"] == 0
    assert not wal.list_segments(str(node.datadir / "wal"))
    r.execute_command("SAVE")
    r.set("unsaved", "v")
    node.restart()  # shutdown with save rules saves, as Redis does
    r = node.client()
    assert r.get("k") == b"v" and r.get("unsaved") == b"v"


def test_config_set_appendonly_switches_the_log_on_and_off(node):
    node.start(appendonly=False)
    r = node.client()
    r.set("before", "1")
    r.config_set("appendonly", "yes")
    r.set("after", "2")
    assert r.info("persistence")["aof_enabled"] == 1
    node.restart(appendonly=True)
    r = node.client()
    assert r.get("before") == b"1" and r.get("after") == b"2"


@pytest.mark.parametrize("command", [("FLUSHALL",), ("SWAPDB", "0", "1")])
def test_a_flush_or_swap_during_bgsave_restarts_it_and_the_result_is_exact(node, command, caplog):
    caplog.set_level(logging.INFO, logger="pion.snapshot")
    node.start()
    r = node.client()
    pipe = r.pipeline(transaction=False)
    for i in range(30000):
        pipe.set(f"k{i}", "v")
    pipe.execute()
    r.execute_command("SELECT", 1)
    r.set("in-db1", "x")
    r.execute_command("SELECT", 0)
    persistence = node.server.parts.persistence
    r.bgsave()
    r.execute_command(*command)
    r.set("after", "1")
    wait_for(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 30)
    live = full_dump(r, databases=2)
    assert persistence.saves == 1 and "snapshot restarted" in caplog.text
    node.restart()
    assert full_dump(node.client(), databases=2) == live
