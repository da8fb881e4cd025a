"""One short hostile command never freezes the server (issue 27): a linear-time regex engine for
JSONPath's ``=~``, fixed nesting limits in every recursive parser (FT query, APPLY/FILTER
expressions, JSON filters, cmsgpack), flat chains that neither recurse nor take seconds, and
VSIM FILTER's tokenizer linear in the expression.

Each command runs against a ``pion-server`` process while a canary connection PINGs every 20 ms;
the canary's longest wait must stay under a generous bound (``BOUND``: the goal is 250 ms on a
quiet machine; the 20,000-term chains measured 250-880 ms at load average 9-13 on two cores, so
the bound leaves room for a loaded CI host while still catching the 9-36 s stalls of before). The errors are the peers' texts:
RediSearch's ``Parser stack overflow`` / ``Syntax error at offset N near X``, RedisJSON's
``Error occurred on position N, ...``.
"""

from __future__ import annotations

import json
import sys

import pytest
import redis
from tests.support.canary import Canary
from tests.support.servers import ProcessServer

from pion.storage import json_path

BOUND = 2.0
DEEP = 5000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ProcessServer(tmp_path_factory.mktemp("hostile")).start(timeout=120)
    yield srv
    srv.stop()


@pytest.fixture
def r(server):
    client = redis.Redis(host="127.0.0.1", port=server.port, protocol=2, socket_timeout=60)
    client.flushall()
    yield client
    client.close()


def guarded(server, r, *argv):
    """Run ``argv`` with the canary on; returns the reply or the ResponseError."""
    with Canary(server.port) as canary:
        try:
            reply = r.execute_command(*argv)
        except redis.ResponseError as exc:
            reply = exc
    waited = canary.check(BOUND)
    print(f"canary longest wait {waited * 1000:.1f} ms: {str(argv)[:60]}")
    assert b"RecursionError" not in str(reply).encode()
    return reply


# -- JSONPath =~ ------------------------------------------------------------------------------


def test_catastrophic_regex_is_linear(server, r):
    pytest.importorskip("re2")
    r.execute_command("JSON.SET", "re", "$", json.dumps([{"s": "a" * 34 + "!"}, {"s": "aaa"}]))
    # (a+)+$ backtracks 2^34 times on Python's re; RE2 answers at once, and rightly: no match for
    # the string ending in "!", a match for "aaa"
    assert json.loads(guarded(server, r, "JSON.GET", "re", '$[?(@.s =~ "(a+)+$")]')) == [{"s": "aaa"}]
    # unanchored, as RedisJSON's Rust regex: a match anywhere in the string counts
    assert json.loads(r.execute_command("JSON.GET", "re", '$[?(@.s =~ "a!")]')) == [{"s": "a" * 34 + "!"}]
    assert json.loads(r.execute_command("JSON.GET", "re", '$[?(@.s =~ "(?i)A{3}$")]')) == [{"s": "aaa"}]


@pytest.mark.parametrize("pattern", [r"(a)\\1", "(?=a)a", "(?<!b)a", "["])
def test_regex_re2_cannot_run_is_refused(server, r, pattern):
    pytest.importorskip("re2")
    r.execute_command("JSON.SET", "re", "$", '[{"s":"aa"}]')
    with pytest.raises(redis.ResponseError, match="invalid regular expression"):
        r.execute_command("JSON.GET", "re", f'$[?(@.s =~ "{pattern}")]')


def test_regex_without_re2_is_refused_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "re2", None)  # import re2 raises ImportError
    with pytest.raises(json_path.JsonPathError, match=r"google-re2.*pion\[search\]"):
        json_path.compile_path('$[?(@.s =~ "a")]')


# -- JSONPath nesting and flat chains -------------------------------------------------------------


def test_json_filter_flat_and_chain(server, r):
    r.execute_command("JSON.SET", "k", "$", '[{"s":1},{"t":2}]')
    got = guarded(server, r, "JSON.GET", "k", "$[?(" + " && ".join(["@.s"] * 20000) + ")]")
    assert json.loads(got) == [{"s": 1}]
    got = guarded(server, r, "JSON.GET", "k", "$[?(" + " || ".join(["@.x"] * 20000 + ["@.t"]) + ")]")
    assert json.loads(got) == [{"t": 2}]


@pytest.mark.parametrize("expr", ["(" * DEEP + "@.s" + ")" * DEEP, "!" * DEEP + "@.s",
                                  "@.a[?(" * DEEP + "@.s" + ")]" * DEEP])
def test_json_filter_too_deep(server, r, expr):
    r.execute_command("JSON.SET", "k", "$", '[{"s":1}]')
    reply = guarded(server, r, "JSON.GET", "k", f"$[?({expr})]")
    assert isinstance(reply, redis.ResponseError)
    assert str(reply).startswith("Error occurred on position ") and "nested deeper than 128" in str(reply)


