"""EVAL/EVALSHA/EVAL_RO and SCRIPT through redis-py and raw bytes: Redis 7's conversion rules both
ways in RESP2 and RESP3, its error formats, the sandbox, the refusals, effects logging, and a
differential run of many small scripts against the reference redis-server."""

from __future__ import annotations

import hashlib

import pytest
import redis

from tests.support.servers import ThreadServer

SHA_RETURN_1 = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"


def sha(body: str) -> str:
    return hashlib.sha1(body.encode()).hexdigest()


def ev(r, body: str, *keys_and_args, numkeys: int = 0):
    return r.execute_command("EVAL", body, numkeys, *keys_and_args)


# -- Lua -> reply ---------------------------------------------------------------------------------


def test_lua_values_become_replies_resp2(raw):
    cases = [
        ("return 3.99", b":3\r\n"),
        ("return -3.99", b":-3\r\n"),
        ("return 1e20", b":-9223372036854775808\r\n"),
        ("return 'str'", b"$3\r\nstr\r\n"),
        ("return {1, 2, nil, 3}", b"*2\r\n:1\r\n:2\r\n"),
        ("return {1, false, true}", b"*3\r\n:1\r\n$-1\r\n:1\r\n"),
        ("return true", b":1\r\n"),
        ("return false", b"$-1\r\n"),
        ("return nil", b"$-1\r\n"),
        ("return {ok='FINE'}", b"+FINE\r\n"),
        ("return {err='MY boom'}", b"-MY boom\r\n"),
        ("return {a=1}", b"*0\r\n"),
        ("return {double=1.5}", b"$3\r\n1.5\r\n"),
        ("return {map={a=1}}", b"*2\r\n$1\r\na\r\n:1\r\n"),
        ("return {set={a=true}}", b"*1\r\n$1\r\na\r\n"),
        ("return {big_number='123'}", b"$3\r\n123\r\n"),
        ("return {'a', {ok='x'}, {err='y'}}", b"*3\r\n$1\r\na\r\n+x\r\n-y\r\n"),
    ]
    for body, expected in cases:
        raw.cmd("EVAL", body, "0")
        assert raw.read_exactly(expected) == expected, body


def test_lua_values_become_replies_resp3(raw):
    raw.cmd("HELLO", "3")
    raw.read_some()
    cases = [
        ("redis.setresp(3); return true", b"#t\r\n"),
        ("redis.setresp(3); return false", b"#f\r\n"),
        ("return false", b"_\r\n"),
        ("return {double=0.1}", b",0.10000000000000001\r\n"),
        ("return {map={a=1}}", b"%1\r\n$1\r\na\r\n:1\r\n"),
        ("return {set={a=true}}", b"~1\r\n$1\r\na\r\n"),
        ("return {big_number='12345678901234567890'}", b"(12345678901234567890\r\n"),
        ("return {verbatim_string={format='txt', string='hi'}}", b"=6\r\ntxt:hi\r\n"),
    ]
    for body, expected in cases:
        raw.cmd("EVAL", body, "0")
        assert raw.read_exactly(expected) == expected, body


def test_setresp3_booleans_reach_a_resp2_caller_as_integers(r):
    assert ev(r, "redis.setresp(3); return {true, false}") == [1, 0]


# -- reply -> Lua ---------------------------------------------------------------------------------


def test_replies_reach_lua_as_resp2_values(r):
    r.hset("h", mapping={"a": "1"})
    r.zadd("z", {"m": 1.5})
    assert ev(r, "return {type(redis.call('get', 'nokey')), tostring(redis.call('get', 'nokey'))}") == [
        b"boolean", b"false"]
    assert ev(r, "return redis.call('hgetall', 'h')") == [b"a", b"1"]
    assert ev(r, "return redis.call('zscore', 'z', 'm')") == b"1.5"
    assert ev(r, "return redis.call('set', 'k', 'v')") == b"OK"
    assert ev(r, "return redis.call('set', 'k', 'v').ok") == b"OK"
    assert ev(r, "return type(redis.call('incr', 'n'))") == b"number"


def test_replies_reach_lua_as_resp3_values(r):
    r.hset("h", mapping={"a": "1"})
    r.sadd("s", "x")
    r.zadd("z", {"m": 1.5})
    script = """redis.setresp(3)
    local m = redis.call('hgetall', 'h')
    local s = redis.call('smembers', 's')
    local d = redis.call('zscore', 'z', 'm')
    return {m.map.a, tostring(s.set.x), tostring(d.double), tostring(redis.call('get', 'nokey') == nil),
            tostring(redis.call('exists', 'h'))}"""
    assert ev(r, script) == [b"1", b"true", b"1.5", b"true", b"1"]


