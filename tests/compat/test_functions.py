"""FUNCTION and FCALL as Redis 7: loading, flags, listing, DUMP/RESTORE (interchangeable with the
reference redis-server), errors compared with it, and libraries surviving a restart through the
log and through a snapshot (the EVAL script cache does not)."""

from __future__ import annotations

import hashlib
import re
import time

import pytest
import redis

from tests.support.servers import ProcessServer

LIB = """#!lua name=mylib
redis.register_function('setget', function(keys, args)
  redis.call('set', keys[1], args[1])
  return redis.call('get', keys[1])
end)
redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end,
  flags={'no-writes'}, description='read a key'}
"""


def load(r, code: str = LIB, *options: str):
    return r.execute_command("FUNCTION", "LOAD", *options, code)


def lib(name: str, fname: str, body: str = "return 1") -> str:
    return f"#!lua name={name}\nredis.register_function('{fname}', function(keys, args) {body} end)"


def test_load_and_fcall(rr):
    assert load(rr) in (b"mylib", "mylib")
    assert rr.execute_command("FCALL", "setget", 1, "k", "v") == b"v"
    assert rr.execute_command("FCALL", "SETGET", 1, "k", "w") == b"w"  # function names ignore case
    assert rr.execute_command("FCALL_RO", "peek", 1, "k") == b"w"


def test_fcall_ro_refuses_functions_that_may_write(r):
    load(r)
    with pytest.raises(redis.ResponseError, match=r"^Can not execute a script with write flag using \*_ro command.$"):
        r.execute_command("FCALL_RO", "setget", 1, "k", "v")
    load(r, "#!lua name=w\nredis.register_function{function_name='tries', flags={'no-writes'},\n"
            "  callback=function() return redis.call('set', 'x', 'y') end}")
    with pytest.raises(redis.ResponseError, match=r"not allowed from read-only scripts. script: tries, on @user_function:3."):
        r.execute_command("FCALL", "tries", 0)


def test_fcall_errors(r):
    load(r)
    with pytest.raises(redis.ResponseError, match="^Function not found$"):
        r.execute_command("FCALL", "nosuch", 0)
    with pytest.raises(redis.ResponseError, match="^Bad number of keys provided$"):
        r.execute_command("FCALL", "setget", "x")
    with pytest.raises(redis.ResponseError, match="can't be greater than number of args"):
        r.execute_command("FCALL", "setget", 5, "a")


def test_load_errors(r):
    cases = [
        ("return 1", "Missing library metadata"),
        ("#!lua\nreturn 1", "Library name was not given"),
        ("#!lua name=x\nreturn 1", "No functions registered"),
        ("#!lua name=x bad=1\nreturn 1", "Invalid metadata value given: bad=1"),
        ("#!nolua name=x\nreturn 1", "Engine 'nolua' not found"),
        ("#!lua name=a-b\nreturn 1", "Library names can only contain letters, numbers, or underscores"),
        # the shebang is split as sdssplitargs does: a backslash outside quotes stays in the name
        ("#!lua name=bad\\0name\nreturn 1", "Library names can only contain letters, numbers, or underscores"),
        ('#!lua "name=a b"\nreturn 1', "Library names can only contain letters, numbers, or underscores"),
        ("#!lua name=x\nsyntax error", "Error compiling function: user_function:2: '=' expected near 'error'"),
        ("#!lua name=x\nredis.call('ping')",
         "Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'"),
        ("#!lua name=x\nredis.register_function('f', function() end, 3)",
         "Error registering functions: ERR wrong number of arguments to redis.register_function"),
        ("#!lua name=x\nredis.register_function{function_name='f', callback=function() end, flags={'bad'}}",
         "Error registering functions: ERR unknown flag given"),
        ("#!lua name=x\nwhile true do end", "Error registering functions: ERR FUNCTION LOAD timeout"),
    ]
    for code, message in cases:
        with pytest.raises(redis.ResponseError) as info:
            load(r, code)
        assert str(info.value).startswith(message), code


def test_replace_and_collisions(r):
    load(r, lib("one", "f1"))
    with pytest.raises(redis.ResponseError, match="^Library 'one' already exists$"):
        load(r, lib("one", "f1"))
    load(r, lib("one", "f1", "return 2"), "REPLACE")
    assert r.execute_command("FCALL", "f1", 0) == 2
    with pytest.raises(redis.ResponseError, match="^Function F1 already exists$"):
        load(r, lib("two", "F1"))


