"""Redis 8.4's compare-and-set / compare-and-delete on strings over the wire (RESP2 and RESP3):
DIGEST, DELEX and SET's IFEQ / IFNE / IFDEQ / IFDNE. No 8.x server runs here: the expectations
are redis.io's (DIGEST of "Hello world" is b6acb9d84a38ff74) and the XXH3 digest computed
independently by the xxhash package."""

from __future__ import annotations

import redis
import xxhash

from tests.compat.test_sets import WRONGTYPE, Events, err, record_journal

HELLO_DIGEST = b"b6acb9d84a38ff74"  # redis.io's DIGEST example


def test_digest(rr):
    rr.set("k", "Hello world")
    assert rr.execute_command("DIGEST", "k") == HELLO_DIGEST
    rr.set("e", "")
    assert rr.execute_command("DIGEST", "e") == xxhash.xxh3_64_hexdigest(b"").encode()
    assert rr.execute_command("DIGEST", "missing") is None
    rr.rpush("l", "a")
    assert err(rr, "DIGEST", "l") == WRONGTYPE
    assert err(rr, "DIGEST", "k", "x") == "wrong number of arguments for 'digest' command"


def test_delex_conditions(rr):
    rr.set("k", "v1")
    assert rr.execute_command("DELEX", "k", "IFEQ", "other") == 0
    assert rr.execute_command("DELEX", "k", "IFNE", "v1") == 0
    assert rr.execute_command("DELEX", "k", "IFDNE", xxhash.xxh3_64_hexdigest(b"v1")) == 0
    assert rr.execute_command("DELEX", "k", "IFDEQ", "0000000000000000") == 0
    assert rr.get("k") == b"v1"
    assert rr.execute_command("DELEX", "k", "IFEQ", "v1") == 1 and rr.exists("k") == 0
    rr.set("k", "Hello world")
    assert rr.execute_command("DELEX", "k", "ifdeq", HELLO_DIGEST.upper()) == 1  # hex case does not matter
    rr.set("k", "x")
    assert rr.execute_command("DELEX", "k", "IFNE", "y") == 1
    rr.set("k", "x")
    assert rr.execute_command("DELEX", "k", "IFDNE", HELLO_DIGEST) == 1
    for cond in ("IFEQ", "IFNE", "IFDEQ", "IFDNE"):
        assert rr.execute_command("DELEX", "missing", cond, "x") == 0
    rr.hset("h", "f", "v")
    assert err(rr, "DELEX", "h", "IFEQ", "v") == WRONGTYPE
    assert rr.execute_command("DELEX", "h") == 1  # no condition: DEL, any type
    assert rr.execute_command("DELEX", "h") == 0
    assert err(rr, "DELEX", "k", "IFEQ") == "syntax error"
    assert err(rr, "DELEX", "k", "IFXX", "v") == "syntax error"
    assert err(rr, "DELEX", "k", "IFEQ", "a", "IFNE", "b") == "syntax error"


def test_set_compare_and_set(rr):
    assert rr.execute_command("SET", "k", "v1", "IFEQ", "v1") is None  # missing key: IFEQ fails
    assert rr.exists("k") == 0
    assert rr.execute_command("SET", "k", "v1", "IFDEQ", HELLO_DIGEST) is None
    assert rr.execute_command("SET", "k", "v1", "IFNE", "zz") in (b"OK", True)  # missing key: IFNE sets
    assert rr.execute_command("SET", "k", "v2", "IFEQ", "nope") is None and rr.get("k") == b"v1"
    assert rr.execute_command("SET", "k", "v2", "IFEQ", "v1") in (b"OK", True) and rr.get("k") == b"v2"
    assert rr.execute_command("SET", "k", "v3", "IFNE", "v2") is None
    digest = rr.execute_command("DIGEST", "k")
    assert rr.execute_command("SET", "k", "v3", "IFDNE", digest) is None
    # get=True: redis-py's SET callback then hands the GET reply through
    assert rr.execute_command("SET", "k", "v3", "IFDEQ", digest, "GET", get=True) == b"v2" and rr.get("k") == b"v3"
    assert rr.execute_command("SET", "k", "v4", "IFEQ", "no", "GET", get=True) == b"v3" and rr.get("k") == b"v3"
    assert rr.execute_command("SET", "k", "v4", "IFEQ", "v3", "PX", "100000") in (b"OK", True)
    assert 0 < rr.pttl("k") <= 100000
    assert rr.execute_command("SET", "k", "v5", "IFEQ", "v4", "KEEPTTL") in (b"OK", True) and rr.pttl("k") > 0
    assert rr.execute_command("SET", "k", "v6", "IFDNE", "0000000000000000") in (b"OK", True)
    assert rr.pttl("k") == -1  # a plain SET: the TTL goes
    for bad in (("NX", "IFEQ", "a"), ("IFEQ", "a", "XX"), ("IFEQ", "a", "IFNE", "b"), ("IFDEQ",)):
        assert err(rr, "SET", "k", "v", *bad) == "syntax error", bad
    rr.rpush("l", "a")
    assert err(rr, "SET", "l", "v", "IFNE", "x") == WRONGTYPE
    assert rr.execute_command("SET", "l", "v") in (b"OK", True)  # without a condition SET overwrites


def test_logging_and_events(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    events = Events(srv)
    records = record_journal(srv)
    r = redis.Redis(port=srv.port)
    r.set("k", "a")
    r.execute_command("SET", "k", "b", "IFEQ", "a")
    r.execute_command("SET", "k", "c", "IFEQ", "zz")  # refused: nothing logged
    r.execute_command("SET", "k", "c", "IFNE", "zz", "KEEPTTL", "GET")
    r.execute_command("DELEX", "k", "IFEQ", "nope")
    r.execute_command("DELEX", "k", "IFDEQ", xxhash.xxh3_64_hexdigest(b"c"))
    logged = [argv for effects in records for argv in effects]
    assert logged == [[b"SET", b"k", b"a"], [b"SET", b"k", b"b"], [b"SET", b"k", b"c", b"KEEPTTL"], [b"DEL", b"k"]]
    assert events.take() == [(b"set", b"k")] * 3 + [(b"del", b"k")]


def test_metadata(r):
    for name, arity, flags in (("digest", 2, ["readonly", "fast"]), ("delex", -2, ["write", "fast"])):
        info = r.execute_command("COMMAND", "INFO", name)[name]
        assert (info["arity"], info["flags"]) == (arity, flags)
    assert {"digest", "delex"} <= set(r.acl_cat("string"))