def test_resp3_map_reply_keeps_its_type_for_a_resp3_caller(r3):
    r3.hset("h", mapping={"a": "1", "b": "2"})
    assert r3.execute_command("EVAL", "redis.setresp(3); return redis.call('hgetall', 'h')", 0) == {
        b"a": b"1", b"b": b"2"}


def test_number_arguments_are_formatted_as_redis_does(r):
    assert ev(r, "return {redis.call('echo', 3.5), redis.call('echo', 1e20), redis.call('echo', 0.1)}") == [
        b"3.5", b"1e+20", b"0.10000000000000001"]


# -- errors -----------------------------------------------------------------------------------------


def test_error_formats(r):
    body = "return redis.call('nosuch')"
    with pytest.raises(redis.ResponseError) as info:
        ev(r, body)
    assert str(info.value) == f"Unknown Redis command called from script script: {sha(body)}, on @user_script:1."
    body = "\n\nlocal t = nil\n return t.x"
    with pytest.raises(redis.ResponseError) as info:
        ev(r, body)
    assert str(info.value) == (
        f"user_script:4: attempt to index local 't' (a nil value) script: {sha(body)}, on @user_script:4.")
    with pytest.raises(redis.ResponseError, match=r"^Error compiling script \(new function\): user_script:1: '=' expected near 'error'$"):
        ev(r, "syntax error here")


def test_wrongtype_from_redis_call_and_pcall(r):
    r.set("s", "text")
    with pytest.raises(redis.ResponseError, match=r"^value is not an integer or out of range script: "):
        ev(r, "return redis.call('incr', KEYS[1])", "s", numkeys=1)
    with pytest.raises(redis.ResponseError, match=r"^value is not an integer or out of range$"):
        ev(r, "return redis.pcall('incr', KEYS[1])", "s", numkeys=1)
    assert ev(r, "local ok, e = pcall(redis.call, 'incr', 's') return {tostring(ok), e}") == [
        b"false", b"ERR value is not an integer or out of range"]


def test_redis_call_argument_errors(r):
    with pytest.raises(redis.ResponseError, match="Please specify at least one argument for this redis lib call"):
        ev(r, "return redis.call()")
    with pytest.raises(redis.ResponseError, match="Lua redis lib command arguments must be strings or integers"):
        ev(r, "return redis.call('set', 'a', {})")
    with pytest.raises(redis.ResponseError, match="Wrong number of args calling Redis command from script"):
        ev(r, "return redis.call('get')")


def test_error_and_status_reply_helpers(r):
    with pytest.raises(redis.ResponseError, match="^MY x$"):
        ev(r, "return redis.error_reply('MY x')")
    with pytest.raises(redis.ResponseError, match="^x$"):  # "ERR x": redis-py drops the ERR
        ev(r, "return redis.error_reply('x')")
    assert ev(r, "return redis.status_reply('FOO')") == b"FOO"


def test_numkeys_errors(r):
    with pytest.raises(redis.ResponseError, match="Number of keys can't be negative"):
        r.execute_command("EVAL", "return 1", -1)
    with pytest.raises(redis.ResponseError, match="Number of keys can't be greater than number of args"):
        r.execute_command("EVAL", "return 1", 3, "a")
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        r.execute_command("EVAL", "return 1", "x")


# -- the sandbox ------------------------------------------------------------------------------------


def test_globals_are_protected(r):
    with pytest.raises(redis.ResponseError, match=r"user_script:1: Attempt to modify a readonly table script"):
        ev(r, "x = 1")
    with pytest.raises(redis.ResponseError, match=r"Script attempted to access nonexistent global variable 'y'"):
        ev(r, "return y")
    with pytest.raises(redis.ResponseError, match=r"Attempt to modify a readonly table"):
        ev(r, "string.upper = nil")
    with pytest.raises(redis.ResponseError, match=r"Attempt to modify a readonly table"):
        ev(r, "rawset(_G, 'x', 1)")
    # _G's metatable is itself read-only (Redis's "Try trick global protection 2"), and empty
    with pytest.raises(redis.ResponseError, match=r"user_script:1: Attempt to modify a readonly table"):
        ev(r, "local g = getmetatable(_G); g.__index = {}")
    assert ev(r, "return type(getmetatable(_G).__index)") == b"nil"
    for name in ("loadfile", "dofile", "print", "require", "debug", "io", "getfenv"):
        with pytest.raises(redis.ResponseError, match=f"nonexistent global variable '{name}'"):
            ev(r, f"return {name}")


def test_os_has_only_clock(r):
    assert ev(r, "return type(os.clock())") == b"number"
    with pytest.raises(redis.ResponseError, match="attempt to call field 'execute'"):
        ev(r, "return os.execute('true')")


