"""Set commands through redis-py in RESP2 and RESP3: replies, RESP3 shapes, error texts,
WRONGTYPE, emptied keys, SPOP logged as SREM, encodings, SSCAN cursors, events and WATCH."""

from __future__ import annotations

import time

import pytest
import redis

from pion.storage.encodings import encoding_of
from pion.storage.serialize import dump_value, load_value
from pion.storage.set_value import SetValue

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def err(client: redis.Redis, *argv) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        client.execute_command(*argv)
    return str(exc.value)


def record_journal(server) -> list:
    """What the dispatcher hands to the journal: one list of (db, argv) per command."""
    records: list = []
    journal = server.server.journal
    original = journal.append

    def append(effects):
        records.append([[bytes(a) for a in argv] for _, argv in effects])
        return original(effects)

    server.call(setattr, journal, "append", append)
    return records


def raw3(raw, *argv) -> bytes:
    """One command's raw reply on a RESP3 connection."""
    raw.cmd("HELLO", "3")
    raw.read_some(0.3)
    raw.cmd(*argv)
    return raw.read_some(0.5)


class Events:
    """Keyevent notifications of a server started with notify-keyspace-events KEA."""

    def __init__(self, srv) -> None:
        self.sub = redis.Redis(port=srv.port).pubsub()
        self.sub.psubscribe("__keyevent@0__:*")
        self.sub.get_message(timeout=2)

    def take(self) -> list[tuple[bytes, bytes]]:
        out = []
        deadline = time.time() + 0.3
        while time.time() < deadline:
            msg = self.sub.get_message(timeout=0.05)
            if msg and msg["type"] == "pmessage":
                out.append((msg["channel"].split(b":", 1)[1], msg["data"]))
        return out


def encoding(server, key: bytes) -> str:
    return server.call(lambda: encoding_of(server.server.dbs[0].data[key], server.server.settings))


# -- basics ---------------------------------------------------------------------------------------


def test_sadd_srem_scard_count_changes(rr):
    assert rr.sadd("s", "a", "b", "a") == 2
    assert rr.sadd("s", "b", "c") == 1
    assert rr.scard("s") == 3
    assert rr.srem("s", "a", "zz", "a") == 1
    assert rr.scard("missing") == 0
    assert rr.srem("missing", "a") == 0


def test_removing_the_last_member_deletes_the_key(rr):
    rr.sadd("s", "a", "b")
    rr.srem("s", "a", "b")
    assert rr.exists("s") == 0


def test_membership(rr):
    rr.sadd("s", "a", "b")
    assert rr.sismember("s", "a") == 1
    assert rr.sismember("s", "x") == 0
    assert rr.sismember("missing", "x") == 0
    assert rr.smismember("s", "a", "x", "b") == [1, 0, 1]
    assert rr.smismember("missing", "a", "b") == [0, 0]


def test_smembers(rr):
    rr.sadd("s", "a", "b", "1")
    assert rr.smembers("s") == {b"a", b"b", b"1"}
    assert rr.smembers("missing") == set()


def test_resp3_shapes_are_sets_where_redis_sends_sets(server, raw):
    r = redis.Redis(port=server.port)
    r.sadd("s", "a")
    r.sadd("t", "a")
    assert raw3(raw, "SMEMBERS", "s") == b"~1\r\n$1\r\na\r\n"
    assert raw3(raw, "SMEMBERS", "missing") == b"~0\r\n"
    assert raw3(raw, "SINTER", "s", "t") == b"~1\r\n$1\r\na\r\n"
    assert raw3(raw, "SDIFF", "missing") == b"~0\r\n"
    assert raw3(raw, "SRANDMEMBER", "s", "2") == b"*1\r\n$1\r\na\r\n"
    assert raw3(raw, "SRANDMEMBER", "missing", "2") == b"*0\r\n"
    assert raw3(raw, "SPOP", "missing", "2") == b"~0\r\n"
    assert raw3(raw, "SPOP", "s", "0") == b"~0\r\n"
    assert raw3(raw, "SPOP", "s", "5") == b"~1\r\n$1\r\na\r\n"
    assert raw3(raw, "SPOP", "missing") == b"_\r\n"


