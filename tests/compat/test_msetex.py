"""Redis 8.4's MSETEX over the wire (RESP2 and RESP3). No 8.x server runs here: the scenarios and
error texts are those Redis's own suite asserts (tests/unit/type/string.tcl of Redis 8.4), plus
the logging, events and key specs that follow from how Pion logs SET."""

from __future__ import annotations

import time

import pytest
import redis

from tests.compat.test_sets import WRONGTYPE, Events, err, record_journal


def test_all_expiration_flags(rr):
    now = int(time.time())
    assert rr.execute_command("MSETEX", 2, "ex:1", "v1", "ex:2", "v2", "EX", 5) == 1
    assert rr.execute_command("MSETEX", 2, "px:1", "v1", "px:2", "v2", "PX", 5000) == 1
    assert rr.execute_command("MSETEX", 2, "exat:1", "v3", "exat:2", "v4", "EXAT", now + 10) == 1
    assert rr.execute_command("MSETEX", 2, "pxat:1", "v3", "pxat:2", "v4", "PXAT", (now + 10) * 1000) == 1
    for key in ("ex:1", "ex:2"):
        assert 0 < rr.ttl(key) <= 5
    for key in ("px:1", "px:2"):
        assert 0 < rr.pttl(key) <= 5000
    for key in ("exat:1", "pxat:2"):
        assert 0 < rr.ttl(key) <= 10
    assert rr.mget("ex:1", "px:2", "exat:1", "pxat:2") == [b"v1", b"v2", b"v3", b"v4"]


def test_no_option_clears_the_ttl_and_keepttl_keeps_it(rr):
    rr.set("k", "old", ex=100)
    assert rr.execute_command("MSETEX", 1, "k", "new", "KEEPTTL") == 1
    assert rr.get("k") == b"new" and 95 < rr.ttl("k") <= 100
    assert rr.execute_command("MSETEX", 1, "k", "newer") == 1
    assert rr.get("k") == b"newer" and rr.ttl("k") == -1


def test_nx_xx_conditions(rr):
    rr.set("existing", "old")
    assert rr.execute_command("MSETEX", 2, "new1", "a", "new2", "b", "NX", "EX", 10) == 1
    assert rr.execute_command("MSETEX", 2, "existing", "x", "fresh", "y", "NX", "EX", 10) == 0
    assert rr.exists("fresh") == 0 and rr.get("existing") == b"old" and rr.ttl("existing") == -1
    assert rr.execute_command("MSETEX", 2, "existing", "x", "missing", "y", "XX", "EX", 10) == 0
    assert rr.exists("missing") == 0
    assert rr.execute_command("MSETEX", 2, "existing", "x", "new1", "y", "XX", "EX", 10) == 1
    assert rr.mget("existing", "new1") == [b"x", b"y"] and 0 < rr.ttl("existing") <= 10
    rr.rpush("list", "e")
    assert rr.execute_command("MSETEX", 1, "list", "s", "NX") == 0  # any type counts as existing
    assert rr.execute_command("MSETEX", 1, "list", "s", "XX") == 1  # and is overwritten
    assert rr.get("list") == b"s"
    assert rr.execute_command("MSETEX", 2, "dup", "1", "dup", "2", "NX") == 1 and rr.get("dup") == b"2"


def test_options_in_any_order_after_the_pairs(rr):
    assert rr.execute_command("MSETEX", 2, "f1", "v1", "f2", "v2", "EX", 3, "NX") == 1
    assert rr.execute_command("MSETEX", 2, "f3", "v3", "f4", "v4", "PX", 3000, "XX") == 0
    assert rr.mget("f1", "f2") == [b"v1", b"v2"] and rr.ttl("f1") > 0
    assert rr.exists("f3", "f4") == 0


def test_argument_errors_change_nothing(rr):
    assert err(rr, "MSETEX") == "wrong number of arguments for 'msetex' command"
    assert err(rr, "MSETEX", 1, "k") == "wrong number of arguments for 'msetex' command"
    for bad in ("key1", "0", "-1", "2147483648", "1.5"):
        assert err(rr, "MSETEX", bad, "val1", "EX", 10) == "invalid numkeys value"
    assert err(rr, "MSETEX", 2, "key1", "val1", "key2") == "wrong number of key-value pairs"
    assert err(rr, "MSETEX", 2147483647, "key1", "val1", "EX", 10) == "wrong number of key-value pairs"
    assert err(rr, "MSETEX", 1, "key1", "val1", "invalid_flag") == "syntax error"
    for options in (("NX", "XX", "EX", 10), ("EX", 10, "PX", 5000), ("EXAT", 1735689600, "PXAT", 1735689600000),
                    ("KEEPTTL", "EX", 10), ("KEEPTTL", "PX", 5000), ("EX",), ("GET",), ("IFEQ", "v"),
                    ("PERSIST",)):
        assert err(rr, "MSETEX", 2, "key1", "val1", "key2", "val2", *options) == "syntax error"
    for ttl in (("EX", 0), ("PX", -5), ("EXAT", 0), ("EX", 2**62)):
        assert err(rr, "MSETEX", 1, "key1", "val1", *ttl) == "invalid expire time in 'msetex' command"
    assert err(rr, "MSETEX", 1, "key1", "val1", "EX", "ten") == "value is not an integer or out of range"
    assert rr.exists("key1", "key2") == 0
    rr.rpush("list", "e")
    assert rr.execute_command("MSETEX", 1, "list", "s") == 1  # overwrites, as MSET does: no WRONGTYPE
    assert WRONGTYPE not in err(rr, "MSETEX", 1, "list", "s", "EX", 0)


