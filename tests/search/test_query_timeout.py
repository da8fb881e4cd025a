"""The query time budget over the wire: FT.CONFIG TIMEOUT / ON_TIMEOUT and the TIMEOUT argument
of FT.SEARCH, FT.AGGREGATE (with a cursor too) and FT.HYBRID, in RediSearch's shapes: under FAIL
the error ``Timeout limit was reached``; under RETURN (RediSearch's default) the results so far,
with the ``warning`` entry in RESP3 and nothing in RESP2.

The queries are made slow by their size (a few thousand documents, a long APPLY expression), so a
1 ms budget runs out on any machine; the same query with TIMEOUT 0 (no limit) answers in full."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from tests.support.embedder import DIM

N_DOCS = 3000
TIMEOUT_TEXT = b"Timeout limit was reached"
#: an APPLY of this many terms takes well over a millisecond per row
LONG_EXPR = "+".join(["@n"] * 200)


def cmd(r, *args):
    return r.execute_command(*args)


@pytest.fixture
def big(rr):
    cmd(rr, "FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "t", "TEXT", "n", "NUMERIC",
        "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", str(DIM), "DISTANCE_METRIC", "L2")
    pipe = rr.pipeline(transaction=False)
    rng = np.random.default_rng(7)
    for i in range(N_DOCS):
        pipe.hset(f"doc:{i}", mapping={"t": f"word{i % 50} common", "n": i,
                                         "v": rng.random(DIM, dtype=np.float32).tobytes()})
    pipe.execute()
    return rr


def _is_resp3(r) -> bool:
    return r.protocol_version == 3


def test_config_timeout_and_on_timeout(rr):
    assert cmd(rr, "FT.CONFIG", "GET", "TIMEOUT") in ([[b"TIMEOUT", b"500"]], {b"TIMEOUT": b"500"})
    assert cmd(rr, "FT.CONFIG", "GET", "ON_TIMEOUT") in ([[b"ON_TIMEOUT", b"return"]], {b"ON_TIMEOUT": b"return"})
    assert cmd(rr, "FT.CONFIG", "SET", "ON_TIMEOUT", "FAIL") == b"OK"
    assert cmd(rr, "FT.CONFIG", "GET", "ON_TIMEOUT") in ([[b"ON_TIMEOUT", b"fail"]], {b"ON_TIMEOUT": b"fail"})
    with pytest.raises(redis.ResponseError, match="Invalid ON_TIMEOUT value"):
        cmd(rr, "FT.CONFIG", "SET", "ON_TIMEOUT", "maybe")
    with pytest.raises(redis.ResponseError, match="Value is outside acceptable bounds"):
        cmd(rr, "FT.CONFIG", "SET", "TIMEOUT", "-1")
    assert cmd(rr, "FT.CONFIG", "SET", "TIMEOUT", "0") == b"OK"


def test_search_fail_policy_errors(big):
    cmd(big, "FT.CONFIG", "SET", "ON_TIMEOUT", "FAIL")
    with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
        cmd(big, "FT.SEARCH", "idx", "%%word1%%", "LIMIT", "0", "5000", "TIMEOUT", "1")
    # TIMEOUT 0: no limit, the whole answer
    reply = cmd(big, "FT.SEARCH", "idx", "common", "NOCONTENT", "LIMIT", "0", "0", "TIMEOUT", "0")
    assert (reply[b"total_results"] if _is_resp3(big) else reply[0]) == N_DOCS
    # the config's TIMEOUT applies when the query gives none
    cmd(big, "FT.CONFIG", "SET", "TIMEOUT", "1")
    with pytest.raises(redis.ResponseError, match="Timeout limit was reached"):
        cmd(big, "FT.SEARCH", "idx", "%%word1%%", "LIMIT", "0", "5000")


def test_search_return_policy_answers_partial_with_warning(big):
    reply = cmd(big, "FT.SEARCH", "idx", "%%word1%%", "LIMIT", "0", "5000", "TIMEOUT", "1")
    full = cmd(big, "FT.SEARCH", "idx", "%%word1%%", "NOCONTENT", "LIMIT", "0", "0", "TIMEOUT", "0")
    if _is_resp3(big):
        assert reply[b"warning"] == [TIMEOUT_TEXT]
        assert len(reply[b"results"]) < full[b"total_results"]
        assert full[b"warning"] == []
    else:
        assert isinstance(reply, list) and isinstance(reply[0], int)  # a result, no error, no warning
        assert (len(reply) - 1) // 2 < full[0]


def test_aggregate_apply_timeout(big):
    query = ["FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n", "APPLY", LONG_EXPR, "AS", "s", "LIMIT", "0", "5000"]
    reply = cmd(big, *query, "TIMEOUT", "1")
    if _is_resp3(big):
        assert reply[b"warning"] == [TIMEOUT_TEXT]
        assert len(reply[b"results"]) < N_DOCS
    else:
        assert isinstance(reply[0], int) and len(reply) - 1 < N_DOCS
    cmd(big, "FT.CONFIG", "SET", "ON_TIMEOUT", "fail")
    with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
        cmd(big, *query, "TIMEOUT", "1")
    with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
        cmd(big, *query, "WITHCURSOR", "COUNT", "100", "TIMEOUT", "1")
    full = cmd(big, *query, "TIMEOUT", "0")
    assert (len(full[b"results"]) if _is_resp3(big) else len(full) - 1) == N_DOCS


def test_aggregate_cursor_return_keeps_partial_rows(big):
    reply, cursor = cmd(big, "FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n", "APPLY", LONG_EXPR, "AS", "s",
                        "WITHCURSOR", "COUNT", "10", "TIMEOUT", "1")
    # what timed out may be the match or the APPLY stage (which one depends on the machine's speed):
    # either way the cursor delivers fewer rows than match, and RESP3 says why
    if _is_resp3(big):
        assert reply[b"warning"] == [TIMEOUT_TEXT]
    rows = len(reply[b"results"]) if _is_resp3(big) else len(reply) - 1
    while cursor:
        reply, cursor = cmd(big, "FT.CURSOR", "READ", "idx", str(cursor))
        rows += len(reply[b"results"]) if _is_resp3(big) else len(reply) - 1
    assert rows < N_DOCS


def test_hybrid_timeout(big):
    vec = np.zeros(DIM, dtype=np.float32).tobytes()
    query = ["FT.HYBRID", "idx", "SEARCH", "%%word1%%", "VSIM", "@v", "$B", "LOAD", "1", "@n",
             "APPLY", LONG_EXPR, "AS", "s", "PARAMS", "2", "B", vec]
    reply = cmd(big, *query, "TIMEOUT", "1")
    warnings = reply[b"warnings"] if _is_resp3(big) else reply[reply.index(b"warnings") + 1]
    # Redis 8.4 names the leg a timeout cut short; the post-processing's (APPLY) is the plain text.
    # Which stage runs out depends on the machine's speed
    assert warnings and set(warnings) <= {TIMEOUT_TEXT + b" (SEARCH)", TIMEOUT_TEXT + b" (VSIM)", TIMEOUT_TEXT}
    reply = cmd(big, *query, "TIMEOUT", "0")
    warnings = reply[b"warnings"] if _is_resp3(big) else reply[reply.index(b"warnings") + 1]
    assert warnings == []
    cmd(big, "FT.CONFIG", "SET", "ON_TIMEOUT", "FAIL")
    with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
        cmd(big, *query, "TIMEOUT", "1")


def test_fast_query_is_untouched_by_default_budget(big):
    reply = cmd(big, "FT.SEARCH", "idx", "word7", "NOCONTENT", "LIMIT", "0", "0")
    if _is_resp3(big):
        assert reply[b"total_results"] == N_DOCS // 50 and reply[b"warning"] == []
    else:
        assert reply == [N_DOCS // 50]


def _big_doc(n: int = 4000) -> str:
    import json

    return json.dumps({"items": [{"id": i, "name": f"n{i}", "tags": ["a", "b"], "p": {"x": i, "y": 1.5}}
                                 for i in range(n)]})


def test_json_read_budget(rr):
    assert rr.execute_command("JSON.SET", "big", "$", _big_doc()) == b"OK"
    full = rr.execute_command("JSON.GET", "big", "$..*..*")
    assert full.startswith(b"[") and len(full) > 100_000
    cmd(rr, "FT.CONFIG", "SET", "TIMEOUT", "1")
    with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
        rr.execute_command("JSON.GET", "big", "$..*..*..*")
    with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
        rr.execute_command("JSON.TYPE", "big", "$..*..*..*")
    assert rr.execute_command("JSON.GET", "big", "$.items[0].id") == b"[0]"  # small reads go on
    cmd(rr, "FT.CONFIG", "SET", "TIMEOUT", "0")
    assert rr.execute_command("JSON.GET", "big", "$..*..*") == full


def test_json_descent_order_and_values_match_locations(rr):
    """The location-free read path answers what the write path finds, in the same order."""
    from pion.storage.json_path import Path
    from pion.storage.json_value import loads

    doc = loads('{"a":{"b":[1,{"c":2}],"d":"x"},"e":[[3],[4,{"f":null}]],"g":1.5e300}')
    for text in ("$..*", "$..b", "$..[0]", "$.a..*", "$..*..*", "$..[*]", "$..c", "$.e[*][1]"):
        compiled = Path(text).compile()
        assert compiled.values(doc) == [v for v, _ in compiled.find(doc)], text
    assert rr.execute_command("JSON.SET", "d", "$", '{"a":{"b":[1,{"c":2}]},"g":1e16,"h":1e-7}') == b"OK"
    assert rr.execute_command("JSON.GET", "d", "$..*") == b'[{"b":[1,{"c":2}]},1e16,1e-7,[1,{"c":2}],1,{"c":2},2]'


def test_vsim_filter_budget(rr):
    pipe = rr.pipeline(transaction=False)
    rng = np.random.default_rng(3)
    for i in range(1500):
        x = rng.random(4).tolist()
        pipe.execute_command("VADD", "vs", "VALUES", "4", *x, f"e{i}", "SETATTR", f'{{"n": {i}}}')
    pipe.execute()
    def query(salt: int) -> list:  # never true: every element is examined; a new text each time
        expr = " or ".join(f".n == {-j - salt}" for j in range(1, 120))  # (verdicts are cached per text)
        return ["VSIM", "vs", "VALUES", "4", "0.5", "0.5", "0.5", "0.5", "COUNT", "10", "FILTER", expr,
                "FILTER-EF", "100000"]

    assert rr.execute_command(*query(0)) == []
    cmd(rr, "FT.CONFIG", "SET", "TIMEOUT", "1")
    for salt, extra in enumerate(([], ["NOTHREAD"], ["TRUTH"]), 1):
        with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
            rr.execute_command(*query(1000 * salt), *extra)
    assert len(rr.execute_command("VSIM", "vs", "VALUES", "4", "0.5", "0.5", "0.5", "0.5", "COUNT", "3")) == 3


def test_profile_reports_the_timeout(big):
    reply = cmd(big, "FT.PROFILE", "idx", "SEARCH", "QUERY", "%%word1%%", "LIMIT", "0", "5000", "TIMEOUT", "1")
    if _is_resp3(big):
        assert reply[b"Results"][b"warning"] == [TIMEOUT_TEXT]
        assert reply[b"Profile"][b"Shards"][0][b"Warning"] == TIMEOUT_TEXT
    else:
        assert isinstance(reply[0], list) and isinstance(reply[0][0], int)
        shard = reply[1][1][0]  # [Shards, [shard], Coordinator, []]
        assert [b"Warning", TIMEOUT_TEXT] in shard
