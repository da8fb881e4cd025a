"""Hash commands through redis-py in RESP2 and RESP3: replies, RESP3 shapes, error texts,
WRONGTYPE, HINCRBYFLOAT's long-double output, HSCAN cursors, encodings, logging, events, and
the Redis 7.4 field-expiry commands (HEXPIRE ... HPERSIST), tested directly since the
reference server (7.0) predates them."""

from __future__ import annotations

import time

import pytest
import redis

from pion.storage.hash_value import HashValue
from pion.storage.serialize import dump_value, load_value
from tests.compat.test_sets import WRONGTYPE, Events, encoding, err, raw3, record_journal

BIG_1E308 = (
    b"99999999999999999996685879655845645660560099847415567207797047994921734868838061872100126921888"
    b"5393204467472250540132231521347495939605835974208144301964187679591000196031907786631096045071"
    b"06667939153395788938914560543563061268364901618630217086589253444881623791300855757318142424510"
    b"452728255046343928578048"
)


def fields(client: redis.Redis, key: str, *names: str) -> list:
    return [client.execute_command(cmd, key, "FIELDS", len(names), *names)
            for cmd in ("HTTL", "HPTTL", "HEXPIRETIME", "HPEXPIRETIME")]


# -- basics ---------------------------------------------------------------------------------------


def test_hset_hget_and_friends(rr):
    assert rr.hset("h", mapping={"a": "1", "b": "2"}) == 2
    assert rr.hset("h", mapping={"b": "3", "c": "4"}) == 1
    assert rr.hget("h", "b") == b"3"
    assert rr.hget("h", "zz") is None
    assert rr.hget("missing", "a") is None
    assert rr.hmget("h", "a", "zz", "c") == [b"1", None, b"4"]
    assert rr.hmget("missing", "a", "b") == [None, None]
    assert rr.hgetall("h") == {b"a": b"1", b"b": b"3", b"c": b"4"}
    assert rr.hgetall("missing") == {}
    assert rr.hkeys("h") == [b"a", b"b", b"c"]
    assert rr.hvals("h") == [b"1", b"3", b"4"]
    assert rr.hlen("h") == 3
    assert rr.hlen("missing") == 0
    assert rr.hexists("h", "a") == 1 and rr.hexists("h", "zz") == 0 and rr.hexists("missing", "a") == 0
    assert rr.hstrlen("h", "a") == 1 and rr.hstrlen("h", "zz") == 0 and rr.hstrlen("missing", "a") == 0


def test_hmset_and_hsetnx(rr):
    assert rr.execute_command("HMSET", "h", "a", "1", "b", "2") in (b"OK", True)
    assert rr.hsetnx("h", "a", "9") == 0
    assert rr.hsetnx("h", "c", "3") == 1
    assert rr.hsetnx("new", "f", "v") == 1
    assert rr.hgetall("h") == {b"a": b"1", b"b": b"2", b"c": b"3"}


