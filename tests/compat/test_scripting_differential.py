"""A differential run of many small scripts: EVAL on Pion and on the reference redis-server must
give byte-identical replies (values, errors and their script suffixes, conversions, libraries)."""

from __future__ import annotations

import socket

import pytest
import redis

DIFF_SCRIPTS = [
    "return 1", "return -1.5", "return 'x'", "return {1, 'a', {2, {3}}}", "return {1, nil, 2}",
    "return {false, true}", "return {ok='S'}", "return {err='E x'}", "return {err=1}", "return {}",
    "error('boom')", "error(1)", "error(nil)", "error('x', 0)", "error({err='MY e'})",
    "local t = nil; return t.x", "return y", "x = 1", "string.x = 1", "return string.x",
    "rawset(_G, 'x', 1)", "setmetatable(_G, nil)", "return rawget(_G, 'string') ~= nil",
    "return redis.call()", "return redis.call({})", "return redis.call('get')", "return redis.call('nosuch')",
    "return redis.call('multi')", "return redis.pcall('nosuch')", "return {pcall(redis.call, 'nosuch')}",
    "return redis.call('set', KEYS[1], ARGV[1])", "return redis.call('get', KEYS[1])",
    "return redis.call('incr', KEYS[1])", "return redis.pcall('incr', KEYS[1])",
    "return redis.call('hset', 'dh', 'a', 1, 'b', 2)", "return redis.call('hgetall', 'dh')",
    "redis.setresp(3) return redis.call('hgetall', 'dh').map.b", "return redis.call('lrange', 'nolist', 0, -1)",
    "return redis.call('zadd', 'dz', 1.5, 'm')", "return redis.call('zrange', 'dz', 0, -1, 'withscores')",
    "redis.setresp(3) return redis.call('zrange', 'dz', 0, -1, 'withscores')", "return redis.call('ping')",
    "return redis.log(redis.LOG_NOTICE, 'from the differential test')", "return redis.log(1)",
    "return redis.log('x', 'y')", "return redis.log(9, 'y')", "return redis.setresp(4)", "return redis.setresp()",
    "return redis.set_repl(redis.REPL_ALL)", "return redis.set_repl(99)", "return redis.sha1hex()",
    "return redis.sha1hex(1)", "return redis.error_reply()", "return redis.status_reply(1)",
    "return redis.error_reply('-MY x')", "return {redis.LOG_DEBUG, redis.LOG_WARNING, redis.REPL_REPLICA}",
    "return cjson.encode({a={1, 2, 3}})", "return cjson.encode({[1]=1, [30]=3})", "return cjson.encode(0/0)",
    "return cjson.encode(function() end)", "return cjson.decode('[1,2')", "return cjson.decode('{\"a\" 1}')",
    "return cjson.decode('[1,]')", "return cjson.decode('\"abc')", "return cjson.decode(' [ 1 , 2 ] ')[2]",
    "return cjson.encode(cjson.decode('{\"k\":[1,2.5,\"s\",true,null]}'))", "return cjson.encode('a/b\"\\\\')",
    "return cmsgpack.pack(1.5, 0.1, -1, -33, 200, 70000, 5000000000, -5000000000, true, nil, {1, 2})",
    "return {cmsgpack.unpack(cmsgpack.pack(1, 'x', {1, 2}))}", "return {bit.tobit(0xffffffff), bit.bnot(0), "
    "bit.rshift(-1, 28), bit.arshift(-256, 4), bit.rol(0x12345678, 8), bit.bswap(0x12345678), bit.tohex(255, -4)}",
    "return bit.band('x', 1)", "return {struct.pack('>d', 1.5), struct.pack('s', 'ab'), struct.pack('c3', 'abcdef')}",
    "return {struct.unpack('>I2', '\\1\\2')}", "return struct.pack('z', 1)", "return {struct.size('>iId')}",
    "return loadstring('return 1 + 1')()", "loadstring('y = 1')()", "return tostring(tonumber('0x10'))",
    "return #KEYS + #ARGV", "return ('abc'):upper()", "return string.format('%5.2f', 3.14159)",
    "#!lua flags=no-writes\nreturn redis.call('set', 'k', 'v')", "#!lua\nreturn redis.call('get', 'k')",
    "#!lua flags=bad\nreturn 1", "#!notlua\nreturn 1", "return redis.call('select', 1)",
    "return table.concat({'a', 'b'}, '-')", "return select('#', 1, 2, 3)", "return math.floor(2.7)",
    "return {type(redis.call), type(cjson.null), type(cjson.encode), type(bit.band)}",
    "for k in pairs(nil) do end", "local x = setmetatable(nil, {})", "return cjson.decode('\"a\\\\qb\"')",
]


@pytest.fixture
def redis_ref_clean(redis_ref):
    client = redis.Redis(port=redis_ref.port)
    client.flushall()
    client.script_flush()
    yield redis_ref
    client.close()


