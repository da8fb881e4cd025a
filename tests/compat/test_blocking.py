"""Blocking list and sorted-set pops with several connections: FIFO service, timeouts (also
fractional and forever), wake-up by another client's push, BLMOVE, disconnects, CLIENT UNBLOCK,
MULTI, and that a served pop is logged as its non-blocking form."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from tests.compat.test_lists import WRONGTYPE, err, raw_reply, record_journal


def client(server, protocol: int = 2) -> redis.Redis:
    return redis.Redis(port=server.port, protocol=protocol, socket_timeout=10)


def num_blocked(server) -> int:
    return server.call(lambda: server.server.blocking.num_blocked)


def wait_blocked(server, count: int, timeout: float = 5.0) -> None:
    deadline = time.time() + timeout
    while num_blocked(server) != count:
        assert time.time() < deadline, f"expected {count} blocked clients, have {num_blocked(server)}"
        time.sleep(0.01)


@pytest.fixture
def pool():
    executor = ThreadPoolExecutor(max_workers=8)
    yield executor
    executor.shutdown(wait=False, cancel_futures=True)


@pytest.mark.parametrize("protocol", [2, 3])
def test_blpop_is_woken_by_a_push_from_another_client(server, pool, protocol):
    waiter, pusher = client(server, protocol), client(server)
    future = pool.submit(waiter.blpop, ["k1", "k2"], 0)
    wait_blocked(server, 1)
    assert pusher.rpush("k2", "v") == 1  # the length after the push, before the waiter pops
    assert future.result(5) in ([b"k2", b"v"], (b"k2", b"v"))
    assert pusher.exists("k2") == 0
    assert num_blocked(server) == 0


def test_immediate_pop_when_data_is_there(r):
    r.rpush("a", "1", "2")
    assert r.blpop(["missing", "a"], 1) == (b"a", b"1")
    assert r.brpop(["a"], 1) == (b"a", b"2")
    assert r.exists("a") == 0


def test_waiters_are_served_first_come_first_served(server, pool):
    waiters = [client(server) for _ in range(3)]
    futures = []
    for i, waiter in enumerate(waiters):
        futures.append(pool.submit(waiter.blpop, ["q"], 0))
        wait_blocked(server, i + 1)
    pusher = client(server)
    assert pusher.rpush("q", "a", "b", "c", "d") == 4
    assert [f.result(5) for f in futures] == [(b"q", b"a"), (b"q", b"b"), (b"q", b"c")]
    assert pusher.lrange("q", 0, -1) == [b"d"]


def test_lpush_of_several_values_serves_several_waiters(server, pool):
    first, second = client(server), client(server)
    f1 = pool.submit(first.blpop, ["q"], 0)
    wait_blocked(server, 1)
    f2 = pool.submit(second.brpop, ["q"], 0)
    wait_blocked(server, 2)
    assert client(server).lpush("q", "a", "b", "c") == 3
    assert f1.result(5) == (b"q", b"c")
    assert f2.result(5) == (b"q", b"a")
    assert client(server).lrange("q", 0, -1) == [b"b"]


def test_fractional_timeout_answers_null(server):
    r = client(server)
    start = time.time()
    assert r.blpop(["missing"], 0.2) is None
    elapsed = time.time() - start
    assert 0.15 <= elapsed < 2
    assert r.bzpopmin(["missing"], 0.05) is None
    assert r.blmove("missing", "d", 0.05, "LEFT", "RIGHT") is None
    assert num_blocked(server) == 0


def test_timeout_shapes_on_the_wire(server, raw):
    assert raw_reply(raw, 2, "BLPOP", "missing", "0.01") == b"*-1\r\n"
    assert raw_reply(raw, 2, "BLMOVE", "missing", "d", "LEFT", "LEFT", "0.01") == b"*-1\r\n"
    assert raw_reply(raw, 3, "BRPOPLPUSH", "missing", "d", "0.01") == b"_\r\n"
    assert raw_reply(raw, 3, "BZMPOP", "0.01", "1", "missing", "MIN") == b"_\r\n"


def test_zero_timeout_blocks_until_served(server, pool):
    waiter = client(server)
    future = pool.submit(waiter.brpop, ["k"], 0)
    wait_blocked(server, 1)
    time.sleep(0.3)
    assert not future.done()
    client(server).rpush("k", "late")
    assert future.result(5) == (b"k", b"late")


def test_timeout_errors(r):
    assert err(r, "BLPOP", "k", "x") == "timeout is not a float or out of range"
    assert err(r, "BLPOP", "k", "-1") == "timeout is negative"
    assert err(r, "BLPOP", "k", "inf") == "timeout is negative"
    assert err(r, "BLPOP", "k", " 1") == "timeout is not a float or out of range"
    assert err(r, "BLPOP", "k", "nan") == "timeout is not a float or out of range"
    assert err(r, "BZPOPMIN", "k", "1_0") == "timeout is not a float or out of range"
    assert err(r, "BLMPOP", "x", "1", "k", "LEFT") == "timeout is not a float or out of range"
    assert err(r, "BLMPOP", "0", "1", "k", "UP") == "syntax error"


def test_blmove_and_brpoplpush_wake_up(server, pool):
    mover, popper = client(server), client(server)
    f1 = pool.submit(mover.blmove, "src", "dst", 0, "RIGHT", "LEFT")
    wait_blocked(server, 1)
    f2 = pool.submit(popper.brpoplpush, "src", "dst2", 0)
    wait_blocked(server, 2)
    r = client(server)
    r.rpush("src", "a", "b")
    assert f1.result(5) == b"b"
    assert f2.result(5) == b"a"
    assert r.lrange("dst", 0, -1) == [b"b"] and r.lrange("dst2", 0, -1) == [b"a"]
    assert r.exists("src") == 0


def test_blmove_onto_a_key_that_became_another_type_answers_wrongtype(server, pool):
    mover = client(server)
    future = pool.submit(mover.blmove, "src", "dst", 0, "LEFT", "LEFT")
    wait_blocked(server, 1)
    r = client(server)
    r.set("dst", "string")
    r.rpush("src", "v")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        future.result(5)
    assert r.lrange("src", 0, -1) == [b"v"]


def test_blmpop_and_bzmpop_with_counts(server, pool):
    lister, zsetter = client(server), client(server, 3)
    f1 = pool.submit(lister.blmpop, 0, 2, "l1", "l2", direction="RIGHT", count=2)
    f2 = pool.submit(zsetter.bzmpop, 0, 2, ["z1", "z2"], max=True, count=5)
    wait_blocked(server, 2)
    r = client(server)
    r.rpush("l2", "a", "b", "c")
    r.zadd("z1", {"x": 1, "y": 2})
    assert f1.result(5) == [b"l2", [b"c", b"b"]]
    assert f2.result(5) == [b"z1", [[b"y", 2.0], [b"x", 1.0]]]


@pytest.mark.parametrize("protocol", [2, 3])
def test_bzpopmin_bzpopmax(server, pool, protocol):
    r = client(server, protocol)
    r.zadd("z", {"a": 1, "b": 2, "c": 3})
    low = r.bzpopmin(["missing", "z"], 1)
    high = r.bzpopmax(["z"], 1)
    if protocol == 2:
        assert (low, high) == ((b"z", b"a", 1.0), (b"z", b"c", 3.0))
    else:
        assert (low, high) == ([b"z", b"a", 1.0], [b"z", b"c", 3.0])
    waiter = client(server, protocol)
    future = pool.submit(waiter.bzpopmax, ["other"], 0)
    wait_blocked(server, 1)
    r.zadd("other", {"m": 5, "n": 7})
    assert list(future.result(5)) == [b"other", b"n", 7.0]


def test_disconnect_while_blocked_is_cleaned_up(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"*3\r\n$5\r\nBLPOP\r\n$1\r\nk\r\n$1\r\n0\r\n")
    wait_blocked(server, 1)
    sock.close()
    wait_blocked(server, 0)
    assert server.call(lambda: dict(server.server.blocking.waiting)) == {}
    r = client(server)
    r.rpush("k", "kept")
    assert r.lrange("k", 0, -1) == [b"kept"]


@pytest.mark.parametrize("reason", ["TIMEOUT", "ERROR"])
def test_client_unblock(server, pool, reason):
    waiter = client(server)
    waiter_id = waiter.client_id()
    future = pool.submit(waiter.blpop, ["k"], 0)
    wait_blocked(server, 1)
    assert client(server).client_unblock(waiter_id, error=reason == "ERROR") == 1
    if reason == "TIMEOUT":
        assert future.result(5) is None
    else:
        with pytest.raises(redis.ResponseError, match="UNBLOCKED client unblocked via CLIENT UNBLOCK"):
            future.result(5)
    assert num_blocked(server) == 0


def test_blocking_commands_answer_at_once_inside_multi(r):
    with r.pipeline() as pipe:
        pipe.blpop(["missing"], 0)
        pipe.blmove("missing", "d", 0, "LEFT", "LEFT")
        pipe.bzpopmin(["missing"], 0)
        pipe.blmpop(0, 1, "missing", direction="LEFT")
        assert pipe.execute() == [None, None, None, None]


def test_blocking_commands_are_refused_inside_scripts(r):
    # Redis 7.0.15 (the reference server here) flags BLPOP/BZPOPMIN noscript: refused, not blocked
    with pytest.raises(redis.ResponseError, match="^This Redis command is not allowed from script"):
        r.eval("return {redis.call('BLPOP', 'missing', 0), redis.call('BZPOPMIN', 'missing', 0)}", 0)


def test_the_waiter_pops_before_the_pusher_is_answered(server):
    waiter = socket.create_connection(("127.0.0.1", server.port))
    pusher = socket.create_connection(("127.0.0.1", server.port))
    waiter.sendall(b"*3\r\n$5\r\nBLPOP\r\n$1\r\nk\r\n$1\r\n0\r\n")
    wait_blocked(server, 1)
    pusher.sendall(b"*3\r\n$5\r\nRPUSH\r\n$1\r\nk\r\n$1\r\nv\r\n")
    pusher.settimeout(5)
    assert pusher.recv(100) == b":1\r\n"
    pusher.sendall(b"*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n")
    assert pusher.recv(100) == b":0\r\n"  # served within the RPUSH, before its reply
    waiter.settimeout(5)
    assert waiter.recv(100) == b"*2\r\n$1\r\nk\r\n$1\r\nv\r\n"
    waiter.close()
    pusher.close()


def test_a_push_undone_in_the_same_transaction_serves_nobody(server, pool):
    waiter = client(server)
    future = pool.submit(waiter.blpop, ["k"], 0)
    wait_blocked(server, 1)
    with client(server).pipeline() as pipe:
        pipe.rpush("k", "x")
        pipe.lpop("k")
        pipe.execute()
    time.sleep(0.1)
    assert not future.done()
    client(server).rpush("k", "y")
    assert future.result(5) == (b"k", b"y")


def test_a_key_of_another_type_keeps_the_client_waiting(server, pool):
    waiter = client(server)
    future = pool.submit(waiter.blpop, ["k"], 0)
    wait_blocked(server, 1)
    r = client(server)
    r.set("k", "string")
    time.sleep(0.1)
    assert not future.done()
    r.delete("k")
    r.rpush("k", "v")
    assert future.result(5) == (b"k", b"v")


def test_wrongtype_before_blocking(r):
    r.set("s", "v")
    assert err(r, "BLPOP", "missing", "s", "0") == WRONGTYPE
    assert err(r, "BZPOPMIN", "s", "0") == WRONGTYPE
    assert err(r, "BLMPOP", "0", "1", "s", "LEFT") == WRONGTYPE


def test_served_pops_are_logged_as_non_blocking_commands(server, pool):
    records = record_journal(server)
    lister, mover, zsetter = client(server), client(server), client(server)
    f1 = pool.submit(lister.blpop, ["l"], 0)
    wait_blocked(server, 1)
    f2 = pool.submit(mover.blmove, "m", "dst", 0, "LEFT", "RIGHT")
    wait_blocked(server, 2)
    f3 = pool.submit(zsetter.bzmpop, 0, 1, ["z"], min=True, count=2)
    wait_blocked(server, 3)
    r = client(server)
    r.rpush("l", "a")
    r.rpush("m", "b")
    r.zadd("z", {"x": 1})
    for future in (f1, f2, f3):
        future.result(5)
    r.rpush("l", "c")
    r.blpop(["l"], 0)
    logged = [argv for record in records for argv in record]
    assert logged == [
        [b"RPUSH", b"l", b"a"], [b"LPOP", b"l"],
        [b"RPUSH", b"m", b"b"], [b"LMOVE", b"m", b"dst", b"LEFT", b"RIGHT"],
        [b"ZADD", b"z", b"1", b"x"], [b"ZPOPMIN", b"z", b"2"],
        [b"RPUSH", b"l", b"c"], [b"LPOP", b"l"],
    ]


# -- found by Redis's own test suite (docs/redis-test-suite.md) -------------------------------------


def test_a_served_blocked_command_is_slowlogged_after_the_exec_that_woke_it(server, r):
    r.config_set("slowlog-log-slower-than", 0)
    waiter = client(server)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(waiter.blpop, ["l"], 0)
        deadline = time.time() + 3
        while r.info("clients")["blocked_clients"] < 1 and time.time() < deadline:
            time.sleep(0.01)
        assert not [e for e in r.slowlog_get(128) if e["command"].startswith(b"BLPOP")]
        pipe = r.pipeline(transaction=True)
        pipe.lpush("l", "foo")
        r.slowlog_reset()
        pipe.execute()
        assert pending.result(5) == (b"l", b"foo")
    commands = [entry["command"] for entry in r.slowlog_get(128)]
    assert commands[0] == b"BLPOP l 0"  # the newest: logged when served, after the EXEC
    assert b"EXEC" not in commands and b"LPUSH l foo" in commands  # EXEC itself is never logged