def test_list_delete_flush_stats(r):
    load(r)
    load(r, lib("other", "o1"))
    listing = r.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "MY*", "WITHCODE")
    assert len(listing) == 1
    entry = dict(zip(listing[0][::2], listing[0][1::2], strict=True))
    assert entry[b"library_name"] == b"mylib" and entry[b"engine"] == b"LUA"
    assert entry[b"library_code"] == LIB.encode()
    functions = sorted((dict(zip(f[::2], f[1::2], strict=True)) for f in entry[b"functions"]), key=lambda f: f[b"name"])
    assert functions[0] == {b"name": b"peek", b"description": b"read a key", b"flags": [b"no-writes"]}
    assert functions[1] == {b"name": b"setget", b"description": None, b"flags": []}
    stats = r.execute_command("FUNCTION", "STATS")
    assert stats[:2] == [b"running_script", None]
    assert stats[3] == [b"LUA", [b"libraries_count", 2, b"functions_count", 3]]
    assert r.execute_command("FUNCTION", "DELETE", "other") == b"OK"
    with pytest.raises(redis.ResponseError, match="^Library not found$"):
        r.execute_command("FUNCTION", "DELETE", "other")
    with pytest.raises(redis.ResponseError, match="^Unknown argument bad$"):
        r.execute_command("FUNCTION", "LIST", "bad")
    assert r.execute_command("FUNCTION", "FLUSH", "SYNC") == b"OK"
    assert r.execute_command("FUNCTION", "LIST") == []
    with pytest.raises(redis.ResponseError, match="FUNCTION FLUSH only supports SYNC|ASYNC option"):
        r.execute_command("FUNCTION", "FLUSH", "bad")
    with pytest.raises(redis.ResponseError, match=r"^unknown subcommand or wrong number of arguments for 'Flush'\. Try FUNCTION HELP\.$"):
        r.execute_command("FUNCTION", "Flush", "SYNC", "extra")  # the subcommand as it was typed


def test_function_list_resp3_is_maps(r3):
    load(r3)
    listing = r3.execute_command("FUNCTION", "LIST")
    assert listing[0][b"library_name"] == b"mylib"


def test_dump_and_restore_policies(r):
    load(r, lib("a", "fa"))
    payload = r.execute_command("FUNCTION", "DUMP")
    with pytest.raises(redis.ResponseError, match="^Library a already exists$"):  # no quotes, unlike LOAD's
        r.execute_command("FUNCTION", "RESTORE", payload)
    assert r.execute_command("FUNCTION", "RESTORE", payload, "REPLACE") == b"OK"
    load(r, lib("b", "fb"))
    assert r.execute_command("FUNCTION", "RESTORE", payload, "FLUSH") == b"OK"
    assert [entry[1] for entry in r.execute_command("FUNCTION", "LIST")] == [b"a"]
    with pytest.raises(redis.ResponseError, match="^DUMP payload version or checksum are wrong$"):
        r.execute_command("FUNCTION", "RESTORE", payload[:-1] + b"x")
    with pytest.raises(redis.ResponseError, match="^Wrong restore policy given"):
        r.execute_command("FUNCTION", "RESTORE", payload, "bad")


@pytest.mark.redis
def test_dump_payloads_move_between_redis_and_pion(r, redis_ref):
    ref = redis.Redis(port=redis_ref.port)
    try:
        ref.execute_command("FUNCTION", "FLUSH")
        long_body = "return '" + "x" * 300 + "'"  # long enough for Redis to LZF-compress it
        ref.execute_command("FUNCTION", "LOAD", lib("fromredis", "fr", long_body))
        assert r.execute_command("FUNCTION", "RESTORE", ref.execute_command("FUNCTION", "DUMP")) == b"OK"
        assert r.execute_command("FCALL", "fr", 0) == b"x" * 300
        load(r, lib("frompion", "fp", "return 'p'"))
        ref.execute_command("FUNCTION", "FLUSH")
        assert ref.execute_command("FUNCTION", "RESTORE", r.execute_command("FUNCTION", "DUMP")) == b"OK"
        assert ref.execute_command("FCALL", "fp", 0) == b"p"
    finally:
        ref.execute_command("FUNCTION", "FLUSH")
        ref.close()