def test_hdel_and_emptied_key(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    assert rr.hdel("h", "a", "zz", "a") == 1
    assert rr.hdel("missing", "a") == 0
    assert rr.hdel("h", "b") == 1
    assert rr.exists("h") == 0


def test_resp3_shapes(server, raw):
    redis.Redis(port=server.port).hset("h", "a", "1")
    assert raw3(raw, "HGETALL", "h") == b"%1\r\n$1\r\na\r\n$1\r\n1\r\n"
    assert raw3(raw, "HGETALL", "missing") == b"%0\r\n"
    assert raw3(raw, "HRANDFIELD", "h", "1", "WITHVALUES") == b"*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    assert raw3(raw, "HMGET", "missing", "a") == b"*1\r\n_\r\n"
    assert raw3(raw, "HSCAN", "h", "0") == b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"


def test_wrongtype_on_every_command(rr):
    rr.set("str", "v")
    calls = [
        ("HSET", "str", "a", "1"), ("HSETNX", "str", "a", "1"), ("HGET", "str", "a"), ("HMGET", "str", "a"),
        ("HMSET", "str", "a", "1"), ("HGETALL", "str"), ("HKEYS", "str"), ("HVALS", "str"), ("HLEN", "str"),
        ("HDEL", "str", "a"), ("HEXISTS", "str", "a"), ("HINCRBY", "str", "a", "1"),
        ("HINCRBYFLOAT", "str", "a", "1"), ("HSTRLEN", "str", "a"), ("HRANDFIELD", "str"),
        ("HRANDFIELD", "str", "2"), ("HSCAN", "str", "0"), ("HEXPIRE", "str", "10", "FIELDS", "1", "a"),
        ("HTTL", "str", "FIELDS", "1", "a"), ("HPERSIST", "str", "FIELDS", "1", "a"),
    ]
    for argv in calls:
        assert err(rr, *argv) == WRONGTYPE, argv


def test_arity_errors(r):
    assert err(r, "HSET", "h", "a") == "wrong number of arguments for 'hset' command"
    assert err(r, "HSET", "h", "a", "1", "b") == "wrong number of arguments for 'hset' command"
    assert err(r, "HMSET", "h", "a") == "wrong number of arguments for 'hmset' command"
    assert err(r, "HGET", "h") == "wrong number of arguments for 'hget' command"


# -- counters --------------------------------------------------------------------------------------


def test_hincrby(rr):
    assert rr.hincrby("h", "n", 5) == 5
    assert rr.hincrby("h", "n", -7) == -2
    rr.hset("h", mapping={"s": "abc", "big": "9223372036854775807", "lead": "007"})
    assert err(rr, "HINCRBY", "h", "s", "1") == "hash value is not an integer"
    assert err(rr, "HINCRBY", "h", "lead", "1") == "hash value is not an integer"
    assert err(rr, "HINCRBY", "h", "big", "1") == "increment or decrement would overflow"
    assert err(rr, "HINCRBY", "h", "n", "x") == "value is not an integer or out of range"
    assert err(rr, "HINCRBY", "h", "n", "1.5") == "value is not an integer or out of range"


@pytest.mark.parametrize(("start", "incr", "expected"), [
    (b"10.5", b"0.1", b"10.6"),
    (b"0.1", b"0.2", b"0.3"),
    (b"3", b"-3", b"0"),
    (b"-1.5", b"1.5", b"0"),
    (b"5.0e3", b"2.0e2", b"5200"),
    (b"0", b"0x10", b"16"),
    (b"0", b"0x1.8p1", b"3"),
    (b"0", b"1.5e-10", b"0.00000000015"),
    (b"0", b"-0.1", b"-0.1"),
    (b"1", b"1e-20", b"1"),
    (b"0", b"+7", b"7"),
    (b"0", b".5", b"0.5"),
    (b"0", b"5.", b"5"),
    (b"0", b"-1e-18", b"0"),
    (b"0", b"2.5e-17", b"0.00000000000000002"),
    (b"0", b"3.5e-17", b"0.00000000000000004"),
    (b"123456789012345678", b"1", b"123456789012345679"),
    (b"0", b"1e308", BIG_1E308),
    (b"1.1e-4950", b"0", b"0"),
])
def test_hincrbyfloat_prints_what_redis_prints(r, start, incr, expected):
    r.hset("h", "f", start)
    assert r.execute_command("HINCRBYFLOAT", "h", "f", incr, NEVER_DECODE=True) in (expected, float(expected))
    assert r.hget("h", "f") == expected


@pytest.mark.parametrize(("start", "incr", "message"), [
    (b"0", b"nan", "value is not a valid float"),
    (b"0", b"1e-4960", "value is not a valid float"),
    (b"0", b"abc", "value is not a valid float"),
    (b"0", b"inf", "value is NaN or Infinity"),
    (b"nan", b"1", "hash value is not a float"),
    (b" 1", b"1", "hash value is not a float"),
    (b"1 ", b"1", "hash value is not a float"),
    (b"inf", b"1", "increment would produce NaN or Infinity"),
    (b"1e4932", b"1e4932", "increment would produce NaN or Infinity"),
])
def test_hincrbyfloat_errors(r, start, incr, message):
    r.hset("h", "f", start)
    assert err(r, "HINCRBYFLOAT", "h", "f", incr) == message
    assert r.hget("h", "f") == start


def test_hincrbyfloat_is_logged_as_hset(server, r):
    records = record_journal(server)
    r.hincrbyfloat("h", "f", "1.5")
    assert records[-1] == [[b"HSET", b"h", b"f", b"1.5"]]


# -- HRANDFIELD ------------------------------------------------------------------------------------


def test_hrandfield(rr):
    rr.hset("h", mapping={f"f{i}": str(i) for i in range(10)})
    assert rr.hrandfield("h").startswith(b"f")
    assert rr.hrandfield("missing") is None
    assert rr.hrandfield("missing", 3) == []
    assert rr.hrandfield("h", 0) == []
    picked = rr.hrandfield("h", 4)
    assert len(set(picked)) == 4
    assert sorted(rr.hrandfield("h", 20)) == sorted(b"f%d" % i for i in range(10))
    assert len(rr.hrandfield("h", -30)) == 30


def test_hrandfield_withvalues_shapes(r, r3):
    r.hset("h", mapping={"a": "1", "b": "2"})
    flat = r.execute_command("HRANDFIELD", "h", "-3", "WITHVALUES")
    assert len(flat) == 6 and all(flat[i + 1] == {b"a": b"1", b"b": b"2"}[flat[i]] for i in (0, 2, 4))
    nested = r3.execute_command("HRANDFIELD", "h", "2", "WITHVALUES")
    assert sorted(map(tuple, nested)) == [(b"a", b"1"), (b"b", b"2")]


def test_hrandfield_errors(r):
    r.hset("h", "a", "1")
    assert err(r, "HRANDFIELD", "h", "x") == "value is not an integer or out of range"
    assert err(r, "HRANDFIELD", "h", "1", "WITHSCORES") == "syntax error"
    assert err(r, "HRANDFIELD", "h", "1", "WITHVALUES", "x") == "syntax error"
    assert err(r, "HRANDFIELD", "h", "4611686018427387904", "WITHVALUES") == "value is out of range"
    assert err(r, "HRANDFIELD", "h", "-9223372036854775808") == (
        "value is out of range, value must between -9223372036854775807 and 9223372036854775807")


# -- HSCAN ------------------------------------------------------------------------------------------


def test_hscan_small_hash_in_one_call(rr):
    rr.hset("h", mapping={"a": "1", "b": "2", "ab": "3"})
    assert rr.hscan("h", 0, count=1) == (0, {b"a": b"1", b"b": b"2", b"ab": b"3"})
    assert rr.hscan("h", 0, match="a*") == (0, {b"a": b"1", b"ab": b"3"})
    assert rr.hscan("h", 0, no_values=True) == (0, [b"a", b"b", b"ab"])
    assert rr.hscan("missing", 0) == (0, {})


def test_hscan_errors(rr):
    rr.hset("h", "a", "1")
    assert err(rr, "HSCAN", "h", "x") == "invalid cursor"
    assert err(rr, "HSCAN", "h", "0", "COUNT", "0") == "syntax error"
    assert err(rr, "HSCAN", "h", "0", "TYPE", "string") == "syntax error"
    assert err(rr, "HSCAN", "missing", "x") == "invalid cursor"


def test_hscan_of_a_big_hash_visits_every_field(r):
    data = {b"f%d" % i: b"%d" % i for i in range(500)}
    r.hset("h", mapping=data)
    seen, cursor, calls = {}, 0, 0
    while True:
        cursor, page = r.hscan("h", cursor, count=20)
        seen.update(page)
        calls += 1
        r.hset("h", b"extra%d" % calls, b"x")
        if cursor == 0:
            break
    assert all(seen[k] == v for k, v in data.items())
    assert calls >= 20


# -- encodings, dumps, events, WATCH -------------------------------------------------------------


def test_encodings_follow_redis_thresholds(make_server):
    srv = make_server(extra=(("hash-max-listpack-entries", "3"), ("hash-max-listpack-value", "5")))
    r = redis.Redis(port=srv.port)
    r.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    assert encoding(srv, b"h") == "listpack"
    r.hset("h", "d", "4")
    assert encoding(srv, b"h") == "hashtable"
    r.hdel("h", "a", "b", "c")
    assert encoding(srv, b"h") == "hashtable"
    r.hset("v", "a", "toolong")
    assert encoding(srv, b"v") == "hashtable"
    r.hincrbyfloat("w", "f", "1.123456")
    assert encoding(srv, b"w") == "hashtable"
    r.hset("x", "a", "1")
    r.execute_command("HEXPIRE", "x", "100", "FIELDS", "1", "zz")
    assert encoding(srv, b"x") == "listpackex"


def test_dump_and_load_keep_fields_ttls_and_order():
    value = HashValue({b"b": b"2", b"a": b"1"}, {b"a": 4102444800000}, "listpackex")
    again = load_value(dump_value(value))
    assert list(again.fields.items()) == [(b"b", b"2"), (b"a", b"1")]
    assert again.ttls == {b"a": 4102444800000} and again.encoding == "listpackex"


def test_keyspace_events(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    events = Events(srv)
    r = redis.Redis(port=srv.port)
    r.hset("h", "a", "1")
    r.hsetnx("h", "a", "2")
    r.hincrby("h", "n", 1)
    r.hincrbyfloat("h", "n", 1.5)
    r.hdel("h", "a", "n")
    assert events.take() == [(b"hset", b"h"), (b"hincrby", b"h"), (b"hincrbyfloat", b"h"), (b"hdel", b"h"),
                             (b"del", b"h")]


def test_changes_invalidate_watch(server):
    r, other = redis.Redis(port=server.port), redis.Redis(port=server.port)
    r.hset("h", "a", "1")
    with r.pipeline() as pipe:
        pipe.watch("h")
        other.hincrby("h", "a", 1)
        pipe.multi()
        pipe.hget("h", "a")
        with pytest.raises(redis.WatchError):
            pipe.execute()


# -- field expiry (Redis 7.4) ---------------------------------------------------------------------


def test_hexpire_reply_codes(rr):
    rr.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    assert rr.execute_command("HEXPIRE", "h", "100", "FIELDS", "2", "a", "zz") == [1, -2]
    assert rr.execute_command("HEXPIRE", "h", "0", "FIELDS", "1", "b") == [2]
    assert rr.hgetall("h") == {b"a": b"1", b"c": b"3"}
    assert rr.execute_command("HEXPIRE", "missing", "100", "FIELDS", "2", "a", "b") == [-2, -2]
    assert rr.execute_command("HPEXPIREAT", "h", "1", "FIELDS", "2", "a", "c") == [2, 2]
    assert rr.exists("h") == 0


def test_hexpire_conditions(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    assert rr.execute_command("HEXPIRE", "h", "100", "XX", "FIELDS", "1", "a") == [0]
    assert rr.execute_command("HEXPIRE", "h", "100", "GT", "FIELDS", "1", "a") == [0]
    assert rr.execute_command("HEXPIRE", "h", "100", "LT", "FIELDS", "1", "a") == [1]
    assert rr.execute_command("HEXPIRE", "h", "200", "NX", "FIELDS", "2", "a", "b") == [0, 1]
    assert rr.execute_command("HEXPIRE", "h", "50", "gt", "FIELDS", "1", "a") == [0]
    assert rr.execute_command("HEXPIRE", "h", "150", "GT", "FIELDS", "1", "a") == [1]
    assert rr.execute_command("HEXPIRE", "h", "300", "LT", "FIELDS", "1", "b") == [0]
    assert rr.execute_command("HEXPIRE", "h", "100", "xx", "FIELDS", "1", "b") == [1]


def test_ttl_queries(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    at_ms = int(time.time() * 1000) + 100_000
    rr.execute_command("HPEXPIREAT", "h", at_ms, "FIELDS", "1", "a")
    ttl, pttl, at_s, at = fields(rr, "h", "a", "b", "zz")
    assert ttl[1:] == [-1, -2] and 99 <= ttl[0] <= 100
    assert pttl[1:] == [-1, -2] and 98_000 < pttl[0] <= 100_000
    assert at_s == [(at_ms + 999) // 1000, -1, -2]
    assert at == [at_ms, -1, -2]
    assert fields(rr, "missing", "a") == [[-2]] * 4


def test_hpersist(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    rr.execute_command("HEXPIRE", "h", "100", "FIELDS", "1", "a")
    assert rr.execute_command("HPERSIST", "h", "FIELDS", "3", "a", "b", "zz") == [1, -1, -2]
    assert rr.execute_command("HTTL", "h", "FIELDS", "1", "a") == [-1]
    assert rr.execute_command("HPERSIST", "missing", "FIELDS", "1", "a") == [-2]


def test_writes_drop_or_keep_field_ttls_as_redis(rr):
    rr.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    rr.execute_command("HEXPIRE", "h", "100", "FIELDS", "3", "a", "b", "c")
    rr.hset("h", "a", "9")
    rr.hincrby("h", "b", 1)
    rr.hincrbyfloat("h", "c", 1)
    assert rr.execute_command("HTTL", "h", "FIELDS", "3", "a", "b", "c")[0] == -1
    assert all(t > 0 for t in rr.execute_command("HTTL", "h", "FIELDS", "2", "b", "c"))


def test_expired_fields_are_never_returned(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    rr.execute_command("HPEXPIRE", "h", "30", "FIELDS", "1", "a")
    time.sleep(0.06)
    assert rr.hget("h", "a") is None
    assert rr.hgetall("h") == {b"b": b"2"}
    assert rr.hlen("h") == 1
    rr.execute_command("HPEXPIRE", "h", "30", "FIELDS", "1", "b")
    time.sleep(0.06)
    assert rr.hkeys("h") == []
    assert rr.exists("h") == 0


def test_field_expiry_logging(server, r):
    r.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    records = record_journal(server)
    before = int(time.time() * 1000)
    r.execute_command("HEXPIRE", "h", "100", "NX", "FIELDS", "3", "a", "zz", "b")
    (effect,) = records[-1]
    assert effect[:2] == [b"HPEXPIREAT", b"h"] and effect[3:] == [b"FIELDS", b"2", b"a", b"b"]
    assert before + 100_000 <= int(effect[2]) <= int(time.time() * 1000) + 100_000
    r.execute_command("HPEXPIRE", "h", "0", "FIELDS", "1", "a")
    assert records[-1] == [[b"HDEL", b"h", b"a"]]
    r.execute_command("HEXPIRE", "h", "100", "XX", "FIELDS", "1", "c")
    assert len(records) == 2  # a condition that fails everywhere logs nothing


def test_lazy_field_expiry_is_logged_before_the_command(server, r):
    def plant():  # a hash with a field already due, unknown to the active sweep
        value = HashValue({b"a": b"1", b"b": b"2"}, {b"a": 1})
        server.server.dbs[0].set(b"h", value)
        server.server.dbs[0].set(b"g", HashValue({b"a": b"1"}, {b"a": 1}))

    server.call(plant)
    records = record_journal(server)
    r.hset("h", "d", "4")
    assert records[-1] == [[b"HDEL", b"h", b"a"], [b"HSET", b"h", b"d", b"4"]]
    assert r.hget("g", "a") is None
    assert records[-1] == [[b"HDEL", b"g", b"a"]]
    assert r.exists("g") == 0


def test_field_expiry_errors(rr):
    rr.hset("h", "a", "1")
    assert err(rr, "HEXPIRE", "h", "x", "FIELDS", "1", "a") == "value is not an integer or out of range"
    assert err(rr, "HEXPIRE", "h", "-1", "FIELDS", "1", "a") == "invalid expire time, must be >= 0"
    assert err(rr, "HEXPIRE", "h", "70368744177664", "FIELDS", "1", "a") == "invalid expire time in 'hexpire' command"
    assert err(rr, "HPEXPIREAT", "h", "70368744177664", "FIELDS", "1", "a") == (
        "invalid expire time in 'hpexpireat' command")
    assert err(rr, "HEXPIRE", "h", "10", "FOO", "1", "a") == (
        "Mandatory argument FIELDS is missing or not at the right position")
    assert err(rr, "HEXPIRE", "h", "10", "NX", "1", "a") == (
        "Mandatory argument FIELDS is missing or not at the right position")
    assert err(rr, "HEXPIRE", "h", "10", "FIELDS", "0", "a") == "Parameter `numFields` should be greater than 0"
    assert err(rr, "HEXPIRE", "h", "10", "FIELDS", "2", "a") == (
        "The `numfields` parameter must match the number of arguments")
    assert err(rr, "HTTL", "h", "FIELDS", "x", "a") == "Number of fields must be a positive integer"
    assert err(rr, "HTTL", "h", "FOO", "1", "a") == "Mandatory argument FIELDS is missing or not at the right position"
    assert err(rr, "HPERSIST", "h", "FIELDS", "3", "a") == "The `numfields` parameter must match the number of arguments"
    assert err(rr, "HEXPIRE", "h", "10", "FIELDS", "1") == "wrong number of arguments for 'hexpire' command"


def test_replaying_the_log_rebuilds_the_same_data(make_server):
    """What hash, set and HLL writes log (rewritten SPOP, HINCRBYFLOAT, relative TTLs, lazy
    field expiry) replayed on an empty server gives the same data."""
    first, second = make_server(), make_server()
    records = record_journal(first)
    r = redis.Redis(port=first.port)
    r.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    r.execute_command("HEXPIRE", "h", "100", "FIELDS", "1", "a")
    r.execute_command("HPEXPIRE", "h", "20", "FIELDS", "1", "b")
    time.sleep(0.05)
    r.hincrbyfloat("h", "a", "1.5")
    assert r.hget("h", "b") is None
    r.hincrby("h", "c", 2)
    r.sadd("s", *range(10))
    r.spop("s", 3)
    r.spop("s")
    r.sinterstore("t", "s", "s")
    r.pfadd("p", "x", "y")
    r.pfcount("p")
    r.pfmerge("q", "p")
    copy = redis.Redis(port=second.port)
    for effects in records:
        for argv in effects:
            copy.execute_command(*argv)
    assert copy.hgetall("h") == r.hgetall("h") == {b"a": b"2.5", b"c": b"5"}
    assert copy.execute_command("HEXPIRETIME", "h", "FIELDS", "2", "a", "c") == r.execute_command(
        "HEXPIRETIME", "h", "FIELDS", "2", "a", "c")
    assert copy.smembers("s") == r.smembers("s") and len(r.smembers("s")) == 6
    assert copy.smembers("t") == r.smembers("t")
    assert copy.get("p") == r.get("p") and copy.get("q") == r.get("q")


def test_the_cron_expires_fields_of_untouched_hashes(server, r):
    r.hset("h", mapping={"a": "1", "b": "2"})
    r.hset("gone", "a", "1")
    records = record_journal(server)
    r.execute_command("HPEXPIRE", "h", "20", "FIELDS", "1", "a")
    r.execute_command("HPEXPIRE", "gone", "20", "FIELDS", "1", "a")
    deadline = time.time() + 3
    while time.time() < deadline and r.exists("gone"):
        time.sleep(0.02)
    assert r.exists("gone") == 0  # EXISTS does not read fields: the sweep removed it
    assert r.dbsize() == 1
    assert [b"HDEL", b"h", b"a"] in [e for effects in records for e in effects]
    assert r.hgetall("h") == {b"b": b"2"}


def test_hincrbyfloat_refuses_a_nul_inside_the_value_or_the_increment(r):
    r.hset("h", "f", b"1\x002")
    with pytest.raises(redis.ResponseError, match="hash value is not a float"):
        r.hincrbyfloat("h", "f", 1)
    with pytest.raises(redis.ResponseError, match="value is not a valid float"):
        r.hincrbyfloat("h", "g", b"1\x002")
    assert r.hget("h", "f") == b"1\x002" and not r.hexists("h", "g")
