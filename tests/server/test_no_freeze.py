"""No single command freezes the server (issue 27's "done when"): each command below, one that
used to hold the event loop for seconds, answers, errors or times out while a canary connection
PINGing every 20 ms (``tests.support.canary``) never waits longer than ``BOUND``.

The server is a ``pion-server`` process of its own, so the canary measures the server, not this
process's GIL. The data are sized to build in a few seconds; the commands are the issue's kinds:
queries bound by the query budget (FT.CONFIG TIMEOUT, 500 ms by default: FT.SEARCH, FT.AGGREGATE
with a cursor, FT.HYBRID, on an HNSW field too, VSIM FILTER, JSONPath over a large document),
which run in slices of ~10 ms on the loop (``pion.server.slices``), one of them while other
clients write, and large replies made in pieces (the *RANDMEMBER/HRANDFIELD negative counts, a million-element LRANGE). Each figure is
printed (``pytest -s``); the issue's goal is 250 ms on a quiet machine, the bound here is a
generous liveness bound for a loaded CI machine.
"""

from __future__ import annotations

import json
import os
import socket
import time

import hiredis
import numpy as np
import pytest
import redis
from tests.support.canary import command, watch
from tests.support.servers import ProcessServer
from tests.support.stamped import Conn

#: the canary's longest wait allowed (seconds); PION_CANARY_BOUND overrides it
BOUND = float(os.environ.get("PION_CANARY_BOUND", "1.0"))
#: FT.CONFIG TIMEOUT for the run (ms); unset: RediSearch's default, 500
QUERY_TIMEOUT = os.environ.get("PION_QUERY_TIMEOUT")
N_DOCS = 3000
#: an APPLY/FILTER expression long enough that evaluating it over every row takes seconds
LONG_EXPR = "+".join(["@n"] * 3000)
FIGURES: dict[str, float] = {}


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    srv = ProcessServer(tmp_path_factory.mktemp("no-freeze")).start(timeout=120)
    try:
        r = redis.Redis(port=srv.port, socket_timeout=120)
        _load(r)
        if QUERY_TIMEOUT is not None:
            r.execute_command("FT.CONFIG", "SET", "TIMEOUT", QUERY_TIMEOUT)
        r.close()
        yield srv.port
    finally:
        srv.stop()
        if FIGURES:
            print("\ncanary's longest wait per command (s):")
            for name, longest in FIGURES.items():
                print(f"  {longest:7.3f}  {name}")


def _load(r: redis.Redis) -> None:
    r.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "t", "TEXT", "n", "NUMERIC",
                      "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "L2")
    rng = np.random.default_rng(5)
    pipe = r.pipeline(transaction=False)
    for i in range(N_DOCS):
        words = " ".join(f"w{i}x{j}" for j in range(8))  # 24,000 distinct terms for the fuzzy scan
        pipe.hset(f"doc:{i}", mapping={"t": words, "n": i, "v": rng.random(4, dtype=np.float32).tobytes()})
    members = [f"member-{i}" for i in range(3000)]
    pipe.sadd("s", *members)
    pipe.zadd("z", {m: i for i, m in enumerate(members)})
    pipe.hset("h", mapping={m: str(i) for i, m in enumerate(members)})
    for i in range(1000):
        pipe.execute_command("VADD", "vs", "VALUES", "4", *rng.random(4).tolist(), f"e{i}", "SETATTR",
                             json.dumps({"n": i}))
    for start in range(0, 1_000_000, 50_000):
        pipe.rpush("l", *range(start, start + 50_000))
    doc = {"items": [{"id": i, "name": f"n{i}", "tags": ["a", "b", "c"], "p": {"x": i, "y": [1, 2]}}
                     for i in range(12_000)]}  # about 130,000 nodes
    pipe.execute_command("JSON.SET", "big", "$", json.dumps(doc))
    pipe.execute()
    r.execute_command("FT.CREATE", "hidx", "ON", "HASH", "PREFIX", "1", "hdoc:", "SCHEMA", "n", "NUMERIC",
                      "v", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "L2")
    pipe = r.pipeline(transaction=False)
    for i in range(N_DOCS):
        pipe.hset(f"hdoc:{i}", mapping={"n": i, "v": rng.random(4, dtype=np.float32).tobytes()})
    pipe.execute()
    r.execute_command("FT.SEARCH", "hidx", "*", "LIMIT", "0", "0")  # indexed before the tests


