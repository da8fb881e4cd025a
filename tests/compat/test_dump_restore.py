"""One stored value through redis-py in RESP2 and RESP3: DUMP/RESTORE (round trips of every
type, TTL, REPLACE, ABSTTL, IDLETIME, FREQ, corrupt payloads, what gets logged) and OBJECT
(ENCODING, REFCOUNT, IDLETIME, FREQ, HELP) with Redis's error texts."""

from __future__ import annotations

import time

import pytest

from tests.compat.test_keys import err, needs, record_journal

FAR_MS = 4102444800000


def test_dump_missing_key_is_nil(rr):
    assert rr.dump("missing") is None


def test_string_round_trip(rr):
    rr.set("k", b"\x00bin\xff")
    payload = rr.dump("k")
    assert rr.restore("k2", 0, payload) in (True, b"OK")
    assert rr.get("k2") == b"\x00bin\xff"
    assert rr.ttl("k2") == -1


@pytest.mark.parametrize("make, read", [
    (("RPUSH", "c", "a", "b", "a"), ("LRANGE", "c", "0", "-1")),
    (("SADD", "c", "x", "y"), ("SMEMBERS", "c")),
    (("ZADD", "c", "1", "x", "2.5", "y"), ("ZRANGE", "c", "0", "-1", "WITHSCORES")),
    (("HSET", "c", "f", "v", "g", "w"), ("HGETALL", "c")),
    (("XADD", "c", "1-1", "f", "v"), ("XRANGE", "c", "-", "+")),
])
def test_container_round_trips(rr, make, read):
    needs(rr, *make)
    before = needs(rr, *read)
    payload = rr.dump("c")
    rr.delete("c")
    assert rr.restore("c", 0, payload) in (True, b"OK")
    assert rr.execute_command(*read) == before


def test_restore_ttl_relative_and_absolute(rr):
    rr.set("k", "v")
    payload = rr.dump("k")
    rr.restore("rel", 5000, payload)
    assert 4000 <= rr.pttl("rel") <= 5000
    rr.restore("abs", FAR_MS, payload, absttl=True)
    assert rr.pexpiretime("abs") == FAR_MS


def test_restore_with_past_ttl_creates_nothing(rr):
    rr.set("k", "v")
    payload = rr.dump("k")
    assert rr.restore("gone", 1, payload, absttl=True) in (True, b"OK")
    assert rr.exists("gone") == 0


def test_restore_replace_with_past_ttl_deletes_and_logs_del(server, r):
    r.set("k", "v")
    payload = r.dump("k")
    records = record_journal(server)
    assert r.restore("k", 1, payload, replace=True, absttl=True) in (True, b"OK")
    assert r.exists("k") == 0
    assert [argv for rec in records for _, argv in rec] == [[b"DEL", b"k"]]


def test_relative_restore_ttl_is_logged_as_absttl(server, r):
    r.set("k", "v")
    payload = r.dump("k")
    records = record_journal(server)
    before = int(time.time() * 1000)
    r.restore("n", 10_000, payload)
    (_, argv), = records[0]
    assert argv[0].upper() == b"RESTORE" and argv[1] == b"n" and argv[3] == payload
    assert argv[-1] == b"ABSTTL" and before + 10_000 <= int(argv[2]) <= before + 11_000


def test_restore_busykey_and_replace(rr):
    rr.set("k", "old")
    rr.set("src", "new")
    payload = rr.dump("src")
    assert err(rr, "RESTORE", "k", "0", payload) == "BUSYKEY Target key name already exists."
    assert rr.restore("k", 0, payload, replace=True) in (True, b"OK")
    assert rr.get("k") == b"new"


def test_restore_errors(rr):
    rr.set("k", "v")
    good = rr.dump("k")
    assert err(rr, "RESTORE", "x", "0", "garbage") == "DUMP payload version or checksum are wrong"
    assert err(rr, "RESTORE", "x", "0", good[:-1] + bytes([good[-1] ^ 1])) == (
        "DUMP payload version or checksum are wrong")
    assert err(rr, "RESTORE", "x", "-1", good) == "Invalid TTL value, must be >= 0"
    assert err(rr, "RESTORE", "x", "abc", good) == "value is not an integer or out of range"
    assert err(rr, "RESTORE", "x", "0", good, "IDLETIME", "-1") == "Invalid IDLETIME value, must be >= 0"
    assert err(rr, "RESTORE", "x", "0", good, "FREQ", "256") == "Invalid FREQ value, must be >= 0 and <= 255"
    assert err(rr, "RESTORE", "x", "0", good, "IDLETIME", "1", "FREQ", "1") == "syntax error"
    assert err(rr, "RESTORE", "x", "0", good, "FOO") == "syntax error"
    assert err(rr, "RESTORE", "x", "0", good, "IDLETIME") == "syntax error"
    assert err(rr, "RESTORE", "x", "0") == "wrong number of arguments for 'restore' command"
    # option errors come before the key check, the key check before the TTL and payload
    assert err(rr, "RESTORE", "k", "0", "garbage", "FOO") == "syntax error"
    assert err(rr, "RESTORE", "k", "-1", "garbage") == "BUSYKEY Target key name already exists."


