"""Atomicity and the time limit: other clients wait for a short script, get -BUSY past
busy-reply-threshold, SCRIPT KILL / FUNCTION KILL stop a script that has not written, a script
that wrote is UNKILLABLE and still lands in the log as one record."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from tests.compat.test_scripting import record_journal
from tests.support.servers import ProcessServer

BUSY_EVAL = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
BUSY_FUNCTION = "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
SPIN = "while true do end"
#: spins on CPU time for ARGV[1] seconds
SPIN_FOR = "local t = os.clock() while os.clock() - t < tonumber(ARGV[1]) do end"


class Background:
    """Runs one command on its own connection; ``result`` is its reply or the exception."""

    def __init__(self, port: int, *command) -> None:
        self.client = redis.Redis(port=port, socket_timeout=30)
        self.result = None
        self.thread = threading.Thread(target=self._run, args=command, daemon=True)
        self.thread.start()

    def _run(self, *command) -> None:
        try:
            self.result = self.client.execute_command(*command)
        except redis.RedisError as exc:
            self.result = exc

    def join(self) -> object:
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.client.close()
        return self.result


def wait_busy(client: redis.Redis, text: str = BUSY_EVAL) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            client.ping()
        except redis.exceptions.BusyLoadingError:
            raise
        except redis.ResponseError as exc:
            assert str(exc) == text
            return
        time.sleep(0.02)
    raise AssertionError("never answered BUSY")


@pytest.fixture
def fast(server, r):
    r.config_set("busy-reply-threshold", 100)
    return server


def test_other_clients_wait_for_a_short_script(server, r):
    script = f"redis.call('set', 'x', '1') {SPIN_FOR} redis.call('set', 'x', '2') return 1"
    job = Background(server.port, "EVAL", script, 0, "0.3")
    time.sleep(0.1)
    assert r.get("x") == b"2"  # waited for the whole script: never sees x=1
    assert job.join() == 1


def test_runaway_script_answers_busy_and_is_killed(fast, r):
    job = Background(fast.port, "EVAL", SPIN, 0)
    wait_busy(r)
    with pytest.raises(redis.ResponseError, match=f"^{BUSY_EVAL}$"):
        r.get("x")
    with pytest.raises(redis.ResponseError, match=f"^{BUSY_EVAL}$"):
        r.execute_command("FUNCTION", "KILL")
    with pytest.raises(redis.ResponseError, match=f"^{BUSY_EVAL}$"):
        r.execute_command("SHUTDOWN")
    assert r.execute_command("MULTI") == b"OK"
    assert r.execute_command("DISCARD") == b"OK"
    assert r.script_kill()
    result = job.join()
    assert isinstance(result, redis.ResponseError)
    assert str(result).startswith("Script killed by user with SCRIPT KILL... script: ")
    assert str(result).endswith(", on @user_script:1.")
    assert r.ping()
    with pytest.raises(redis.ResponseError, match="No scripts in execution right now."):
        r.script_kill()


def test_pcall_cannot_swallow_the_kill(fast, r):
    job = Background(fast.port, "EVAL", f"while true do pcall(function() {SPIN} end) end", 0)
    wait_busy(r)
    assert r.script_kill()
    assert "Script killed by user" in str(job.join())


def test_runaway_function_stats_and_function_kill(fast, r):
    r.execute_command("FUNCTION", "LOAD", f"#!lua name=spin\nredis.register_function('spin', function() {SPIN} end)")
    job = Background(fast.port, "FCALL", "spin", 0)
    wait_busy(r, BUSY_FUNCTION)
    stats = r.execute_command("FUNCTION", "STATS")
    running = dict(zip(stats[1][::2], stats[1][1::2], strict=True))
    assert running[b"name"] == b"spin" and running[b"command"] == [b"FCALL", b"spin", b"0"]
    with pytest.raises(redis.ResponseError, match=f"^{BUSY_FUNCTION}$"):
        r.script_kill()
    assert r.execute_command("FUNCTION", "KILL") == b"OK"
    assert str(job.join()) == "Script killed by user with SCRIPT KILL... script: spin, on @user_function:2."


def test_script_that_wrote_is_unkillable_and_logged_once(fast, r):
    records = record_journal(fast)
    script = f"redis.call('set', 'a', '1') {SPIN_FOR} redis.call('set', 'b', '2') return 'done'"
    job = Background(fast.port, "EVAL", script, 0, "0.6")
    wait_busy(r)
    with pytest.raises(redis.ResponseError, match="^UNKILLABLE Sorry the script already executed write commands"):
        r.script_kill()
    assert job.join() == b"done"
    assert r.mget("a", "b") == [b"1", b"2"]
    assert records == [[[b"set", b"a", b"1"], [b"set", b"b", b"2"]]]


def test_blocked_client_is_served_after_the_detached_script(fast, r):
    records = record_journal(fast)
    waiter = Background(fast.port, "BLPOP", "queue", 0)
    time.sleep(0.2)
    job = Background(fast.port, "EVAL", f"redis.call('rpush', 'queue', 'item') {SPIN_FOR} return 1", 0, "0.4")
    wait_busy(r)
    assert waiter.thread.is_alive()  # not served in the middle of the script
    assert job.join() == 1
    assert list(waiter.join()) == [b"queue", b"item"]
    assert records[0] == [[b"rpush", b"queue", b"item"]]
    assert len(records) == 2  # the pop, logged after the script


def test_stopping_the_server_stops_a_running_script(fast, r):
    Background(fast.port, "EVAL", SPIN, 0)
    wait_busy(r)
    run = fast.server.parts.scripting.runner.current
    assert run is not None and run.detached
    fast.stop()
    assert run.done  # stopped at its next hook, not left suspended


@pytest.mark.slow
def test_shutdown_nosave_during_an_unkillable_script_keeps_none_of_its_effects(tmp_path):
    srv = ProcessServer(tmp_path / "data", "--busy-reply-threshold", "100").start()
    try:
        client = redis.Redis(port=srv.port, socket_timeout=10)
        client.set("before", "1")
        job = Background(srv.port, "EVAL", f"redis.call('set', 'partial', '1') {SPIN}", 0)
        wait_busy(client)
        with pytest.raises(redis.ResponseError, match="^UNKILLABLE"):
            client.script_kill()
        with pytest.raises(redis.exceptions.ConnectionError):
            client.execute_command("SHUTDOWN", "NOSAVE")
        assert srv.proc.wait(20) is not None
        assert isinstance(job.join(), redis.exceptions.ConnectionError)
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        client = redis.Redis(port=srv.port, socket_timeout=10)
        assert client.get("before") == b"1"
        assert client.get("partial") is None
    finally:
        srv.stop()
