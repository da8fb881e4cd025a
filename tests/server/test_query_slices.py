"""Queries in slices (``pion.server.slices``): a long query gives the loop back between slices,
and what could change what it reads waits for it, as RediSearch's read lock.

Against a ``pion-server`` process. The queries run without a deadline (``TIMEOUT 0``) over
enough work to take a good fraction of a second, so the other connections' commands arrive
while they are in flight (``INFO stats`` ``pion_sliced_queries`` says they were sliced). Each
connection is a raw socket read on a thread of its own that stamps each reply's arrival, so the
order in which replies arrived is observed, not assumed. That a write waited is read from
INFO stats (``pion_commands_parked_by_queries``) and from the query's reply, which must show the
state before it: arrival order across connections alone would not prove it (a write's reply and
the query's may both wait for the log's fsync).
"""

from __future__ import annotations

import json
import time

import pytest
import redis
from tests.support.servers import ProcessServer
from tests.support.stamped import Conn

N_DOCS = 1500
#: an APPLY expression whose evaluation over every row takes most of a second
LONG_EXPR = "+".join(["@n"] * 1500)
AGG = ("FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n", "APPLY", LONG_EXPR, "AS", "s",
       "GROUPBY", "0", "REDUCE", "SUM", "1", "@n", "AS", "total", "REDUCE", "COUNT", "0", "AS", "c", "TIMEOUT", "0")
TOTAL = sum(range(N_DOCS))


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    srv = ProcessServer(tmp_path_factory.mktemp("slices")).start(timeout=120)
    try:
        r = redis.Redis(port=srv.port, socket_timeout=120, protocol=2)
        r.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "n", "NUMERIC")
        pipe = r.pipeline(transaction=False)
        for i in range(N_DOCS):
            pipe.hset(f"doc:{i}", mapping={"n": i})
        for i in range(1000):
            pipe.execute_command("VADD", "vs", "VALUES", "2", i % 7, i % 11, f"e{i}", "SETATTR", json.dumps({"n": i}))
        doc = {"items": [{"id": i, "tags": ["a", "b", "c"], "p": {"x": i, "y": [1, 2]}} for i in range(20000)]}
        pipe.execute_command("JSON.SET", "big", "$", json.dumps(doc))
        pipe.execute()
        r.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")  # indexed before the tests start
        r.close()
        yield srv.port
    finally:
        srv.stop()


@pytest.fixture
def r(port):
    client = redis.Redis(port=port, socket_timeout=60, protocol=2)
    yield client
    client.execute_command("FT.CONFIG", "SET", "ON_TIMEOUT", "RETURN")
    client.close()


def sliced(r) -> int:
    return int(r.info("stats")["pion_sliced_queries"])


def parked(r) -> int:
    return int(r.info("stats")["pion_commands_parked_by_queries"])


def _agg_row(reply) -> dict:
    row = reply[1]
    return {row[i].decode(): row[i + 1].decode() for i in range(0, len(row), 2)}


def _in_flight(r, before: int, deadline: float = 10.0) -> None:
    """Wait until the query sent last is past its first slice (so it is in flight)."""
    end = time.monotonic() + deadline
    while sliced(r) <= before:
        assert time.monotonic() < end, "the query was never sliced"
        time.sleep(0.005)


def test_conflicting_write_waits_unrelated_go_on(port, r):
    before, waited = sliced(r), parked(r)
    r.set("other", "0")
    q, w, o, g = Conn(port), Conn(port), Conn(port), Conn(port)
    try:
        q.send(AGG)
        _in_flight(r, before)
        w.send(("HSET", "doc:5", "n", "1000000"))          # covered by idx: waits for the query
        o.send(("SET", "other", "1"), ("HSET", "unindexed:1", "n", "7"))  # unrelated writes: run now
        g.send(("HGET", "doc:6", "n"), ("PING",))          # reads, an indexed key's too: answered now
        reads = g.wait(2)
        (t_query, reply), = q.wait(1)
        writes = o.wait(2)
        (_, wrote), = w.wait(1)
    finally:
        q.close(), w.close(), o.close(), g.close()
    assert [rep for _, rep in reads] == [b"6", b"PONG"]
    assert all(t < t_query for t, _ in reads), "reads were served while the query ran"
    # (a write's reply may wait for the log's fsync: that they did not wait for the query is
    # read from the counter)
    assert [rep for _, rep in writes] == [b"OK", 1]
    assert parked(r) == waited + 1, "the conflicting write (only) waited for the query"
    assert wrote == 0  # the field existed: updated, not added
    row = _agg_row(reply)
    assert row == {"total": str(TOTAL), "c": str(N_DOCS)}  # the query saw the state before the write
    assert r.hget("doc:5", "n") == b"1000000"  # and the write landed after it
    after = _agg_row(r.execute_command(*AGG))
    assert after["total"] == str(TOTAL - 5 + 1000000)
    r.hset("doc:5", "n", 5)