def test_restore_of_a_redis_payload_is_refused(rr):
    redis_payload = b"\x00\x01v\n\x00\xd2\xdb\x1e\xa1\xfb\xf9\x1a\x8d"  # DUMP of "v" from Redis 7.0
    assert err(rr, "RESTORE", "x", "0", redis_payload) == "DUMP payload version or checksum are wrong"


def test_restore_idletime_sets_object_idletime(rr):
    rr.set("k", "v")
    payload = rr.dump("k")
    rr.restore("idle", 0, payload, idletime=1000)
    assert 1000 <= rr.object("idletime", "idle") <= 1001


# -- OBJECT -------------------------------------------------------------------------------


def test_object_encoding_of_strings(rr):
    rr.set("i", "12345")
    rr.set("e", "short")
    rr.set("r", "x" * 45)
    rr.set("big", "12345678901234567890")
    assert rr.object("encoding", "i") == b"int"
    assert rr.object("encoding", "e") == b"embstr"
    assert rr.object("encoding", "r") == b"raw"
    assert rr.object("encoding", "big") == b"embstr"
    assert rr.object("encoding", "missing") is None


def test_object_refcount(rr):
    rr.set("shared", "9999")
    rr.set("own", "10000")
    rr.set("text", "abc")
    assert rr.object("refcount", "shared") == 2147483647
    assert rr.object("refcount", "own") == 1
    assert rr.object("refcount", "text") == 1
    assert rr.object("refcount", "missing") is None


def test_object_idletime_grows_and_access_resets_it(server, r):
    r.set("k", "v")
    assert r.object("idletime", "k") == 0
    db = server.server.dbs[0]
    server.call(db.lru.__setitem__, b"k", db.lru[b"k"] - 5000)
    assert r.object("idletime", "k") == 5
    r.type("k")  # TYPE, EXISTS, TTL and OBJECT do not count as an access
    r.exists("k")
    r.ttl("k")
    assert r.object("idletime", "k") == 5
    r.get("k")
    time.sleep(0.05)  # let the cron refresh the clock
    assert r.object("idletime", "k") == 0


def test_object_freq_needs_an_lfu_policy(rr):
    rr.set("k", "v")
    text = err(rr, "OBJECT", "FREQ", "k")
    assert text.startswith("An LFU maxmemory policy is not selected, access frequency not tracked.")
    assert rr.object("freq", "missing") is None


def test_object_freq_and_idletime_under_lfu(rr):
    rr.config_set("maxmemory-policy", "allkeys-lfu")
    rr.set("k", "v")
    assert rr.object("freq", "k") == 5
    rr.get("k")
    assert rr.object("freq", "k") == 6  # from 5 the first access always counts
    for _ in range(200):
        rr.get("k")
    assert 6 < rr.object("freq", "k") < 255
    assert err(rr, "OBJECT", "IDLETIME", "k").startswith("An LFU maxmemory policy is selected, idle time not tracked.")
    rr.restore("f", 0, rr.dump("k"), frequency=42)
    assert rr.object("freq", "f") == 42
    rr.config_set("maxmemory-policy", "noeviction")
    assert rr.object("idletime", "k") >= 0


def test_object_help_and_errors(r):
    lines = r.execute_command("OBJECT", "HELP")
    assert lines[0] == b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert lines[-1] == b"    Prints this help."
    assert err(r, "OBJECT", "foo") == "unknown subcommand 'foo'. Try OBJECT HELP."
    assert err(r, "OBJECT", "ENCODING") == "wrong number of arguments for 'object|encoding' command"
    assert err(r, "OBJECT", "HELP", "x") == "wrong number of arguments for 'object|help' command"


#: DUMPed by Redis 5 (stream type 15, RDB 9), from Redis's own suite (tests/unit/type/stream-cgroups.tcl,
#: "Loading from legacy ..."): XADD x 1-0 .. 6-0, XDEL x 3-0, groups g1 and g2 at 0, XREADGROUP GROUP
#: g1 c11 COUNT 4, XTRIM x MAXLEN = 2
LEGACY_STREAM = bytes.fromhex(
    "0f011000000000000000010000000000000000c3404a4057165700000023000201040101018464617461050001030100"
    "20010381610204200a0001400a0062600a0002400a0063600a4022018164200a4039200a0065600a0005400a0066200a"
    "00ff02060002026731050004000000000000000100000000000000003ef783437a010000010000000000000002000000"
    "00000000003ef783437a01000001000000000000000400000000000000003ef783437a01000001000000000000000500"
    "000000000000003ef783437a0100000101036331313ef783437a01000004000000000000000100000000000000000000"
    "000000000002000000000000000000000000000000040000000000000000000000000000000500000000000000000267"
    "320000000009003d52ef6867521dfa"
)


def test_restore_of_a_legacy_stream_estimates_the_groups_read_counters(r):
    """A payload from before Redis 7.0 carries no entries-read: Redis's rdbLoad estimates it
    (streamEstimateDistanceFromFirstEverEntry), and so does Pion (the suite's assertions)."""
    assert r.restore("x", 0, LEGACY_STREAM)
    info = r.xinfo_stream("x", full=True)
    assert info["max-deleted-entry-id"] == b"0-0" and info["entries-added"] == 2
    g1, g2 = info["groups"]
    assert (g1["entries-read"], g1["lag"]) == (1, 1)
    assert (g2["entries-read"], g2["lag"]) == (0, 2)
