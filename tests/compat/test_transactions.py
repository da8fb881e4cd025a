"""MULTI/EXEC/DISCARD/WATCH with Redis 7's semantics, through redis-py and raw bytes."""

import threading
import time

import pytest
import redis


def test_exec_runs_queued_commands_in_order(rr):
    pipe = rr.pipeline(transaction=True)
    pipe.set("a", "1").incr("a").get("a")
    assert pipe.execute() == [True, 2, b"2"]


def test_queue_time_error_aborts_with_execabort(raw):
    raw.cmd("MULTI")
    raw.cmd("SET", "k", "v")
    raw.cmd("NOSUCHCMD")
    raw.cmd("EXEC")
    raw.cmd("GET", "k")
    expected = (
        b"+OK\r\n+QUEUED\r\n"
        b"-ERR unknown command 'NOSUCHCMD', with args beginning with: \r\n"
        b"-EXECABORT Transaction discarded because of previous errors.\r\n$-1\r\n"
    )
    assert raw.read_exactly(expected) == expected


def test_wrong_arity_inside_multi_aborts(raw):
    raw.cmd("MULTI")
    raw.cmd("GET")
    raw.cmd("EXEC")
    expected = (
        b"+OK\r\n-ERR wrong number of arguments for 'get' command\r\n"
        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    )
    assert raw.read_exactly(expected) == expected


def test_runtime_error_inside_exec_does_not_abort_the_rest(r):
    r.set("s", "text")
    pipe = r.pipeline(transaction=True)
    pipe.incr("s").set("after", "yes")
    results = pipe.execute(raise_on_error=False)
    assert isinstance(results[0], redis.ResponseError)
    assert results[1] is True
    assert r.get("after") == b"yes"


def test_nested_multi_and_exec_without_multi_errors(r):
    with pytest.raises(redis.ResponseError, match="EXEC without MULTI"):
        r.execute_command("EXEC")
    with pytest.raises(redis.ResponseError, match="DISCARD without MULTI"):
        r.execute_command("DISCARD")


def test_nested_multi_raw(raw):
    raw.cmd("MULTI")
    raw.cmd("MULTI")
    raw.cmd("DISCARD")
    expected = b"+OK\r\n-ERR MULTI calls can not be nested\r\n+OK\r\n"
    assert raw.read_exactly(expected) == expected


def test_discard_drops_queue(r, raw):
    raw.cmd("MULTI")
    raw.cmd("SET", "x", "1")
    raw.cmd("DISCARD")
    assert raw.read_exactly(b"+OK\r\n+QUEUED\r\n+OK\r\n") == b"+OK\r\n+QUEUED\r\n+OK\r\n"
    assert r.get("x") is None


def test_watch_aborts_when_another_client_modifies(server, rr):
    other = redis.Redis(port=server.port)
    rr.set("w", "0")
    with rr.pipeline() as pipe:
        pipe.watch("w")
        other.set("w", "changed")
        pipe.multi()
        pipe.set("w", "mine")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert rr.get("w") == b"changed"


def test_watch_null_reply_raw(server, raw):
    other = redis.Redis(port=server.port)
    raw.cmd("WATCH", "k")
    other.set("k", "v")
    raw.cmd("MULTI")
    raw.cmd("SET", "k", "mine")
    raw.cmd("EXEC")
    expected = b"+OK\r\n+OK\r\n+QUEUED\r\n*-1\r\n"
    assert raw.read_exactly(expected) == expected


def test_watch_inside_multi_is_refused(raw):
    raw.cmd("MULTI")
    raw.cmd("WATCH", "x")
    raw.cmd("EXEC")
    expected = b"+OK\r\n-ERR WATCH inside MULTI is not allowed\r\n*0\r\n"
    assert raw.read_exactly(expected) == expected


def test_watched_key_expiring_aborts_exec(r):
    r.set("e", "v", px=50)
    with r.pipeline() as pipe:
        pipe.watch("e")
        time.sleep(0.12)
        pipe.multi()
        pipe.set("other", "1")
        with pytest.raises(redis.WatchError):
            pipe.execute()


