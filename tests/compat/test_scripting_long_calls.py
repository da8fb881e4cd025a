"""redis.call with as many arguments as Redis takes (``redis.call(unpack(t))``, Redis's "Script
check unpack with massive arguments"), and the error lines that must survive the way Pion gets
there: lupa takes at most 7,997 arguments per call into Python, so ``redis.call`` hands a long
list over as a table from a Lua function, and user code is compiled without tail calls so that
``return redis.call(...)`` keeps the script's frame (scripting/tailcalls.py). Replies are compared
byte for byte with redis-server 7.0.15."""

from __future__ import annotations

import pytest
import redis
from lupa import lua51

from pion.server.scripting.tailcalls import without_tail_calls
from tests.compat.test_scripting_differential import _raw_call

MASSIVE = "local a = {} for i=1,%d do a[i] = 1 end return redis.call('lpush', KEYS[1], unpack(a))"
SCRIPTS = [
    MASSIVE % 7999,  # Redis's own test: 8,001 arguments
    MASSIVE % 8000,  # past what unpack can return: Lua's own error, the same on both
    "local a = {} for i=1,7999 do a[i] = 'x' end return redis.pcall('sadd', KEYS[1], unpack(a))",
    "local a = {} for i=1,7999 do a[i] = i end return #redis.call('hmget', KEYS[1], unpack(a))",
    "local a = {} for i=1,7999 do a[i] = 1 end a[5000] = {} return redis.call('lpush', KEYS[1], unpack(a))",
    "local a = {} for i=1,7999 do a[i] = 1 end return redis.call('nosuch', unpack(a))",
    # the error lines that a Lua wrapper reached by a tail call would lose
    "local x = 1\nreturn redis.call('incr', 'alist')",
    "local function f() return redis.call('incr', 'alist') end\nlocal y = 2\nreturn f()",
    "\n\nreturn redis.call('incr', 'alist', 'extra')",
    "return redis.pcall('incr', 'alist')",
    "local ok, e = pcall(redis.call, 'incr', 'alist')\nreturn e",
    "return {type(redis.call), type(redis.pcall), tostring(redis.call) ~= nil}",
    "local function f(n) if n == 0 then return 'done' end return f(n - 1) end\nreturn f(1000)",
    # a tail call into the sandbox's Lua-written builtins used to lose the suffix the same way
    "return pairs(nil)", "return type()", "return setmetatable(nil, {})", "return rawset(nil, 1, 1)",
    "\nreturn tostring()", "return next(nil)",
]


@pytest.fixture
def both(server, redis_ref):
    for port in (server.port, redis_ref.port):
        client = redis.Redis(port=port)
        client.flushall()
        client.rpush("alist", "x")
    return server.port, redis_ref.port


@pytest.mark.redis
def test_long_calls_and_error_lines_match_the_reference_server(both):
    ours, theirs = both
    mismatches = []
    for body in SCRIPTS:
        for port in both:
            redis.Redis(port=port).delete("k")
        args = ("EVAL", body, "1", "k")
        mine, ref = _raw_call(ours, *args), _raw_call(theirs, *args)
        if mine != ref:
            mismatches.append((body[:60], mine[:200], ref[:200]))
    assert mismatches == []
    assert _raw_call(ours, "EVAL", MASSIVE % 7999, "1", "k") == b":7999\r\n"


def test_deep_tail_recursion_is_the_one_difference(r):
    """Without tail calls a tail-recursive script is bounded by Lua's call-info limit (LUAI_MAXCALLS,
    20,000 levels); Redis's Lua runs it at any depth (docs/compat-differences.md)."""
    body = "local function f(n) if n == 0 then return 'done' end return f(n - 1) end return f(%d)"
    assert r.eval(body % 10000, 0) == b"done"
    with pytest.raises(redis.ResponseError, match="stack overflow"):
        r.eval(body % 100000, 0)


def test_without_tail_calls_rewrites_every_tail_call_and_keeps_the_results():
    lua = lua51.LuaRuntime(encoding=None)
    dump = lua.eval(b"function(src) return string.dump(assert(loadstring(src, '=t'))) end")
    load = lua.eval(b"function(chunk) return assert(loadstring(chunk)) end")
    source = (b"local function two(a) return a, a + 1 end\n"
              b"local function nested() return (function() return two(5) end)() end\n"
              b"return select('#', two(1)), nested()")
    chunk = dump(source)
    patched = without_tail_calls(chunk)
    assert len(patched) == len(chunk) and patched != chunk

    assert load(patched)() == load(chunk)() == (2, 5, 6)
    assert without_tail_calls(patched) == patched  # none left
    for bad in (b"", b"return 1", chunk[:-1], chunk + b"x", chunk[:5] + b"\x01" + chunk[6:]):
        with pytest.raises(ValueError):
            without_tail_calls(bad)
