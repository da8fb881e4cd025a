"""Redis 8.0's HGETDEL, HGETEX and HSETEX over the wire (RESP2 and RESP3): replies, Redis's
argument checks and error texts (t_hash.c), TTLs, events, what is logged (and that replaying it
rebuilds the data), WATCH and tracking invalidation, ACL categories and key specs. No 8.x server
runs here, so the expectations are Redis's source read by hand."""

from __future__ import annotations

import time

import pytest
import redis

from tests.compat.test_sets import WRONGTYPE, Events, err, record_journal
from tests.compat.test_tracking import Raw


def ttls(client, key: str, *names: str) -> list:
    return client.execute_command("HPTTL", key, "FIELDS", len(names), *names)


# -- HGETDEL ----------------------------------------------------------------------------------


def test_hgetdel_returns_and_removes(rr):
    rr.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    assert rr.execute_command("HGETDEL", "h", "FIELDS", "3", "a", "zz", "a") == [b"1", None, None]
    assert rr.hgetall("h") == {b"b": b"2", b"c": b"3"}
    assert rr.execute_command("HGETDEL", "missing", "FIELDS", "2", "a", "b") == [None, None]
    assert rr.execute_command("HGETDEL", "h", "fields", "2", "b", "c") == [b"2", b"3"]
    assert rr.exists("h") == 0  # the last field took the key with it


def test_hgetdel_errors(rr):
    rr.hset("h", "a", "1")
    assert err(rr, "HGETDEL", "h", "FIELDX", "1", "a") == (
        "Mandatory argument FIELDS is missing or not at the right position")
    for bad in ("0", "-1", "x"):
        assert err(rr, "HGETDEL", "h", "FIELDS", bad, "a") == "Number of fields must be a positive integer"
    assert err(rr, "HGETDEL", "h", "FIELDS", "2", "a") == "The `numfields` parameter must match the number of arguments"
    assert err(rr, "HGETDEL", "h", "FIELDS", "1") == "wrong number of arguments for 'hgetdel' command"
    rr.set("s", "v")
    assert err(rr, "HGETDEL", "s", "FIELDS", "1", "a") == WRONGTYPE
    assert rr.hgetall("h") == {b"a": b"1"}


# -- HGETEX -----------------------------------------------------------------------------------


def test_hgetex_gets_and_sets_ttls(rr):
    rr.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    assert rr.execute_command("HGETEX", "h", "FIELDS", "2", "a", "zz") == [b"1", None]  # plain HMGET
    assert ttls(rr, "h", "a") == [-1]
    assert rr.execute_command("HGETEX", "h", "EX", "100", "FIELDS", "2", "a", "zz") == [b"1", None]
    assert 99_000 < ttls(rr, "h", "a")[0] <= 100_000 and ttls(rr, "h", "zz") == [-2]
    assert rr.execute_command("HGETEX", "h", "PX", "50000", "FIELDS", "1", "b") == [b"2"]
    assert 49_000 < ttls(rr, "h", "b")[0] <= 50_000
    at = int(time.time()) + 1000
    rr.execute_command("HGETEX", "h", "EXAT", str(at), "FIELDS", "1", "c")
    assert rr.execute_command("HEXPIRETIME", "h", "FIELDS", "1", "c") == [at]
    rr.execute_command("HGETEX", "h", "PXAT", str(at * 1000 + 5), "FIELDS", "1", "c")
    assert rr.execute_command("HPEXPIRETIME", "h", "FIELDS", "1", "c") == [at * 1000 + 5]
    assert rr.execute_command("HGETEX", "h", "PERSIST", "FIELDS", "2", "a", "c") == [b"1", b"3"]
    a, b, c = ttls(rr, "h", "a", "b", "c")
    assert a == c == -1 and b > 0
    assert rr.execute_command("HGETEX", "missing", "EX", "10", "FIELDS", "1", "a") == [None]