def _raw_call(port: int, *args: str) -> bytes:
    payload = b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload + b"*1\r\n$4\r\nPING\r\n")
        data = b""
        while not data.endswith(b"+PONG\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data[: -len(b"+PONG\r\n")]


@pytest.mark.redis
def test_scripts_match_the_reference_server(server, redis_ref_clean):
    mismatches = []
    for body in DIFF_SCRIPTS:
        args = ("EVAL", body, "1", "dk", "dv")
        ours, theirs = _raw_call(server.port, *args), _raw_call(redis_ref_clean.port, *args)
        if ours != theirs:
            mismatches.append((body, ours, theirs))
    assert mismatches == []


def _raw_as(port: int, user: str, password: str, *args: str) -> bytes:
    """One command on a connection authenticated as ``user`` (AUTH's reply left out)."""
    parts = [("AUTH", user, password), args]
    payload = b"".join(b"*%d\r\n" % len(p) + b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in p)
                       for p in parts)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload + b"*1\r\n$4\r\nPING\r\n")
        data = b""
        while not data.endswith(b"+PONG\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"+OK\r\n"), data
    return data[len(b"+OK\r\n"): -len(b"+PONG\r\n")]


@pytest.mark.redis
def test_acl_check_cmd_answers_nil_for_a_denied_command_or_key(server, redis_ref_clean):
    """Redis's "Script ACL check" (tests/unit/scripting.tcl): true when the caller may run it,
    false (a nil reply) for a command or a key its ACL user may not touch, an error for an
    unknown command."""
    cases = [("return redis.acl_check_cmd('set','xx',1)", "1", "xx"),
             ("return redis.acl_check_cmd('hset','xx','f',1)", "1", "xx"),
             ("return redis.acl_check_cmd('set','yy',1)", "0"),
             ("return redis.acl_check_cmd('invalid-cmd','arg')", "0"),
             ("return {redis.acl_check_cmd('get','xx') == false, redis.acl_check_cmd('set','xa','v')}", "0")]
    replies = []
    for port in (server.port, redis_ref_clean.port):
        redis.Redis(port=port).execute_command("ACL", "SETUSER", "bob", "on", ">123", "+@scripting", "+set", "+ping", "~x*")
        replies.append([_raw_as(port, "bob", "123", "EVAL", *case) for case in cases])
    assert replies[0] == replies[1]
    assert replies[0][:3] == [b":1\r\n", b"$-1\r\n", b"$-1\r\n"] and replies[0][3].startswith(
        b"-ERR Invalid command passed to redis.acl_check_cmd()")
    assert replies[0][4] == b"*2\r\n:1\r\n:1\r\n"


CONSISTENT_EVAL_STEPS = [  # Redis 7.0.15's "Consistent eval error reporting", step by step
    ("CONFIG", "SET", "maxmemory", "1"),
    ("EVAL", "return redis.call('set','x','y')", "1", "x"),
    ("EVAL", "local t = redis.pcall('set','x','y') if t['err'] == \"OOM command not allowed when used memory > "
     "'maxmemory'.\" then return 1 else return 0 end", "1", "x"),
    ("EVAL", "return redis.pcall('set','x','y')", "1", "x"),
    ("CONFIG", "SET", "maxmemory", "0"),
    ("EVAL", "return redis.call('select',99)", "0"),
    ("EVAL", "local t = redis.pcall('select',99) if t['err'] == \"ERR DB index is out of range\" then return 1 "
     "else return 0 end", "0"),
    ("EVAL_RO", "return redis.call('set','x','y')", "1", "x"),
    ("EVAL_RO", "local t = redis.pcall('set','x','y') if t['err'] == \"ERR Write commands are not allowed from "
     "read-only scripts.\" then return 1 else return 0 end", "1", "x"),
    ("SET", "Sicily", "1"),
    ("EVAL", "return redis.call('GEOADD', 'Sicily', '13.361389', '38.115556', 'Palermo', '15.087269', '37.502669', "
     "'Catania')", "1", "x"),
]


def _stats(client: redis.Redis) -> tuple:
    """What the Redis test asserts after each step: errorstats, total_error_replies, and calls /
    rejected_calls / failed_calls of the commands involved."""
    cmds = client.info("commandstats")
    keep = {name: {k: v for k, v in stat.items() if k in ("calls", "rejected_calls", "failed_calls")}
            for name, stat in cmds.items() if name.split("_", 1)[-1] in ("set", "eval", "eval_ro", "select", "geoadd")}
    return client.info("errorstats"), client.info("stats")["total_error_replies"], keep


@pytest.mark.redis
def test_consistent_eval_error_reporting_matches_the_reference_server(server, redis_ref_clean):
    """The steps of Redis's "Consistent eval error reporting" on both servers, with the replies
    and the error and command statistics after each step compared. One key is stored first:
    Pion's maxmemory counts the dataset (docs/compat-differences.md), so ``maxmemory 1`` refuses
    writes once anything is stored, as Redis's process overhead always exceeds it."""
    results = []
    for port in (server.port, redis_ref_clean.port):
        client = redis.Redis(port=port)
        client.set("ballast", "x" * 100)
        seen = []
        for step in CONSISTENT_EVAL_STEPS:
            client.config_resetstat()
            seen.append((_raw_call(port, *step), _stats(client)))
        client.config_set("maxmemory", 0)
        results.append(seen)
    for step, ours, theirs in zip(CONSISTENT_EVAL_STEPS, results[0], results[1], strict=True):
        assert ours == theirs, step
    assert results[0][1][0].startswith(b"-OOM command not allowed when used memory > 'maxmemory'")