def test_loadstring_chunks_run_in_the_sandbox_and_bytecode_is_refused(r):
    assert ev(r, "return loadstring('return 1 + 1')()") == 2
    with pytest.raises(redis.ResponseError, match="Attempt to modify a readonly table"):
        ev(r, "loadstring('y = 1')()")
    assert ev(r, "return tostring(loadstring(string.dump(function() return 1 end)))") == b"nil"


def test_keys_and_argv(r):
    assert ev(r, "return {KEYS, ARGV}", "k1", "k2", "a1", numkeys=2) == [[b"k1", b"k2"], [b"a1"]]


def test_select_inside_a_script_does_not_change_the_callers_db(r):
    ev(r, "redis.call('select', 1) redis.call('set', 'in1', 'v')")
    assert r.get("in1") is None
    r.select(1)
    assert r.get("in1") == b"v"


# -- refusals ----------------------------------------------------------------------------------------


def test_noscript_commands_are_refused(r):
    for body in ("return redis.call('multi')", "return redis.call('eval', 'return 1', 0)",
                 "return redis.call('subscribe', 'c')", "return redis.call('script', 'flush')"):
        with pytest.raises(redis.ResponseError, match="This Redis command is not allowed from script"):
            ev(r, body)


def test_read_only_scripts_refuse_writes(r):
    with pytest.raises(redis.ResponseError, match="Write commands are not allowed from read-only scripts."):
        r.execute_command("EVAL_RO", "return redis.call('set', 'k', 'v')", 0)
    with pytest.raises(redis.ResponseError, match="Write commands are not allowed from read-only scripts."):
        r.execute_command("EVAL_RO", "return redis.call('publish', 'c', 'm')", 0)
    r.set("k", "v")
    assert r.execute_command("EVAL_RO", "return redis.call('get', 'k')", 0) == b"v"
    with pytest.raises(redis.ResponseError, match="Write commands are not allowed from read-only scripts. script: .*@user_script:2"):
        ev(r, "#!lua flags=no-writes\nreturn redis.call('set','k','v')")
    with pytest.raises(redis.ResponseError, match=r"^Can not execute a script with write flag using \*_ro command.$"):
        r.execute_command("EVAL_RO", "#!lua\nreturn 1", 0)
    assert r.execute_command("EVAL_RO", "#!lua flags=no-writes\nreturn 1", 0) == 1


def test_shebang_errors(r):
    with pytest.raises(redis.ResponseError, match="^Unexpected flag in script shebang: bad$"):
        ev(r, "#!lua flags=bad\nreturn 1")
    with pytest.raises(redis.ResponseError, match="^Unknown lua shebang option: name=x$"):
        ev(r, "#!lua name=x\nreturn 1")
    with pytest.raises(redis.ResponseError, match="^Unexpected engine in script shebang: #!notlua$"):
        ev(r, "#!notlua\nreturn 1")
    assert ev(r, "#!lua flags=allow-cross-slot-keys,no-cluster,allow-stale,allow-oom\nreturn 1") == 1


# -- EVALSHA and SCRIPT ------------------------------------------------------------------------------


def test_script_load_exists_flush_and_evalsha(r):
    assert r.script_load("return 1") == SHA_RETURN_1
    assert r.info("memory")["number_of_cached_scripts"] == 1
    assert r.script_exists(SHA_RETURN_1, "f" * 40) == [True, False]
    assert r.execute_command("EVALSHA", SHA_RETURN_1.upper(), 0) == 1
    assert r.execute_command("SCRIPT", "FLUSH", "ASYNC")
    assert r.info("memory")["number_of_cached_scripts"] == 0
    with pytest.raises(redis.exceptions.NoScriptError):
        r.execute_command("EVALSHA", SHA_RETURN_1, 0)
    with pytest.raises(redis.ResponseError, match="SCRIPT FLUSH only support SYNC|ASYNC option"):
        r.execute_command("SCRIPT", "FLUSH", "bad")
    with pytest.raises(redis.ResponseError, match="Error compiling script"):
        r.script_load("return (")


def test_eval_caches_its_script(r):
    ev(r, "return 'cached'")
    assert r.script_exists(sha("return 'cached'")) == [True]


def test_script_debug_and_kill_without_script(r):
    assert r.execute_command("SCRIPT", "DEBUG", "NO") == b"OK"
    with pytest.raises(redis.ResponseError, match="not supported"):
        r.execute_command("SCRIPT", "DEBUG", "YES")
    with pytest.raises(redis.ResponseError, match="Use SCRIPT DEBUG YES/SYNC/NO"):
        r.execute_command("SCRIPT", "DEBUG", "bad")
    with pytest.raises(redis.ResponseError, match="No scripts in execution right now."):
        r.script_kill()
    assert r.execute_command("SCRIPT", "HELP")[0].startswith(b"SCRIPT <subcommand>")