def test_wrongtype_on_every_command(rr):
    rr.set("str", "v")
    rr.sadd("s", "a")
    calls = [
        ("SADD", "str", "a"), ("SREM", "str", "a"), ("SCARD", "str"), ("SISMEMBER", "str", "a"),
        ("SMISMEMBER", "str", "a"), ("SMEMBERS", "str"), ("SRANDMEMBER", "str"),
        ("SRANDMEMBER", "str", "2"), ("SPOP", "str"), ("SPOP", "str", "1"), ("SMOVE", "str", "s", "a"),
        ("SMOVE", "s", "str", "a"), ("SINTER", "missing", "str"), ("SUNION", "s", "str"),
        ("SDIFF", "missing", "str"), ("SINTERSTORE", "d", "s", "str"), ("SUNIONSTORE", "d", "str"),
        ("SDIFFSTORE", "d", "s", "str"), ("SINTERCARD", "2", "s", "str"), ("SSCAN", "str", "0"),
    ]
    for argv in calls:
        assert err(rr, *argv) == WRONGTYPE, argv


def test_arity_and_syntax_errors(r):
    assert err(r, "SADD", "s") == "wrong number of arguments for 'sadd' command"
    assert err(r, "SPOP", "s", "1", "2") == "syntax error"
    assert err(r, "SRANDMEMBER", "s", "1", "2") == "syntax error"
    assert err(r, "SPOP", "s", "-1") == "value is out of range, must be positive"
    assert err(r, "SPOP", "s", "abc") == "value is out of range, must be positive"
    assert err(r, "SRANDMEMBER", "s", "abc") == "value is not an integer or out of range"
    assert err(r, "SRANDMEMBER", "s", "-9223372036854775808") == (
        "value is out of range, value must between -9223372036854775807 and 9223372036854775807")


# -- random members -----------------------------------------------------------------------------------


def test_srandmember_counts(rr):
    members = {b"%d" % i for i in range(20)}
    rr.sadd("s", *members)
    assert rr.srandmember("s") in members
    assert rr.srandmember("missing") is None
    picked = rr.srandmember("s", 5)
    assert len(picked) == 5 and len(set(picked)) == 5 and set(picked) <= members
    assert sorted(rr.srandmember("s", 50)) == sorted(members)
    repeated = rr.srandmember("s", -100)
    assert len(repeated) == 100 and set(repeated) <= members
    assert rr.srandmember("s", 0) == []
    assert rr.scard("s") == 20


def test_srandmember_is_roughly_uniform(r):
    r.sadd("s", *range(10))
    seen = r.srandmember("s", -5000)
    counts = [seen.count(b"%d" % i) for i in range(10)]
    assert min(counts) > 350 and max(counts) < 650


def test_spop_removes_what_it_returns(rr):
    rr.sadd("s", *range(10))
    one = rr.spop("s")
    assert rr.sismember("s", one) == 0
    popped = rr.spop("s", 4)
    assert len(popped) == 4
    assert not any(rr.sismember("s", m) for m in popped)
    assert rr.scard("s") == 5
    rest = rr.spop("s", 100)
    assert len(rest) == 5
    assert rr.exists("s") == 0
    assert rr.spop("missing") is None


def test_spop_is_logged_as_srem(server, r):
    r.sadd("s", "a", "b", "c")
    records = record_journal(server)
    popped = r.spop("s")
    assert records[-1] == [[b"SREM", b"s", popped]]
    many = r.spop("s", 5)
    assert records[-1][0][:2] == [b"SREM", b"s"] and sorted(records[-1][0][2:]) == sorted(many)
    r.spop("missing")
    assert len(records) == 2


def test_spop_of_a_big_count_is_logged_in_batches(server, r):
    r.sadd("s", *range(3000))
    records = record_journal(server)
    assert len(r.spop("s", 2500)) == 2500
    effects = records[-1]
    assert [len(e) - 2 for e in effects] == [1024, 1024, 452]
    assert all(e[0] == b"SREM" for e in effects)