@pytest.mark.parametrize("cmd", [("DEL", "doc:7"), ("FLUSHALL",), ("EVAL", "return redis.call('DEL', 'doc:8')", "0"),
                                 ("FT.DROPINDEX", "idx")])
def test_keyless_and_structural_writes_wait(port, r, cmd):
    before, waited = sliced(r), parked(r)
    q, w = Conn(port), Conn(port)
    try:
        q.send(AGG)
        _in_flight(r, before)
        w.send(cmd, ("PING",))
        (_, reply), = q.wait(1)
        _, (_, pong) = w.wait(2)
    finally:
        q.close(), w.close()
    assert parked(r) == waited + 1
    assert pong == b"PONG"
    assert _agg_row(reply) == {"total": str(TOTAL), "c": str(N_DOCS)}
    _restore(r)


def _restore(r) -> None:
    """Bring the data back after a test that removed some."""
    if b"idx" not in r.execute_command("FT._LIST"):
        r.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "n", "NUMERIC")
    pipe = r.pipeline(transaction=False)
    for i in range(N_DOCS):
        pipe.hset(f"doc:{i}", mapping={"n": i})
    if not r.exists("vs"):
        for i in range(1000):
            pipe.execute_command("VADD", "vs", "VALUES", "2", i % 7, i % 11, f"e{i}", "SETATTR", json.dumps({"n": i}))
    if not r.exists("big"):
        doc = {"items": [{"id": i, "tags": ["a", "b", "c"], "p": {"x": i, "y": [1, 2]}} for i in range(20000)]}
        pipe.execute_command("JSON.SET", "big", "$", json.dumps(doc))
    pipe.execute()
    r.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")
    assert _agg_row(r.execute_command(*AGG)) == {"total": str(TOTAL), "c": str(N_DOCS)}


def test_exec_with_a_conflicting_write_waits_a_harmless_one_does_not(port, r):
    before, waited = sliced(r), parked(r)
    q, w, o = Conn(port), Conn(port), Conn(port)
    try:
        q.send(AGG)
        _in_flight(r, before)
        o.send(("MULTI",), ("SET", "elsewhere", "1"), ("EXEC",))
        w.send(("MULTI",), ("SET", "elsewhere", "2"), ("HSET", "doc:9", "n", "9"), ("EXEC",))
        harmless = o.wait(3)
        (t_query, _), = q.wait(1)
        queued = w.wait(4)
    finally:
        q.close(), w.close(), o.close()
    assert harmless[-1][1] == [b"OK"] and harmless[-1][0] < t_query
    assert [rep for _, rep in queued[:3]] == [b"OK", b"QUEUED", b"QUEUED"]  # queued at once
    assert queued[3][1] == [b"OK", 0] and parked(r) == waited + 1  # EXEC (only) waited for the query
    assert r.get("elsewhere") == b"2"


def test_pipeline_order_of_the_querying_client(port, r):
    before = sliced(r)
    q = Conn(port)
    try:
        q.send(("SET", "p", "1"), AGG, ("HSET", "doc:3", "n", "333"), ("INCR", "p"), ("PING",))
        replies = q.wait(5)
    finally:
        q.close()
    assert sliced(r) > before
    assert [rep for _, rep in replies[:1]] == [b"OK"]
    assert _agg_row(replies[1][1]) == {"total": str(TOTAL), "c": str(N_DOCS)}  # its own later write not seen
    assert [rep for _, rep in replies[2:]] == [0, 2, b"PONG"]
    assert r.hget("doc:3", "n") == b"333"
    r.hset("doc:3", "n", 3)