def test_hgetex_with_a_past_time_removes_the_fields(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    assert rr.execute_command("HGETEX", "h", "EX", "0", "FIELDS", "1", "a") == [b"1"]
    assert rr.hgetall("h") == {b"b": b"2"}
    assert rr.execute_command("HGETEX", "h", "PXAT", "1", "FIELDS", "1", "b") == [b"2"]
    assert rr.exists("h") == 0


def test_hgetex_errors(rr):
    rr.hset("h", "a", "1")
    assert err(rr, "HGETEX", "h", "EX", "x", "FIELDS", "1", "a") == "value is not an integer or out of range"
    assert err(rr, "HGETEX", "h", "EX", "-1", "FIELDS", "1", "a") == "invalid expire time, must be >= 0"
    assert err(rr, "HGETEX", "h", "EX", str(1 << 46), "FIELDS", "1", "a") == "invalid expire time in 'hgetex' command"
    assert err(rr, "HGETEX", "h", "EX", "10", "10", "FIELDS", "1", "a") == (
        "Mandatory argument FIELDS is missing or not at the right position")
    assert err(rr, "HGETEX", "h", "KEEPTTL", "FIELDS", "1", "a") == (
        "Mandatory argument FIELDS is missing or not at the right position")
    assert err(rr, "HGETEX", "h", "PERSIST", "FIELDS", "0") == "Number of fields must be a positive integer"
    assert err(rr, "HGETEX", "h", "FIELDS", "2", "a") == "The `numfields` parameter must match the number of arguments"
    rr.set("s", "v")
    assert err(rr, "HGETEX", "s", "FIELDS", "1", "a") == WRONGTYPE
    assert ttls(rr, "h", "a") == [-1]


# -- HSETEX -----------------------------------------------------------------------------------


def test_hsetex_sets_fields_with_ttls_and_conditions(rr):
    assert rr.execute_command("HSETEX", "h", "FIELDS", "2", "a", "1", "b", "2") == 1
    assert rr.hgetall("h") == {b"a": b"1", b"b": b"2"} and ttls(rr, "h", "a") == [-1]
    assert rr.execute_command("HSETEX", "h", "EX", "100", "FIELDS", "1", "a", "x") == 1
    assert 99_000 < ttls(rr, "h", "a")[0] <= 100_000
    assert rr.execute_command("HSETEX", "h", "KEEPTTL", "FIELDS", "1", "a", "y") == 1
    assert rr.hget("h", "a") == b"y" and ttls(rr, "h", "a")[0] > 99_000
    assert rr.execute_command("HSETEX", "h", "FIELDS", "1", "a", "z") == 1  # no option: the TTL goes
    assert ttls(rr, "h", "a") == [-1]
    assert rr.execute_command("HSETEX", "h", "FNX", "FIELDS", "2", "a", "9", "c", "9") == 0
    assert rr.execute_command("HSETEX", "h", "FXX", "FIELDS", "2", "a", "9", "c", "9") == 0
    assert rr.hgetall("h") == {b"a": b"z", b"b": b"2"}
    assert rr.execute_command("HSETEX", "h", "FNX", "PX", "5000", "FIELDS", "1", "c", "3") == 1
    assert rr.execute_command("HSETEX", "h", "FXX", "FIELDS", "2", "a", "1", "c", "4") == 1
    assert rr.hgetall("h") == {b"a": b"1", b"b": b"2", b"c": b"4"}
    assert rr.execute_command("HSETEX", "missing", "FXX", "FIELDS", "1", "a", "1") == 0
    assert rr.exists("missing") == 0
    assert rr.execute_command("HSETEX", "gone", "EX", "0", "FIELDS", "1", "a", "1") == 1
    assert rr.exists("gone") == 0  # set with a time already past: removed at once


def test_hsetex_errors(rr):
    rr.hset("h", "a", "1")
    cases = {
        ("HSETEX", "h", "FIELDS", "1", "a"): "wrong number of arguments for 'hsetex' command",
        ("HSETEX", "h", "FIELDS", "2", "a", "1"): "wrong number of arguments for 'hsetex' command",
        ("HSETEX", "h", "FIELDS", "1", "a", "1", "b"): "wrong number of arguments for 'hsetex' command",
        ("HSETEX", "h", "FIELDS", "0", "a", "1"): "invalid number of fields",
        ("HSETEX", "h", "FIELDS", "x", "a", "1"): "invalid number of fields",
        ("HSETEX", "h", "EX", "1", "PX", "1", "FIELDS", "1", "a", "1"):
            "Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified",
        ("HSETEX", "h", "KEEPTTL", "EX", "1", "FIELDS", "1", "a", "1"):
            "Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified",
        ("HSETEX", "h", "FNX", "FXX", "FIELDS", "1", "a", "1"): "Only one of FXX or FNX arguments can be specified",
        ("HSETEX", "h", "NX", "FIELDS", "1", "a", "1"): "unknown argument: NX",
        ("HSETEX", "h", "EX", "-5", "FIELDS", "1", "a", "1"): "invalid expire time, must be >= 0",
        ("HSETEX", "h", "PXAT", str(1 << 47), "FIELDS", "1", "a", "1"): "invalid expire time in 'hsetex' command",
        ("HSETEX", "h", "FNX", "KEEPTTL", "FXX", "EX"): "Only one of FXX or FNX arguments can be specified",
        ("HSETEX", "h", "FNX", "KEEPTTL", "EX", "1"):
            "Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified",
    }
    for argv, text in cases.items():
        assert err(rr, *argv) == text, argv
    rr.set("s", "v")
    assert err(rr, "HSETEX", "s", "FIELDS", "1", "a", "1") == WRONGTYPE
    assert err(rr, "HSETEX", "s", "FOO", "FIELDS", "1", "a", "1") == "unknown argument: FOO"  # parsed first
    assert rr.hgetall("h") == {b"a": b"1"} and ttls(rr, "h", "a") == [-1]


# -- events, logging, WATCH, tracking, metadata -------------------------------------------------


def test_keyspace_events(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    events = Events(srv)
    r = redis.Redis(port=srv.port)
    r.execute_command("HSETEX", "h", "EX", "100", "FIELDS", "2", "a", "1", "b", "2")
    r.execute_command("HSETEX", "h", "FIELDS", "1", "c", "3")
    r.execute_command("HGETEX", "h", "PERSIST", "FIELDS", "1", "a")
    r.execute_command("HGETEX", "h", "PERSIST", "FIELDS", "1", "a")  # no TTL left: no event
    r.execute_command("HGETEX", "h", "PX", "0", "FIELDS", "1", "b")
    r.execute_command("HGETDEL", "h", "FIELDS", "2", "a", "c")
    r.execute_command("HGETDEL", "h", "FIELDS", "1", "a")  # nothing there: no event
    assert events.take() == [(b"hset", b"h"), (b"hexpire", b"h"), (b"hset", b"h"), (b"hpersist", b"h"),
                             (b"hdel", b"h"), (b"hdel", b"h"), (b"del", b"h")]


def test_what_is_logged_and_replaying_it(make_server):
    first, second = make_server(), make_server()
    records = record_journal(first)
    r = redis.Redis(port=first.port)
    r.execute_command("HSETEX", "h", "EX", "100", "FIELDS", "2", "a", "1", "b", "2")
    r.execute_command("HSETEX", "h", "FNX", "FIELDS", "1", "a", "9")  # refused: nothing logged
    r.execute_command("HSETEX", "h", "KEEPTTL", "FIELDS", "1", "c", "3")
    r.execute_command("HGETEX", "h", "EX", "200", "FIELDS", "2", "c", "zz")
    r.execute_command("HGETEX", "h", "FIELDS", "1", "c")  # a read: nothing logged
    r.execute_command("HGETEX", "h", "PERSIST", "FIELDS", "1", "a")
    r.execute_command("HGETDEL", "h", "FIELDS", "2", "b", "zz")
    r.execute_command("HSETEX", "h", "PXAT", "1", "FIELDS", "1", "d", "4")
    logged = [argv for effects in records for argv in effects]
    assert [argv[0] for argv in logged] == [b"HSETEX", b"HSETEX", b"HPEXPIREAT", b"HPERSIST", b"HDEL", b"HDEL"]
    assert logged[0][2] == b"PXAT" and int(logged[0][3]) > time.time() * 1000
    assert logged[2][3:] == [b"FIELDS", b"1", b"c"]
    assert logged[3] == [b"HPERSIST", b"h", b"FIELDS", b"1", b"a"]
    assert logged[4] == [b"HDEL", b"h", b"b"] and logged[5] == [b"HDEL", b"h", b"d"]
    copy = redis.Redis(port=second.port)
    for argv in logged:
        copy.execute_command(*argv)
    assert copy.hgetall("h") == r.hgetall("h") == {b"a": b"1", b"c": b"3"}
    times = ("HPEXPIRETIME", "h", "FIELDS", "2", "a", "c")
    assert copy.execute_command(*times) == r.execute_command(*times)


def test_writes_invalidate_watch_and_tracking(server):
    r, other = redis.Redis(port=server.port), redis.Redis(port=server.port)
    r.hset("h", "a", "1")
    for write in (("HSETEX", "h", "FIELDS", "1", "a", "2"), ("HGETEX", "h", "EX", "100", "FIELDS", "1", "a"),
                  ("HGETDEL", "h", "FIELDS", "1", "a")):
        with r.pipeline() as pipe:
            pipe.watch("h")
            other.execute_command(*write)
            pipe.multi()
            pipe.hget("h", "a")
            with pytest.raises(redis.WatchError):
                pipe.execute()
        other.hset("h", "a", "1")
    me, writer = Raw(server.port), Raw(server.port)
    me.run("CLIENT", "TRACKING", "on")
    for write in (("HSETEX", "h", "FIELDS", "1", "a", "2"), ("HGETEX", "h", "PX", "90000", "FIELDS", "1", "a"),
                  ("HGETDEL", "h", "FIELDS", "1", "a")):
        me.run("HGET", "h", "a")
        writer.run(*write)
        assert b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nh\r\n" in me.read(0.3), write
    me.close(), writer.close()


def test_command_info_docs_and_acl(r, raw):
    """Arity, flags, categories from the handlers; key specs and docs as Redis 8's command table."""
    expected = {"hgetdel": (-5, ["write", "fast"], [b"RW", b"access", b"delete"]),
                "hgetex": (-5, ["write", "fast"], [b"RW", b"access", b"update"]),
                "hsetex": (-6, ["write", "denyoom", "fast"], [b"RW", b"update"])}
    for name, (arity, flags, key_flags) in expected.items():
        info = r.execute_command("COMMAND", "INFO", name)[name]
        assert (info["arity"], info["flags"], info["acl_categories"]) == (arity, flags, ["@write", "@hash", "@fast"])
        spec = info["key_specifications"][0]
        assert dict(zip(spec[::2], spec[1::2], strict=True))[b"flags"] == key_flags
        raw.cmd("COMMAND", "DOCS", name)
        docs = raw.read_some()
        assert b"since\r\n$5\r\n8.0.0\r\n" in docs and b"FIELDS" in docs, name
    assert r.command_getkeys("HSETEX", "k", "FIELDS", "1", "f", "v") == ["k"]
    assert {"hgetdel", "hgetex", "hsetex"} <= set(r.acl_cat("hash"))