def test_a_past_absolute_time_is_stored_and_expires(rr):
    rr.set("k", "old")
    assert rr.execute_command("MSETEX", 2, "k", "a", "gone", "b", "PXAT", 1000) == 1
    assert rr.exists("k", "gone") == 0  # already past: expired at the first access


def test_logged_as_absolute_pxat_without_nx_xx(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    events = Events(srv)
    records = record_journal(srv)
    r = redis.Redis(port=srv.port)
    r.set("old", "x")
    records.clear()
    events.take()
    before = int(time.time() * 1000)
    assert r.execute_command("MSETEX", 2, "a", "1", "b", "2", "NX", "EX", 100) == 1
    assert r.execute_command("MSETEX", 2, "a", "1", "old", "2", "NX") == 0  # refused: not logged
    assert r.execute_command("MSETEX", 1, "old", "y", "XX", "KEEPTTL") == 1
    assert r.execute_command("MSETEX", 1, "c", "z", "EXAT", 4102444800) == 1
    logged = [argv for effects in records for argv in effects]
    assert len(logged) == 3
    head, when = logged[0][:-1], int(logged[0][-1])
    assert head == [b"MSETEX", b"2", b"a", b"1", b"b", b"2", b"PXAT"]
    assert before + 100_000 <= when <= int(time.time() * 1000) + 100_000
    assert logged[1] == [b"MSETEX", b"1", b"old", b"y", b"KEEPTTL"]
    assert logged[2] == [b"MSETEX", b"1", b"c", b"z", b"PXAT", b"4102444800000"]
    assert events.take() == [(b"expire", b"a"), (b"set", b"a"), (b"expire", b"b"), (b"set", b"b"),
                             (b"set", b"old"), (b"expire", b"c"), (b"set", b"c")]


def test_replaying_the_log_rebuilds_the_keys(make_server):
    first, second = make_server(), make_server()
    records = record_journal(first)
    r = redis.Redis(port=first.port)
    r.set("x", "old")
    r.execute_command("MSETEX", 2, "a", "1", "b", "2", "PX", 100_000)
    r.execute_command("MSETEX", 1, "c", "3")
    r.execute_command("MSETEX", 1, "x", "new", "XX", "KEEPTTL")
    copy = redis.Redis(port=second.port)
    for argv in [argv for effects in records for argv in effects]:
        copy.execute_command(*argv)
    assert copy.mget("a", "b", "c", "x") == [b"1", b"2", b"3", b"new"]
    assert abs(copy.pttl("b") - r.pttl("b")) < 2000 and copy.ttl("c") == copy.ttl("x") == -1


def test_watch_and_tracking_see_every_key(server):
    r, other = redis.Redis(port=server.port), redis.Redis(port=server.port)
    with r.pipeline() as pipe:
        pipe.watch("w2")
        other.execute_command("MSETEX", 2, "w1", "a", "w2", "b", "EX", 10)
        pipe.multi()
        pipe.get("w2")
        with pytest.raises(redis.WatchError):
            pipe.execute()


def test_command_metadata_and_key_specs(r, raw):
    info = r.execute_command("COMMAND", "INFO", "msetex")["msetex"]
    assert info["arity"] == -4
    assert info["flags"] == ["write", "denyoom", "movablekeys"]
    assert info["acl_categories"] == ["@write", "@string", "@slow"]
    spec = info["key_specifications"][0]
    spec = dict(zip(spec[::2], spec[1::2], strict=True))
    assert spec[b"flags"] == [b"OW", b"update"]
    assert spec[b"find_keys"] == [b"type", b"keynum", b"spec", [b"keynumidx", 0, b"firstkey", 1, b"keystep", 2]]
    assert r.command_getkeys("MSETEX", 2, "k1", "v1", "k2", "v2", "EX", 5) == ["k1", "k2"]
    assert "msetex" in r.acl_cat("string")
    raw.cmd("COMMAND", "DOCS", "msetex")
    docs = raw.read_some()
    assert b"since\r\n$5\r\n8.4.0\r\n" in docs and b"KEEPTTL" in docs