def test_json_read_in_slices_holds_writes_to_its_key_only(port, r):
    before, waited = sliced(r), parked(r)
    r.execute_command("FT.CONFIG", "SET", "TIMEOUT", "0")
    r.execute_command("JSON.SET", "small", "$", '{"a": 0}')
    r.execute_command("JSON.SET", "other", "$", '{"b": 2}')
    q, w, o, g, h = Conn(port), Conn(port), Conn(port), Conn(port), Conn(port)
    try:
        q.send(("JSON.GET", "big", "$..[?(@.x == -1)]"))  # visits every node, matches none
        _in_flight(r, before)
        w.send(("JSON.SET", "big", "$.items[0].p.x", "-1"))
        o.send(("JSON.SET", "small", "$", '{"a": 1}'))
        g.send(("JSON.GET", "other", "$.b"), ("PING",))
        end = time.monotonic() + 10
        while parked(r) < waited + 1:
            assert time.monotonic() < end
            time.sleep(0.005)
        h.send(("JSON.GET", "big", "$.items[0].p.x"))  # reads what the waiting write changes: behind it
        reads = g.wait(2)
        (t_query, reply), = q.wait(1)
        others = o.wait(1)
        (_, wrote), = w.wait(1)
        (_, later), = h.wait(1)
    finally:
        q.close(), w.close(), o.close(), g.close(), h.close()
        r.execute_command("FT.CONFIG", "SET", "TIMEOUT", "500")
    assert [rep for _, rep in reads] == [b"[2]", b"PONG"] and all(t < t_query for t, _ in reads)
    assert [rep for _, rep in others] == [b"OK"]
    assert later == b"[-1]"  # the write went first
    waited += 1  # h waited too
    assert reply == b"[]" and wrote == b"OK" and parked(r) == waited + 1
    assert r.execute_command("JSON.GET", "big", "$.items[0].p.x") == b"[-1]"
    r.execute_command("JSON.SET", "big", "$.items[0].p.x", "0")


def test_vsim_filter_in_slices_holds_writes_to_its_set(port, r):
    expr = " or ".join(f".n == {-j}" for j in range(1, 400))
    before, waited = sliced(r), parked(r)
    r.execute_command("FT.CONFIG", "SET", "TIMEOUT", "0")
    q, w = Conn(port), Conn(port)
    try:
        q.send(("VSIM", "vs", "VALUES", "2", "1", "1", "COUNT", "5", "FILTER", expr, "FILTER-EF", "100000", "TRUTH"))
        _in_flight(r, before)
        w.send(("VADD", "vs", "VALUES", "2", "1", "1", "new", "SETATTR", '{"n": -1}'), ("VCARD", "vs"))
        (_, reply), = q.wait(1)
        (_, added), (_, card) = w.wait(2)
    finally:
        q.close(), w.close()
        r.execute_command("FT.CONFIG", "SET", "TIMEOUT", "500")
    assert reply == [] and parked(r) == waited + 1  # the element added meanwhile is not seen
    assert added == 1 and card == 1001
    r.execute_command("VREM", "vs", "new")


def test_timeout_semantics_unchanged_in_slices(r):
    before = sliced(r)
    started = time.perf_counter()
    partial = r.execute_command(*AGG[:-2], "TIMEOUT", "200")[1:]  # RETURN: what it had, with no error
    took = time.perf_counter() - started
    assert sliced(r) > before and took < 5
    r.execute_command("FT.CONFIG", "SET", "ON_TIMEOUT", "FAIL")
    with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
        r.execute_command("FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n", "APPLY", LONG_EXPR, "AS", "s", "TIMEOUT", "200")
    assert partial is not None