def test_watching_an_already_stale_key_does_not_abort(server, r):
    server.call(lambda: setattr(server.server, "active_expire_enabled", False))
    r.set("stale", "v", px=1)
    time.sleep(0.02)
    with r.pipeline() as pipe:
        pipe.watch("stale")
        pipe.multi()
        pipe.set("x", "1")
        assert pipe.execute() == [True]


def test_unwatch_clears_watch(server, r):
    other = redis.Redis(port=server.port)
    r.execute_command("WATCH", "u")
    other.set("u", "1")
    r.execute_command("UNWATCH")
    with r.pipeline() as pipe:
        pipe.multi()
        pipe.set("u", "2")
        assert pipe.execute() == [True]


def test_blocking_command_in_multi_answers_at_once(r):
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("BLPOP", "nolist", "0")
    assert pipe.execute() == [None]


def test_exec_is_logged_as_one_record(server, r):
    records = []
    journal = server.server.journal
    original = journal.append

    def spy(effects):
        records.append(effects)
        return original(effects)

    server.call(lambda: setattr(journal, "append", spy))
    pipe = r.pipeline(transaction=True)
    pipe.set("a", "1").set("b", "2").get("a")
    pipe.execute()
    assert [[argv for _, argv in rec] for rec in records] == [[[b"SET", b"a", b"1"], [b"SET", b"b", b"2"]]]


def test_concurrent_incr_with_watch_is_consistent(server):
    def worker():
        c = redis.Redis(port=server.port)
        for _ in range(30):
            with c.pipeline() as pipe:
                while True:
                    try:
                        pipe.watch("counter")
                        value = int(pipe.get("counter") or 0)
                        pipe.multi()
                        pipe.set("counter", value + 1)
                        pipe.execute()
                        break
                    except redis.WatchError:
                        continue

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(redis.Redis(port=server.port).get("counter")) == 120


# -- found by Redis's own test suite (docs/redis-test-suite.md) -------------------------------------


def test_exec_refused_for_oom_aborts_the_whole_transaction(server, raw):
    admin = redis.Redis(port=server.port)
    admin.set("filler", "v" * 1000)  # something to count: the estimate covers the dataset
    raw.cmd("MULTI")
    raw.cmd("SET", "x", "1")
    raw.cmd("GET", "x")
    assert raw.read_exactly(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n")
    admin.config_set("maxmemory", 1)
    try:
        raw.cmd("EXEC")
        reply = raw.read_some()
        assert reply.startswith(b"-EXECABORT Transaction discarded because of: OOM ")
    finally:
        admin.config_set("maxmemory", 0)
    raw.cmd("PING")  # out of MULTI: answered, not queued
    assert raw.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"
    assert admin.exists("x") == 0
    assert admin.info("errorstats")["errorstat_EXECABORT"]["count"] == 1


def test_swapdb_that_only_brings_stale_keys_does_not_touch_a_watch(server, raw):
    admin = redis.Redis(port=server.port)
    admin.set("x", "foo", px=1)  # db 0
    time.sleep(0.01)
    raw.cmd("SELECT", "1")
    raw.cmd("WATCH", "x")
    admin.swapdb(0, 1)  # a missing key replaced by a stale one: no logical change
    raw.cmd("MULTI")
    raw.cmd("PING")
    raw.cmd("EXEC")
    expected = b"+OK\r\n+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n+PONG\r\n"
    assert raw.read_exactly(expected) == expected
    admin.set("y", "live")  # db 0
    raw.cmd("WATCH", "y")  # db 1, where y is missing
    admin.swapdb(0, 1)  # a missing key replaced by a live one: touched
    raw.cmd("MULTI")
    raw.cmd("PING")
    raw.cmd("EXEC")
    expected = b"+OK\r\n+OK\r\n+QUEUED\r\n*-1\r\n"
    assert raw.read_exactly(expected) == expected