@pytest.mark.redis
def test_function_errors_match_the_reference_server(r, redis_ref):
    ref = redis.Redis(port=redis_ref.port)
    commands = [
        ("FUNCTION", "LOAD", lib("dl", "d1", "error('inner')")), ("FCALL", "d1", "0"),
        ("FUNCTION", "LOAD", lib("dl2", "d2", "return redis.call('nosuch')")), ("FCALL", "d2", "0"),
        ("FUNCTION", "LOAD", lib("dl3", "d3", "local t = nil; return t.x")), ("FCALL", "d3", "0"),
        ("FUNCTION", "LOAD", lib("dl4", "d4", "x = 1")), ("FCALL", "d4", "0"),
        ("FUNCTION", "LOAD", lib("dl5", "d5", "return {keys, args}")), ("FCALL", "d5", "2", "a", "b", "c"),
        ("FUNCTION", "LOAD", "#!lua name=bad name=bad2\nreturn 1"), ("FUNCTION", "LIST", "LIBRARYNAME"),
        ("FUNCTION", "LOAD", "#!lua name=r\nredis.register_function('f4')"),
        ("FUNCTION", "LOAD", "#!lua name=r\nredis.register_function{function_name='f4', callback=function() end, bad=1}"),
        ("FUNCTION", "LOAD", "#!lua name=r\nredis.register_function('', function() end)"),
        ("FUNCTION", "LOAD", "#!lua name=r\nredis.register_function('f', function() end) redis.register_function('f', function() end)"),
        ("FUNCTION", "RESTORE", "x", "flush", "extra"), ("FUNCTION", "KILL"), ("FUNCTION", "HELP"),
        ("FUNCTION", "LOAD", "#!lua name=bad\\0name\nreturn 1"), ("FUNCTION", "FLUSH", "sync", "extra"),
        ("FUNCTION", "LOAD", lib("dl", "d1")),
    ]
    try:
        ref.execute_command("FUNCTION", "FLUSH")
        for command in commands:
            ours = _outcome(r, command)
            theirs = _outcome(ref, command)
            assert ours == theirs, command
        restores = [_outcome(c, ("FUNCTION", "RESTORE", c.execute_command("FUNCTION", "DUMP"))) for c in (r, ref)]
        # a library that exists; which one Redis names follows its dict's order (seeded at random
        # per process), so only the form is compared: no quotes, unlike LOAD's message
        for kind, message in restores:
            assert kind == "error" and re.fullmatch(r"Library dl\d? already exists", message), message
    finally:
        ref.execute_command("FUNCTION", "FLUSH")
        ref.close()


def _outcome(client: redis.Redis, command: tuple):
    try:
        return client.execute_command(*command)
    except redis.ResponseError as exc:
        return ("error", str(exc))


# -- persistence ----------------------------------------------------------------------------------


def _client(srv: ProcessServer) -> redis.Redis:
    return redis.Redis(port=srv.port, socket_timeout=10)


def test_libraries_survive_a_crash_through_the_log(tmp_path):
    srv = ProcessServer(tmp_path / "data").start()
    try:
        client = _client(srv)
        load(client)
        client.execute_command("FCALL", "setget", 1, "k", "v1")
        client.script_load("return 'cached'")
        client.close()
        srv.kill9()
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        client = _client(srv)
        assert client.execute_command("FCALL", "setget", 1, "k", "v2") == b"v2"
        assert client.script_exists(hashlib.sha1(b"return 'cached'").hexdigest()) == [False]
        client.execute_command("FUNCTION", "DELETE", "mylib")
        client.close()
        srv.kill9()
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        client = _client(srv)
        assert client.execute_command("FUNCTION", "LIST") == []
        assert client.get("k") == b"v2"
        client.close()
    finally:
        srv.stop()


def test_libraries_survive_a_restart_through_the_snapshot(tmp_path):
    srv = ProcessServer(tmp_path / "data").start()
    try:
        client = _client(srv)
        load(client)
        load(client, lib("second", "s2", "return 'two'"))
        assert client.save()
        time.sleep(0.1)
        client.close()
        srv.kill9()
        wal_dir = tmp_path / "data"
        srv = ProcessServer(wal_dir, port=srv.port).start()
        client = _client(srv)
        assert client.execute_command("FCALL", "s2", 0) == b"two"
        assert client.execute_command("FCALL_RO", "peek", 1, "nokey") is None
        assert len(client.execute_command("FUNCTION", "LIST")) == 2
        client.close()
    finally:
        srv.stop()