def _run(port: int, name: str, *args):
    reply, longest, pings = watch(port, lambda: command(port, *args))
    FIGURES[name] = longest
    assert pings > 0
    assert longest < BOUND, f"{name}: the canary waited {longest:.3f} s"
    return reply


def _timed_out(reply) -> bool:
    return isinstance(reply, hiredis.ReplyError) and str(reply) == "Timeout limit was reached"


def test_fuzzy_search(port):
    # matches no term, so the edit-distance scan visits all 24,000 (0.7 s without a budget here)
    reply = _run(port, "FT.SEARCH %%%qqqqqqq%%% (fuzzy scan of 24k terms)", "FT.SEARCH", "idx", "%%%qqqqqqq%%%",
                 "LIMIT", "0", "10000")
    assert reply == [0]  # nothing matches; under ON_TIMEOUT RETURN (the default) a cut-short scan says the same


def test_aggregate_long_apply(port):
    reply = _run(port, "FT.AGGREGATE * APPLY (3000 terms)", "FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n",
                 "APPLY", LONG_EXPR, "AS", "s", "LIMIT", "0", str(N_DOCS))
    assert isinstance(reply, list) and len(reply) - 1 < N_DOCS  # cut short by the budget


def test_aggregate_cursor_fail_policy(port):
    redis.Redis(port=port).execute_command("FT.CONFIG", "SET", "ON_TIMEOUT", "FAIL")
    try:
        reply = _run(port, "FT.AGGREGATE WITHCURSOR, ON_TIMEOUT FAIL", "FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n",
                     "APPLY", LONG_EXPR, "AS", "s", "WITHCURSOR", "COUNT", "100")
        assert _timed_out(reply)
    finally:
        redis.Redis(port=port).execute_command("FT.CONFIG", "SET", "ON_TIMEOUT", "RETURN")


def test_hybrid(port):
    vec = np.zeros(4, dtype=np.float32).tobytes()
    reply = _run(port, "FT.HYBRID + APPLY (3000 terms)", "FT.HYBRID", "idx", "SEARCH", "*", "VSIM", "@v", "$B",
                 "COMBINE", "RRF", "2", "WINDOW", str(N_DOCS), "LOAD", "1", "@n", "APPLY", LONG_EXPR, "AS", "s",
                 "LIMIT", "0", str(N_DOCS), "PARAMS", "2", "B", vec)
    assert b"warnings" in reply


def test_hybrid_hnsw_finish_in_slices(port):
    # the KNN runs in the worker pool; the APPLY over the window after it, on the loop, in slices
    vec = np.zeros(4, dtype=np.float32).tobytes()
    reply = _run(port, "FT.HYBRID on HNSW + APPLY (3000 terms)", "FT.HYBRID", "hidx", "SEARCH", "*", "VSIM", "@v",
                 "$B", "COMBINE", "RRF", "2", "WINDOW", str(N_DOCS), "LOAD", "1", "@n", "APPLY", LONG_EXPR, "AS", "s",
                 "LIMIT", "0", str(N_DOCS), "PARAMS", "2", "B", vec)
    assert b"warnings" in reply


def test_query_with_writers_meanwhile(port):
    """A budget-long query while another client writes a key it reads (parked until the query
    ends) and keys it does not (served meanwhile): the canary is not held by either."""
    writer = Conn(port)

    def action():
        sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        try:
            sock.sendall(hiredis.pack_command(("FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n", "APPLY", LONG_EXPR,
                                               "AS", "s", "LIMIT", "0", str(N_DOCS))))
            time.sleep(0.1)
            writer.send(("HSET", "doc:1", "n", "1"), ("SET", "unrelated", "1"))
            reader = hiredis.Reader()
            while (reply := reader.gets()) is False:
                reader.feed(sock.recv(1 << 20))
            return reply
        finally:
            sock.close()

    try:
        reply, longest, pings = watch(port, action)
        FIGURES["FT.AGGREGATE APPLY with a conflicting and an unrelated writer"] = longest
        assert isinstance(reply, list) and pings > 0
        assert longest < BOUND, f"the canary waited {longest:.3f} s"
        assert [rep for _, rep in writer.wait(2)] == [0, b"OK"]
    finally:
        writer.close()