# -- redis-py helpers --------------------------------------------------------------------------------


def test_redis_py_lock(rr):
    lock = rr.lock("resource", timeout=10)
    assert lock.acquire(blocking=False)
    assert not rr.lock("resource").acquire(blocking=False)
    lock.extend(5)
    assert rr.pttl("resource") > 10000
    lock.reacquire()
    assert lock.owned()
    lock.release()
    assert rr.get("resource") is None
    assert lock.acquire(blocking=False)
    rr.set("resource", "someone else")
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.release()


def test_register_script_reloads_after_flush(rr):
    incr_by = rr.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    assert incr_by(keys=["n"], args=[5]) == 5
    rr.script_flush()
    assert incr_by(keys=["n"], args=[2]) == 7


def test_pipeline_with_scripts(r):
    script = r.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    pipe = r.pipeline()
    script(keys=["p"], args=[1], client=pipe)
    script(keys=["p"], args=[2], client=pipe)
    pipe.get("p")
    assert pipe.execute() == [1, 3, b"3"]
    r.script_flush()
    pipe = r.pipeline(transaction=True)
    script(keys=["p"], args=[10], client=pipe)
    assert pipe.execute() == [13]


def test_eval_inside_multi(r):
    pipe = r.pipeline(transaction=True)
    pipe.eval("return redis.call('set', KEYS[1], ARGV[1])", 1, "m", "v")
    pipe.get("m")
    assert pipe.execute() == [b"OK", b"v"]


# -- libraries ------------------------------------------------------------------------------------------


def test_libraries(r):
    assert ev(r, "return cjson.encode({1, 2, {a=1}})") == b'[1,2,{"a":1}]'
    assert ev(r, "return cjson.decode('[1,2,{\"a\":1.5}]')[3].a") == 1
    assert ev(r, "return cmsgpack.pack({1, 2, 3})") == b"\x93\x01\x02\x03"
    assert ev(r, "return cmsgpack.unpack(cmsgpack.pack({a={b=1}})).a.b") == 1
    assert ev(r, "return {bit.band(0xff, 0x0f), bit.tohex(255), bit.lshift(1, 31)}") == [15, b"000000ff", -2147483648]
    assert ev(r, "return {struct.unpack('<hH', struct.pack('<hH', -2, 65535))}") == [-2, 65535, 5]
    assert ev(r, "return redis.sha1hex('')") == b"da39a3ee5e6b4b0d3255bfef95601890afd80709"


# -- effects reach the log as one record ------------------------------------------------------------------


def record_journal(srv: ThreadServer) -> list:
    records: list = []

    def install():
        journal = srv.server.journal
        original = journal.append

        def append(effects):
            records.append([argv for _, argv in effects])
            return original(effects)

        journal.append = append

    srv.call(install)
    return records


def test_script_effects_are_logged_as_one_record_without_the_script(server, r):
    records = record_journal(server)
    ev(r, "redis.call('set', KEYS[1], 'v') redis.call('incr', KEYS[2]) return redis.call('get', KEYS[1])",
       "a", "n", numkeys=2)
    ev(r, "return redis.call('get', 'a')")
    assert records == [[[b"set", b"a", b"v"], [b"incr", b"n"]]]


def test_function_load_is_logged(server, r):
    records = record_journal(server)
    code = "#!lua name=lg\nredis.register_function('lg', function() return 1 end)"
    r.execute_command("FUNCTION", "LOAD", code)
    r.execute_command("FCALL", "lg", 0)
    assert records == [[[b"FUNCTION", b"LOAD", code.encode()]]]


def test_oom_refusals_follow_the_script_flags(r):
    r.set("filler", "x" * 100)
    r.config_set("maxmemory", 1)
    try:
        body = "return redis.call('set', 'a', 'b')"
        with pytest.raises(redis.exceptions.OutOfMemoryError, match=f"maxmemory'. script: {sha(body)}, on @user_script:1.$"):
            ev(r, body)
        with pytest.raises(redis.exceptions.OutOfMemoryError, match="maxmemory'.$"):
            ev(r, "#!lua\nreturn 1")
        assert ev(r, "#!lua flags=allow-oom\nreturn redis.call('set', 'a', 'b')") == b"OK"
        assert ev(r, "#!lua flags=no-writes\nreturn 1") == 1
        assert ev(r, "redis.call('del', 'zz') return redis.call('set', 'a', 'c')") == b"OK"  # wrote first
    finally:
        r.config_set("maxmemory", 0)