def test_json_filter_at_the_limit(r):
    r.execute_command("JSON.SET", "k", "$", '[{"s":1},{"s":0}]')
    depth = json_path.MAX_NESTING - 1  # the filter's own brackets are one level
    got = r.execute_command("JSON.GET", "k", "$[?(" + "(" * depth + "@.s == 1" + ")" * depth + ")]")
    assert json.loads(got) == [{"s": 1}]
    assert json.loads(r.execute_command("JSON.GET", "k", "$[?(" + "!" * depth + "@.s == 0)]")) == [{"s": 1}]


# -- FT query, APPLY and FILTER -------------------------------------------------------------------


@pytest.fixture
def idx(r):
    r.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "d:", "SCHEMA", "t", "TEXT", "n", "NUMERIC")
    r.hset("d:1", mapping={"t": "hello", "n": 1})
    r.hset("d:2", mapping={"t": "world", "n": 2})
    # these tests measure the parsers and evaluators on long input, answered in full: the query
    # time budget (FT.CONFIG TIMEOUT, 500 ms by default) would cut a 20,000-term query short
    # under load; the budget has its own tests (test_no_freeze.py, test_query_timeout.py)
    r.execute_command("FT.CONFIG", "SET", "TIMEOUT", "0")
    return r


TOO_DEEP = "Parser stack overflow. Try moving nested parentheses more to the left"


@pytest.mark.parametrize("query", ["(" * DEEP + "hello" + ")" * DEEP, "-" * DEEP + "hello", "~" * DEEP + "hello",
                                   "@t:(" * DEEP + "hello" + ")" * DEEP, "@t:" + "(" * DEEP + "hello" + ")" * DEEP])
@pytest.mark.parametrize("command", ["FT.SEARCH", "FT.EXPLAIN", "FT.AGGREGATE"])
@pytest.mark.parametrize("dialect", ["1", "2"])
def test_query_too_deep(server, idx, command, query, dialect):
    reply = guarded(server, idx, command, "idx", query, "DIALECT", dialect)
    if dialect == "2" and query.startswith("@t:(@t:"):
        # DIALECT 2's `@field:( ... )` holds a text expression: a second modifier is a syntax error
        assert isinstance(reply, redis.ResponseError) and str(reply) == "Syntax error at offset 4 near t"
        return
    assert isinstance(reply, redis.ResponseError) and str(reply) == TOO_DEEP


@pytest.mark.parametrize("dialect", ["1", "2", "3"])
def test_query_at_the_limit(idx, dialect):
    from pion.vector.query_parser import MAX_NESTING

    query = "(" * MAX_NESTING + "hello" + ")" * MAX_NESTING
    assert idx.execute_command("FT.SEARCH", "idx", query, "NOCONTENT", "DIALECT", dialect)[1:] == [b"d:1"]
    assert idx.execute_command("FT.EXPLAIN", "idx", query, "DIALECT", dialect)
    assert idx.execute_command("FT.AGGREGATE", "idx", query, "DIALECT", dialect)[0] == 1
    negated = "-" * (MAX_NESTING - 1) + "-hello"  # an even count: not(not(...hello))
    assert idx.execute_command("FT.SEARCH", "idx", negated, "NOCONTENT", "DIALECT", dialect)[1:] == [b"d:1"]
    with pytest.raises(redis.ResponseError, match="^Parser stack overflow"):
        idx.execute_command("FT.SEARCH", "idx", "(" + query + ")", "DIALECT", dialect)


def test_long_flat_query(server, idx):
    reply = guarded(server, idx, "FT.SEARCH", "idx", " | ".join(["hello"] * 20000), "NOCONTENT")
    assert reply[1:] == [b"d:1"]


def test_apply_flat_chain(server, idx):
    reply = guarded(server, idx, "FT.AGGREGATE", "idx", "@n:[1 1]", "LOAD", "1", "@n",
                    "APPLY", "+".join(["@n"] * 20000), "AS", "s")
    assert reply[1] == [b"n", b"1", b"s", b"20000"]
    reply = guarded(server, idx, "FT.AGGREGATE", "idx", "@n:[2 2]", "LOAD", "1", "@n",
                    "APPLY", "^".join(["@n"] * 3) + "^" + "^".join(["1"] * 20000), "AS", "s")
    assert reply[1] == [b"n", b"2", b"s", b"16"]  # right-associative: 2^(2^(2^1...)) = 2^4
    reply = guarded(server, idx, "FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n",
                    "FILTER", " && ".join(["@n"] * 19999 + ["@n - 1"]))
    assert reply[0] >= 1 and reply[1:] == [[b"n", b"2"]]  # n=1 fails the last term


@pytest.mark.parametrize("expr", ["(" * DEEP + "@n" + ")" * DEEP, "-" * DEEP + "@n", "!" * DEEP + "@n",
                                  "abs(" * DEEP + "@n" + ")" * DEEP])
@pytest.mark.parametrize("step", ["APPLY", "FILTER"])
def test_expression_too_deep(server, idx, expr, step):
    argv = ["FT.AGGREGATE", "idx", "*", "LOAD", "1", "@n", step, expr] + (["AS", "s"] if step == "APPLY" else [])
    reply = guarded(server, idx, *argv)
    assert isinstance(reply, redis.ResponseError)
    assert str(reply).startswith("Syntax error at offset ") and "nested deeper than 50 levels" in str(reply)