def test_vsim_filter(port):
    expr = " or ".join(f".n == {-j}" for j in range(1, 400))  # true for none: every element examined
    reply = _run(port, "VSIM FILTER (400 terms, 1000 elements)", "VSIM", "vs", "VALUES", "4", "0.5", "0.5", "0.5",
                 "0.5", "COUNT", "10", "FILTER", expr, "FILTER-EF", "100000", "TRUTH")
    assert reply == [] or _timed_out(reply)


def test_json_descent(port):
    reply = _run(port, "JSON.GET big $..*..*..* (130k nodes)", "JSON.GET", "big", "$..*..*..*")
    assert _timed_out(reply) or reply.startswith(b"[")
    reply = _run(port, "JSON.GET big $..* (130k nodes)", "JSON.GET", "big", "$..*")
    assert reply.startswith(b"[") or _timed_out(reply)


@pytest.mark.parametrize("cmd", ["SRANDMEMBER s", "ZRANDMEMBER z", "HRANDFIELD h", "VRANDMEMBER vs"])
def test_random_members_huge_negative_count(port, cmd):
    reply = _run(port, f"{cmd} -5000000", *cmd.split(), "-5000000")
    assert isinstance(reply, list) and len(reply) == 5_000_000


def test_random_with_scores(port):
    reply = _run(port, "ZRANDMEMBER z -2000000 WITHSCORES", "ZRANDMEMBER", "z", "-2000000", "WITHSCORES")
    assert len(reply) == 4_000_000


def test_lrange_million(port):
    reply = _run(port, "LRANGE l 0 -1 (1,000,000 elements)", "LRANGE", "l", "0", "-1")
    assert len(reply) == 1_000_000 and reply[0] == b"0" and reply[-1] == b"999999"


# -- long chains: parsing and compiling them is not bounded by the query budget (it runs before
# the query does), so each parser must be linear and cheap: 20,000 terms (issue 27) -------------

CHAIN = 20_000


@pytest.mark.parametrize(("name", "args", "expected"), [
    ("FT.AGGREGATE APPLY @n+@n+... (20,000 terms)",
     ("FT.AGGREGATE", "idx", "@n:[-2 -1]", "LOAD", "1", "@n", "APPLY", "+".join(["@n"] * CHAIN), "AS", "s"), [0]),
    ("FT.SEARCH zz|zz|... (20,000 terms)", ("FT.SEARCH", "idx", "|".join(["zz"] * CHAIN)), [0]),
    ("FT.SEARCH zz|zz|... DIALECT 2 (20,000 terms)",
     ("FT.SEARCH", "idx", "|".join(["zz"] * CHAIN), "DIALECT", "2"), [0]),
    ("FT.SEARCH @n:[-2 -1]|... (20,000 ranges)", ("FT.SEARCH", "idx", "|".join(["@n:[-2 -1]"] * CHAIN)), [0]),
])
def test_long_query_chains(port, name, args, expected):
    assert _run(port, name, *args) == expected


def test_long_vsim_filter_chain(port):
    r = redis.Redis(port=port)
    r.execute_command("VADD", "vs-chain", "VALUES", "2", "1", "0", "e", "SETATTR", json.dumps({"n": 1}))
    expr = " && ".join([".n == 2"] * CHAIN)
    reply = _run(port, "VSIM FILTER .n == 2 && ... (20,000 terms)", "VSIM", "vs-chain", "VALUES", "2", "1", "0",
                 "FILTER", expr)
    assert reply == []


def test_long_json_filter_chain(port):
    redis.Redis(port=port).execute_command("JSON.SET", "j-chain", "$", json.dumps([{"a": 1}, {"a": 2}]))
    path = "$[?(" + " && ".join(["@.a==3"] * CHAIN) + ")]"
    assert _run(port, "JSON.GET $[?(@.a==3 && ...)] (20,000 terms)", "JSON.GET", "j-chain", path) == b"[]"
