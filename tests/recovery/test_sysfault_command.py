"""DEBUG SYSFAULT (the syscall-level injector on a running server): it arms, counts, traces and
disarms; bad arguments get an error and arm nothing; without enable-debug-command it is refused."""

from __future__ import annotations

import os

import pytest
import redis

from pion.storage import faults
from tests.recovery.helpers import DirServer, wait_for

REAL_FSYNC = os.fsync


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data", enable_debug_command="yes", appendfsync="always").start()
    yield srv
    srv.stop()
    faults.disarm_syscall()


def _try_set(r: redis.Redis) -> bool:
    try:
        return bool(r.set("k", "v"))
    except redis.ResponseError:
        return False


def test_an_armed_fsync_fails_the_next_write_and_off_puts_the_real_function_back(node):
    r = node.client()
    assert r.execute_command("DEBUG", "SYSFAULT", "fsync", 1, "EIO") == b"OK"
    assert os.fsync is not REAL_FSYNC
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        r.set("a", "1")
    counts = r.execute_command("DEBUG", "SYSFAULT", "COUNT")
    counts = dict(zip(counts[::2], counts[1::2], strict=True)) if isinstance(counts, list) else counts
    assert counts[b"injected"] == 1 and counts[b"fsync"] >= 1 and counts[b"pwrite"] >= 1
    assert r.execute_command("DEBUG", "SYSFAULT", "OFF") == b"OK"
    assert os.fsync is REAL_FSYNC
    wait_for(lambda: _try_set(r), timeout=10)
    assert r.info("persistence")["aof_last_write_status"] == "ok"


def test_watch_counts_and_traces_the_log_files(node):
    r = node.client()
    r.execute_command("DEBUG", "SYSFAULT", "WATCH")
    r.set("a", "1")
    trace = [line.decode() for line in r.execute_command("DEBUG", "SYSFAULT", "TRACE")]
    r.execute_command("DEBUG", "SYSFAULT", "OFF")
    assert any(line.startswith("pwrite 1 ") and "/wal/" in line for line in trace), trace
    assert any(line.startswith("fsync ") for line in trace), trace


@pytest.mark.parametrize("args,message", [
    (["bogus"], r"DEBUG SYSFAULT \[ALSO\] <op>"),
    (["chmod", "1", "EIO"], "unknown operation"),
    (["pwrite", "x", "EIO"], "must be an integer"),
    (["pwrite", "0", "EIO"], "counts from 1"),
    (["pwrite", "1", "EWHAT"], "unknown errno"),
    (["pwrite", "1", "EIO", "MAYBE"], r"DEBUG SYSFAULT \[ALSO\] <op>"),
    (["ALSO", "ftruncate", "1", "EIO"], "nothing is armed"),
])
def test_bad_arguments_are_refused_and_arm_nothing(node, args, message):
    r = node.client()
    with pytest.raises(redis.ResponseError, match=message):
        r.execute_command("DEBUG", "SYSFAULT", *args)
    assert faults.syscall_faults() == {} and os.fsync is REAL_FSYNC
    assert r.set("a", "1")


def test_refused_without_enable_debug_command(tmp_path):
    srv = DirServer(tmp_path / "data").start()
    try:
        with pytest.raises(redis.ResponseError, match="DEBUG command not allowed"):
            srv.client().execute_command("DEBUG", "SYSFAULT", "fsync", 1, "EIO")
        assert faults.syscall_faults() == {}
    finally:
        srv.stop()