def test_multi_and_scripts_run_queries_in_one_go(r):
    before = sliced(r)
    pipe = r.pipeline(transaction=True)
    pipe.execute_command(*AGG)
    (reply,) = pipe.execute()
    assert _agg_row(reply) == {"total": str(TOTAL), "c": str(N_DOCS)}
    script = "return redis.call('FT.AGGREGATE', 'idx', '*', 'GROUPBY', '0', 'REDUCE', 'COUNT', '0', 'AS', 'c')"
    assert r.eval(script, 0)[1] == [b"c", str(N_DOCS).encode()]
    assert sliced(r) == before  # neither went into slices


def test_client_leaving_mid_query_releases_the_parked(port, r):
    before = sliced(r)
    q, w = Conn(port), Conn(port)
    try:
        q.send(AGG)
        _in_flight(r, before)
        q.close()  # the query's client goes away: the query stops, what waited runs
        w.send(("HSET", "doc:11", "n", "11"))
        (_, reply), = w.wait(1, timeout=30)
    finally:
        w.close()
    assert reply == 0


def test_hybrid_finish_after_the_pool_runs_in_slices(port, r):
    """FT.HYBRID on an HNSW field: the KNN runs in the worker pool (a Deferred), then the
    post-processing (a long APPLY over the window) runs on the loop in slices, isolated too."""
    import numpy as np

    if b"hidx" not in r.execute_command("FT._LIST"):
        r.execute_command("FT.CREATE", "hidx", "ON", "HASH", "PREFIX", "1", "hdoc:", "SCHEMA", "n", "NUMERIC",
                          "v", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", "2", "DISTANCE_METRIC", "L2")
        pipe = r.pipeline(transaction=False)
        for i in range(N_DOCS):
            pipe.hset(f"hdoc:{i}", mapping={"n": i, "v": np.array([i % 13, i % 17], dtype=np.float32).tobytes()})
        pipe.execute()
    r.execute_command("FT.SEARCH", "hidx", "*", "LIMIT", "0", "0")
    vec = np.zeros(2, dtype=np.float32).tobytes()
    query = ("FT.HYBRID", "hidx", "SEARCH", "*", "VSIM", "@v", "$B", "COMBINE", "RRF", "2", "WINDOW", str(N_DOCS),
             "LOAD", "1", "@n", "APPLY", LONG_EXPR, "AS", "s", "LIMIT", "0", str(N_DOCS), "PARAMS", "2", "B", vec)
    r.execute_command("FT.CONFIG", "SET", "TIMEOUT", "0")
    before, waited = sliced(r), parked(r)
    q, w, o = Conn(port), Conn(port), Conn(port)
    try:
        q.send(query)
        _in_flight(r, before)
        w.send(("HSET", "hdoc:1", "n", "-5"))
        o.send(("PING",))
        (t_ping, _), = o.wait(1)
        (t_query, reply), = q.wait(1)
        w.wait(1)
    finally:
        q.close(), w.close(), o.close()
        r.execute_command("FT.CONFIG", "SET", "TIMEOUT", "500")
    assert t_ping < t_query and parked(r) == waited + 1
    assert reply[0] == b"total_results" and reply[4] == b"warnings" and reply[5] == []
    values = [row[row.index(b"n") + 1] for row in reply[3]]
    assert b"-5" not in values and len(values) == N_DOCS
    r.hset("hdoc:1", "n", 1)


def test_a_later_query_waits_behind_a_waiting_writer(port, r):
    """Writers are not starved by overlapping queries: a query that arrives while a write waits
    runs after that write, and sees it."""
    before, waited = sliced(r), parked(r)
    q1, w, q2 = Conn(port), Conn(port), Conn(port)
    try:
        q1.send(AGG)
        _in_flight(r, before)
        w.send(("HSET", "doc:5", "n", "1000000"))
        end = time.monotonic() + 10
        while parked(r) < waited + 1:
            assert time.monotonic() < end
            time.sleep(0.005)
        q2.send(AGG)
        (_, first), = q1.wait(1)
        (_, wrote), = w.wait(1)
        (_, second), = q2.wait(1)
    finally:
        q1.close(), w.close(), q2.close()
    assert _agg_row(first)["total"] == str(TOTAL)
    assert wrote == 0
    assert _agg_row(second)["total"] == str(TOTAL - 5 + 1000000)  # the write went first
    assert parked(r) == waited + 2
    r.hset("doc:5", "n", 5)