def test_expression_at_the_limit(idx):
    from pion.vector.expressions import MAX_NESTING

    expr = "(" * MAX_NESTING + "@n+1" + ")" * MAX_NESTING
    reply = idx.execute_command("FT.AGGREGATE", "idx", "@n:[1 1]", "LOAD", "1", "@n", "APPLY", expr, "AS", "s")
    assert reply[1] == [b"n", b"1", b"s", b"2"]


# -- VSIM FILTER and cmsgpack ----------------------------------------------------------------------


def test_vsim_filter_deep_and_long(server, r):
    r.execute_command("VADD", "vs", "VALUES", "2", "1", "0", "e1", "SETATTR", '{"a":1}')
    r.execute_command("VADD", "vs", "VALUES", "2", "0", "1", "e2", "SETATTR", '{"a":0}')
    query = ["VSIM", "vs", "VALUES", "2", "1", "0", "FILTER"]
    assert guarded(server, r, *query, "(" * DEEP + ".a" + ")" * DEEP) == [b"e1"]
    assert guarded(server, r, *query, " && ".join([".a"] * 20000)) == [b"e1"]
    assert guarded(server, r, *query, "!" * (DEEP - 1) + "!.a") == [b"e1"]  # an even count of nots
    reply = guarded(server, r, *query, "(" * DEEP + ".a")
    assert isinstance(reply, redis.ResponseError) and "syntax error" in str(reply).lower()


def test_cmsgpack_unpack_too_deep(server, r):
    from pion.server.scripting.msgpack_lib import MAX_DECODE_DEPTH

    script = "return cmsgpack.unpack(string.rep('\\145', tonumber(ARGV[1])) .. '\\1')"
    reply = guarded(server, r, "EVAL", script, "0", str(DEEP))
    assert isinstance(reply, redis.ResponseError)
    assert "stack overflow (in function mp_decode_to_lua_array)" in str(reply)
    reply = r.execute_command("EVAL", script, "0", str(MAX_DECODE_DEPTH))
    for _ in range(MAX_DECODE_DEPTH - 1):
        (reply,) = reply
    assert reply == [1]


# -- JSON documents stay within the nesting limit ------------------------------------------------


def test_json_writes_cannot_nest_past_the_limit(server, r):
    def nested(levels: int, leaf: str = "1") -> str:
        return '{"a":' * levels + leaf + "}" * levels

    r.execute_command("JSON.SET", "j", "$", nested(99, "[]"))  # 100 levels: the innermost is an array
    before = r.execute_command("JSON.GET", "j")
    path = "$" + ".a" * 99  # the array, 99 containers deep
    parent = "$" + ".a" * 98
    refusals = [
        ("JSON.SET", "j", path, nested(30)),       # 99 + 30 = 129
        ("JSON.SET", "j", parent + ".b", nested(31)),  # a new member: 99 + 30 = 129
        ("JSON.MERGE", "j", path, nested(30)),
        ("JSON.ARRAPPEND", "j", path, nested(29)),  # inside the array: 99 + 1 + 29 = 129
        ("JSON.ARRINSERT", "j", path, "0", nested(29)),
    ]
    for argv in refusals:
        with pytest.raises(redis.ResponseError, match="^recursion limit exceeded: the document would nest deeper"):
            r.execute_command(*argv)
        assert r.execute_command("JSON.GET", "j") == before  # nothing changed
    assert r.execute_command("JSON.ARRAPPEND", "j", path, nested(28)) == [1]  # exactly 128 levels
    assert r.execute_command("JSON.SET", "j", parent + ".b", nested(29)) == b"OK"
    assert json.loads(r.execute_command("JSON.GET", "j", "$..b"))  # readable, no RecursionError
    assert guarded(server, r, "JSON.RESP", "j")


def test_lua_deep_table_reply(server, r):
    from pion.server.scripting.convert import MAX_DEPTH

    script = "local t = {} local c = t for i = 1, tonumber(ARGV[1]) do c[1] = {} c = c[1] end return t"
    reply = guarded(server, r, "EVAL", script, "0", str(DEEP))
    for _ in range(MAX_DEPTH):  # Redis's "reached lua stack limit" where the converter stops
        assert isinstance(reply, list) and len(reply) == 1
        (reply,) = reply
    assert isinstance(reply, redis.ResponseError) and "reached lua stack limit" in str(reply)


def test_lua_deep_table_argument(server, r):
    script = ("local t = {} local c = t for i = 1, tonumber(ARGV[1]) do c[1] = {} c = c[1] end "
              "return redis.call('SET', 'x', t)")
    reply = guarded(server, r, "EVAL", script, "0", str(DEEP))
    assert isinstance(reply, redis.ResponseError)
    assert "Lua redis lib command arguments must be strings or integers" in str(reply)
    assert r.exists("x") == 0