# -- SMOVE --------------------------------------------------------------------------------------------


def test_smove(rr):
    rr.sadd("a", "x", "y")
    assert rr.smove("a", "b", "x") == 1
    assert rr.smembers("b") == {b"x"}
    assert rr.smove("a", "b", "zz") == 0
    assert rr.smove("a", "a", "y") == 1
    assert rr.smove("a", "a", "zz") == 0
    assert rr.smove("a", "b", "y") == 1
    assert rr.exists("a") == 0
    assert rr.smembers("b") == {b"x", b"y"}


def test_smove_missing_source_answers_zero_before_checking_the_destination(rr):
    rr.set("str", "v")
    assert rr.smove("missing", "str", "x") == 0
    rr.sadd("a", "x")
    assert err(rr, "SMOVE", "a", "str", "x") == WRONGTYPE
    assert rr.smembers("a") == {b"x"}


# -- algebra -----------------------------------------------------------------------------------------


def test_sinter_sunion_sdiff(rr):
    rr.sadd("a", "1", "2", "3", "x")
    rr.sadd("b", "2", "3", "4")
    rr.sadd("c", "3", "x")
    assert rr.sinter("a", "b") == {b"2", b"3"}
    assert rr.sinter("a", "b", "c") == {b"3"}
    assert rr.sinter("a", "missing") == set()
    assert rr.sunion("a", "b", "missing") == {b"1", b"2", b"3", b"4", b"x"}
    assert rr.sdiff("a", "b") == {b"1", b"x"}
    assert rr.sdiff("a", "b", "c") == {b"1"}
    assert rr.sdiff("missing", "a") == set()


def test_store_variants_replace_the_destination_and_its_ttl(rr):
    rr.sadd("a", "1", "2", "3")
    rr.sadd("b", "2", "3", "4")
    rr.set("d", "string", ex=100)
    assert rr.sinterstore("d", "a", "b") == 2
    assert rr.ttl("d") == -1
    assert rr.smembers("d") == {b"2", b"3"}
    assert rr.sunionstore("d", "a", "b") == 4
    assert rr.sdiffstore("d", "a", "b") == 1
    assert rr.smembers("d") == {b"1"}
    assert rr.sdiffstore("d", "a", "a") == 0
    assert rr.exists("d") == 0
    assert rr.sunionstore("a", "a", "b") == 4


def test_sintercard(rr):
    rr.sadd("a", *range(10))
    rr.sadd("b", *range(5, 20))
    assert rr.sintercard(2, ["a", "b"]) == 5
    assert rr.sintercard(2, ["a", "b"], limit=3) == 3
    assert rr.sintercard(2, ["a", "b"], limit=0) == 5
    assert rr.sintercard(2, ["a", "missing"]) == 0
    assert err(rr, "SINTERCARD", "0", "a") == "numkeys should be greater than 0"
    assert err(rr, "SINTERCARD", "x", "a") == "numkeys should be greater than 0"
    assert err(rr, "SINTERCARD", "3", "a") == "Number of keys can't be greater than number of args"
    assert err(rr, "SINTERCARD", "1", "a", "LIMIT", "-1") == "LIMIT can't be negative"
    assert err(rr, "SINTERCARD", "1", "a", "LIMIT") == "syntax error"
    assert err(rr, "SINTERCARD", "1", "a", "foo") == "syntax error"


# -- SSCAN --------------------------------------------------------------------------------------------


def test_sscan_of_a_small_set_returns_everything_at_once(rr):
    rr.sadd("s", "a", "b", "c")
    cursor, members = rr.sscan("s", 0, count=1)
    assert cursor == 0 and sorted(members) == [b"a", b"b", b"c"]
    assert rr.sscan("s", 0, match="a*") == (0, [b"a"])
    assert rr.sscan("missing", 0) == (0, [])


def test_sscan_errors(rr):
    rr.sadd("s", "a")
    assert err(rr, "SSCAN", "s", "x") == "invalid cursor"
    assert err(rr, "SSCAN", "s", "0", "COUNT", "0") == "syntax error"
    assert err(rr, "SSCAN", "s", "0", "COUNT", "x") == "value is not an integer or out of range"
    assert err(rr, "SSCAN", "s", "0", "NOVALUES") == "NOVALUES option can only be used in HSCAN"
    assert err(rr, "SSCAN", "s", "0", "MATCH") == "syntax error"
    assert rr.execute_command("SSCAN", "missing", "0", "COUNT", "0") == (0, [])


def test_sscan_of_a_big_set_visits_every_member_present_throughout(r):
    members = {b"m%d" % i for i in range(1000)}
    r.sadd("s", *members)
    seen, cursor, calls = set(), 0, 0
    while True:
        cursor, page = r.sscan("s", cursor, count=50)
        seen.update(page)
        calls += 1
        r.sadd("s", b"new%d" % calls)  # changes between calls must not hide anyone
        if calls % 3 == 0:
            r.srem("s", b"new%d" % (calls - 1))
        if cursor == 0:
            break
    assert members <= seen
    assert 15 <= calls <= 40


# -- encodings, dumps, events, WATCH ---------------------------------------------------------------


def test_encodings_follow_redis_thresholds(make_server):
    extra = (("set-max-intset-entries", "4"), ("set-max-listpack-entries", "3"), ("set-max-listpack-value", "5"))
    srv = make_server(extra=extra)
    r = redis.Redis(port=srv.port)
    r.sadd("i", 1, 2, 3)
    assert encoding(srv, b"i") == "intset"
    r.sadd("i", 4)
    assert encoding(srv, b"i") == "intset"
    r.sadd("i", 5)
    assert encoding(srv, b"i") == "hashtable"
    r.sadd("l", "a")
    assert encoding(srv, b"l") == "listpack"
    r.sadd("l", "b", "c")
    assert encoding(srv, b"l") == "listpack"
    r.sadd("l", "d")
    assert encoding(srv, b"l") == "hashtable"
    r.srem("l", "a", "b", "c")
    assert encoding(srv, b"l") == "hashtable"  # never converts back
    r.sadd("v", "toolong")
    assert encoding(srv, b"v") == "hashtable"  # created as listpack by the hint, converted on insert
    r.sadd("h", "a", "b", "c", "d")
    assert encoding(srv, b"h") == "hashtable"  # the hint alone is over the limit
    r.sadd("w", "ok")
    r.sadd("w", "toolong")
    assert encoding(srv, b"w") == "hashtable"
    r.sadd("m", 1)
    r.sadd("m", "x")
    assert encoding(srv, b"m") == "listpack"


def test_dump_and_load_keep_members_and_encoding():
    value = SetValue({b"a", b"b"}, "listpack")
    again = load_value(dump_value(value))
    assert isinstance(again, SetValue)
    assert again.members == {b"a", b"b"} and again.encoding == "listpack"


def test_keyspace_events(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    events = Events(srv)
    r = redis.Redis(port=srv.port)
    r.sadd("a", "x", "y")
    r.srem("a", "x")
    r.smove("a", "b", "y")
    r.sadd("c", "1")
    r.sinterstore("d", "b", "b")
    r.spop("c")
    r.sunionstore("d", "missing")
    assert events.take() == [
        (b"sadd", b"a"), (b"srem", b"a"), (b"srem", b"a"), (b"del", b"a"), (b"sadd", b"b"),
        (b"sadd", b"c"), (b"sinterstore", b"d"), (b"spop", b"c"), (b"del", b"c"), (b"del", b"d"),
    ]


def test_changes_invalidate_watch(server):
    r, other = redis.Redis(port=server.port), redis.Redis(port=server.port)
    r.sadd("s", "a")
    with r.pipeline() as pipe:
        pipe.watch("s")
        other.sadd("s", "b")
        pipe.multi()
        pipe.scard("s")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    with r.pipeline() as pipe:
        pipe.watch("s")
        other.sadd("s", "b")  # no change: the transaction still runs
        pipe.multi()
        pipe.scard("s")
        assert pipe.execute() == [2]
