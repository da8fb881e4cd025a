"""Sorted-set commands through redis-py in RESP2 and RESP3: ZADD flags, scores as Redis prints
them, ranks, ranges of every kind, set algebra, pops, ZRANDMEMBER, ZSCAN, error texts,
WRONGTYPE, emptied keys, events, logging, encodings and DUMP/RESTORE."""

from __future__ import annotations

import math

import redis

from pion.storage.serialize import dump_value, load_value
from pion.storage.zset_value import ZSetValue
from tests.compat.test_lists import WRONGTYPE, Events, err, raw_reply, record_journal


def pairs(rr, reply):
    """ZRANGE WITHSCORES-like replies as [(member, score)] whatever the protocol."""
    return [tuple(pair) for pair in reply]


# -- ZADD ----------------------------------------------------------------------------------------


def test_zadd_counts_added_and_changed(rr):
    assert rr.zadd("z", {"a": 1, "b": 2}) == 2
    assert rr.zadd("z", {"a": 5, "c": 3}) == 1
    assert rr.zadd("z", {"a": 6, "b": 2, "d": 4}, ch=True) == 2
    assert rr.zadd("z", {"a": 7}, nx=True) == 0 and rr.zscore("z", "a") == 6.0
    assert rr.zadd("z", {"a": 7, "new": 1}, xx=True) == 0
    assert rr.zscore("z", "a") == 7.0 and rr.zscore("z", "new") is None
    assert rr.zadd("z", {"a": 1, "b": 9}, gt=True, ch=True) == 1
    assert rr.zadd("z", {"a": 0, "b": 10}, lt=True, ch=True) == 1
    assert rr.zmscore("z", ["a", "b"]) == [0.0, 9.0]
    assert rr.zadd("missing", {"a": 1}, xx=True) == 0 and rr.exists("missing") == 0


def test_zadd_incr_and_zincrby(rr):
    assert rr.zadd("z", {"a": 1.5}, incr=True) == 1.5
    assert rr.zincrby("z", 2, "a") == 3.5
    assert rr.zadd("z", {"a": 1}, incr=True, nx=True) is None
    assert rr.zadd("z", {"b": 1}, incr=True, xx=True) is None
    assert rr.zadd("z", {"a": -10}, incr=True, gt=True) is None
    assert rr.zscore("z", "a") == 3.5


def test_zadd_errors(r):
    assert err(r, "ZADD", "z", "NX", "XX", "1", "a") == "XX and NX options at the same time are not compatible"
    assert err(r, "ZADD", "z", "GT", "LT", "1", "a") == "GT, LT, and/or NX options at the same time are not compatible"
    assert err(r, "ZADD", "z", "NX", "GT", "1", "a") == "GT, LT, and/or NX options at the same time are not compatible"
    assert err(r, "ZADD", "z", "INCR", "1", "a", "2", "b") == "INCR option supports a single increment-element pair"
    assert err(r, "ZADD", "z", "1", "a", "2") == "syntax error"
    assert err(r, "ZADD", "z", "NX", "CH") == "syntax error"
    for bad in ("x", "nan", "1e400", " 1", "1 ", "1_0"):
        assert err(r, "ZADD", "z", bad, "a") == "value is not a valid float", bad
    assert r.exists("z") == 0
    r.zadd("z", {"a": math.inf})
    assert err(r, "ZINCRBY", "z", "-inf", "a") == "resulting score is not a number (NaN)"
    assert err(r, "ZINCRBY", "z", "x", "a") == "value is not a valid float"


def test_scores_are_printed_as_redis_prints_them(server, raw):
    r = redis.Redis(port=server.port)
    r.execute_command("ZADD", "z", "1.1", "a", "0x10", "b", "-inf", "c", "1e20", "d", "0.30000000000000004", "e")
    assert raw_reply(raw, 2, "ZSCORE", "z", "a") == b"$18\r\n1.1000000000000001\r\n"
    assert raw_reply(raw, 2, "ZSCORE", "z", "b") == b"$2\r\n16\r\n"
    assert raw_reply(raw, 2, "ZSCORE", "z", "c") == b"$4\r\n-inf\r\n"
    assert raw_reply(raw, 3, "ZSCORE", "z", "d") == b",1e+20\r\n"
    assert raw_reply(raw, 3, "ZINCRBY", "z", "0", "e") == b",0.30000000000000004\r\n"
    assert raw_reply(raw, 3, "ZSCORE", "z", "nope") == b"_\r\n"


def test_negative_zero_is_stored_as_zero_in_small_sets(r):
    r.zadd("z", {"a": -0.0})
    assert math.copysign(1.0, r.zscore("z", "a")) == 1.0


# -- reads ---------------------------------------------------------------------------------------


def test_card_score_rank(rr):
    rr.zadd("z", {"a": 1, "b": 2, "c": 2, "d": 3})
    assert rr.zcard("z") == 4 and rr.zcard("missing") == 0
    assert rr.zrank("z", "c") == 2 and rr.zrevrank("z", "c") == 1
    assert rr.zrank("z", "nope") is None and rr.zrank("missing", "a") is None
    assert rr.zrank("z", "d", withscore=True) == [3, 3.0]
    assert rr.zrevrank("z", "a", withscore=True) == [3, 1.0]
    assert rr.zrank("z", "nope", withscore=True) is None
    assert rr.zmscore("missing", ["a"]) == [None]
    assert err(rr, "ZRANK", "z", "a", "FOO") == "syntax error"
    assert err(rr, "ZRANK", "z", "a", "WITHSCORE", "x") == "wrong number of arguments for 'zrank' command"


def test_ties_are_ordered_by_member_bytes(rr):
    rr.zadd("z", {"b": 1, "a": 1, "B": 1, "\xff": 1, "": 1})
    assert rr.zrange("z", 0, -1) == [b"", b"B", b"a", b"b", b"\xc3\xbf"]


def test_zcount_and_zlexcount(rr):
    rr.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert rr.zcount("z", "-inf", "+inf") == 3
    assert rr.zcount("z", "(1", 3) == 2 and rr.zcount("z", "(1", "(3") == 1
    assert rr.zcount("z", 3, 1) == 0 and rr.zcount("missing", 0, 1) == 0
    assert err(rr, "ZCOUNT", "z", "x", "1") == "min or max is not a float"
    rr.zadd("lex", {m: 0 for m in "abcde"})
    assert rr.zlexcount("lex", "-", "+") == 5 and rr.zlexcount("lex", "[b", "(d") == 2
    assert err(rr, "ZLEXCOUNT", "lex", "a", "b") == "min or max not valid string range item"


def test_zrange_by_rank_score_and_lex(rr):
    rr.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert rr.zrange("z", 1, 2) == [b"b", b"c"]
    assert rr.zrange("z", 0, 1, desc=True) == [b"d", b"c"]
    assert pairs(rr, rr.zrange("z", -2, -1, withscores=True)) == [(b"c", 3.0), (b"d", 4.0)]
    assert rr.zrange("z", "(1", 3, byscore=True) == [b"b", b"c"]
    assert rr.zrange("z", "+inf", "-inf", byscore=True, desc=True, offset=1, num=2) == [b"c", b"b"]
    assert rr.zrangebyscore("z", "-inf", "inf", start=1, num=-1) == [b"b", b"c", b"d"]
    assert rr.zrangebyscore("z", "-inf", "inf", start=-1, num=2) == []
    assert rr.zrevrangebyscore("z", 3, "(1") == [b"c", b"b"]
    assert pairs(rr, rr.zrevrange("z", 0, 0, withscores=True)) == [(b"d", 4.0)]
    rr.zadd("lex", {m: 0 for m in "abcdef"})
    assert rr.zrangebylex("lex", "[b", "(e") == [b"b", b"c", b"d"]
    assert rr.zrevrangebylex("lex", "+", "-", start=1, num=2) == [b"e", b"d"]
    assert rr.zrange("lex", "(a", "[c", bylex=True) == [b"b", b"c"]
    assert rr.zrange("missing", 0, -1) == []


def test_withscores_shapes(server, raw):
    redis.Redis(port=server.port).zadd("z", {"a": 1, "b": 2.5})
    assert raw_reply(raw, 2, "ZRANGE", "z", "0", "-1", "WITHSCORES") == (
        b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n2.5\r\n")
    assert raw_reply(raw, 3, "ZRANGE", "z", "0", "-1", "WITHSCORES") == (
        b"*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n")
    assert raw_reply(raw, 3, "ZPOPMIN", "z") == b"*2\r\n$1\r\na\r\n,1\r\n"
    assert raw_reply(raw, 3, "ZPOPMIN", "z", "1") == b"*1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n"
    assert raw_reply(raw, 2, "ZPOPMIN", "z") == b"*0\r\n"


def test_zrange_option_errors(r):
    r.zadd("z", {"a": 1})
    assert err(r, "ZRANGE", "z", "0", "-1", "LIMIT", "0", "1") == (
        "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    assert err(r, "ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES") == (
        "syntax error, WITHSCORES not supported in combination with BYLEX")
    assert err(r, "ZRANGE", "z", "0", "-1", "BYSCORE", "LIMIT", "0") == "syntax error"
    assert err(r, "ZRANGEBYSCORE", "z", "0", "1", "BYSCORE") == "syntax error"
    assert err(r, "ZRANGEBYSCORE", "z", "x", "1") == "min or max is not a float"
    assert err(r, "ZRANGEBYLEX", "z", "a", "[b") == "min or max not valid string range item"
    assert err(r, "ZRANGESTORE", "d", "z", "0", "-1", "WITHSCORES") == "syntax error"
    assert err(r, "ZRANGE", "z", "0", "x") == "value is not an integer or out of range"


def test_zrangestore(rr):
    rr.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert rr.zrangestore("d", "z", 1, -1) == 2
    assert pairs(rr, rr.zrange("d", 0, -1, withscores=True)) == [(b"b", 2.0), (b"c", 3.0)]
    assert rr.zrangestore("d", "z", 3, 1, byscore=True, desc=True, offset=0, num=1) == 1
    assert rr.zrange("d", 0, -1) == [b"c"]
    assert rr.zrangestore("d", "missing", 0, -1) == 0 and rr.exists("d") == 0


def test_zremrange(rr):
    rr.zadd("z", {m: i for i, m in enumerate("abcdefg")})
    assert rr.zremrangebyrank("z", 0, 1) == 2
    assert rr.zremrangebyscore("z", "(2", 4) == 2
    assert rr.zrange("z", 0, -1) == [b"c", b"f", b"g"]
    assert rr.zremrangebyrank("z", 5, 1) == 0
    rr.zadd("lex", {m: 0 for m in "abc"})
    assert rr.zremrangebylex("lex", "-", "(c") == 2
    assert rr.zremrangebylex("lex", "-", "+") == 1 and rr.exists("lex") == 0
    assert rr.zremrangebyscore("missing", 0, 1) == 0


# -- algebra -------------------------------------------------------------------------------------


def test_union_inter_diff(rr):
    rr.zadd("a", {"x": 1, "y": 2, "z": 3})
    rr.zadd("b", {"y": 10, "z": 20, "w": 30})
    assert pairs(rr, rr.zunion(["a", "b"], withscores=True)) == [
        (b"x", 1.0), (b"y", 12.0), (b"z", 23.0), (b"w", 30.0)]
    assert pairs(rr, rr.zinter({"a": 2, "b": 0.5}, withscores=True)) == [(b"y", 9.0), (b"z", 16.0)]
    assert pairs(rr, rr.zinter(["a", "b"], aggregate="MAX", withscores=True)) == [(b"y", 10.0), (b"z", 20.0)]
    assert pairs(rr, rr.zunion(["a", "b"], aggregate="MIN", withscores=True))[:2] == [(b"x", 1.0), (b"y", 2.0)]
    assert rr.zdiff(["b", "a"], withscores=True) in ([b"w", b"30"], [[b"w", 30.0]])
    assert rr.zunionstore("d", ["a", "b"]) == 4 and rr.zinterstore("d2", ["a", "b"]) == 2
    assert rr.zdiffstore("d3", ["a", "b"]) == 1 and rr.zrange("d3", 0, -1) == [b"x"]
    assert rr.zinterstore("d2", ["a", "missing"]) == 0 and rr.exists("d2") == 0
    assert rr.zintercard(2, ["a", "b"]) == 2 and rr.zintercard(2, ["a", "b"], limit=1) == 1


def test_plain_sets_count_with_score_one(rr):
    rr.zadd("z", {"a": 5, "b": 6})
    rr.sadd("s", "b", "c")
    assert pairs(rr, rr.zunion(["z", "s"], withscores=True)) == [(b"c", 1.0), (b"a", 5.0), (b"b", 7.0)]
    assert rr.zinter(["z", "s"]) == [b"b"]


def test_infinities_sum_to_zero(rr):
    rr.zadd("z", {"a": math.inf})
    rr.zadd("y", {"a": -math.inf})
    assert pairs(rr, rr.zunion(["z", "y"], withscores=True)) == [(b"a", 0.0)]
    assert pairs(rr, rr.zunion({"z": 0}, withscores=True)) == [(b"a", 0.0)]


def test_algebra_errors(r):
    r.zadd("a", {"x": 1})
    r.set("str", "v")
    assert err(r, "ZUNIONSTORE", "d", "0", "a") == "at least 1 input key is needed for 'zunionstore' command"
    assert err(r, "ZINTERCARD", "0", "a") == "at least 1 input key is needed for 'zintercard' command"
    assert err(r, "ZUNION", "3", "a") == "syntax error"
    assert err(r, "ZUNION", "1", "a", "WEIGHTS", "x") == "weight value is not a float"
    assert err(r, "ZUNION", "1", "a", "AGGREGATE", "avg") == "syntax error"
    assert err(r, "ZDIFF", "1", "a", "WEIGHTS", "1") == "syntax error"
    assert err(r, "ZINTERSTORE", "d", "1", "a", "WITHSCORES") == "syntax error"
    assert err(r, "ZINTERCARD", "1", "a", "LIMIT", "-1") == "LIMIT can't be negative"
    assert err(r, "ZUNION", "2", "a", "str") == WRONGTYPE
    assert r.zunionstore("str", ["a"]) == 1 and r.type("str") == b"zset"


# -- pops and random members ---------------------------------------------------------------------


def test_zpop_and_zmpop(rr):
    rr.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert rr.zpopmin("z") in ([(b"a", 1.0)], [b"a", 1.0])
    assert pairs(rr, rr.zpopmax("z", 2)) == [(b"d", 4.0), (b"c", 3.0)]
    assert rr.zpopmin("z", 0) == []
    score = b"2" if rr.protocol_version == 2 else 2.0
    assert rr.zmpop(2, ["missing", "z"], min=True, count=5) == [b"z", [[b"b", score]]]
    assert rr.exists("z") == 0
    assert rr.zpopmin("missing") == [] and rr.zmpop(1, ["missing"], max=True) is None
    assert err(rr, "ZPOPMIN", "z", "-1") == "value is out of range, must be positive"
    assert err(rr, "ZPOPMIN", "z", "1", "2") == "syntax error"
    assert err(rr, "ZMPOP", "1", "z", "FOO") == "syntax error"
    assert err(rr, "ZMPOP", "1", "z", "MIN", "COUNT", "0") == "count should be greater than 0"
    assert err(rr, "ZMPOP", "0", "z", "MIN") == "numkeys should be greater than 0"


def test_zrandmember(rr):
    members = {b"%d" % i for i in range(10)}
    rr.zadd("z", {m: i for i, m in enumerate(members)})
    assert rr.zrandmember("z") in members and rr.zrandmember("missing") is None
    picked = rr.zrandmember("z", 5)
    assert len(set(picked)) == 5 and set(picked) <= members
    assert sorted(rr.zrandmember("z", 50)) == sorted(members)
    assert len(rr.zrandmember("z", -30)) == 30
    assert rr.zrandmember("z", 0) == [] and rr.zrandmember("missing", 3) == []
    with_scores = rr.zrandmember("z", -3, withscores=True)
    flat = with_scores if rr.protocol_version == 2 else [x for pair in with_scores for x in pair]
    assert len(flat) == 6
    assert err(rr, "ZRANDMEMBER", "z", "1", "FOO") == "syntax error"
    assert err(rr, "ZRANDMEMBER", "missing", "x") == "value is not an integer or out of range"


def test_zscan_small_and_big_sets(rr):
    rr.zadd("z", {"a": 1, "b": 2.5, "ab": 3})
    assert rr.zscan("z", 0) == (0, [(b"a", 1.0), (b"b", 2.5), (b"ab", 3.0)])
    assert rr.zscan("z", 0, match="a*") == (0, [(b"a", 1.0), (b"ab", 3.0)])
    assert rr.zscan("missing", 0) == (0, [])
    rr.zadd("big", {b"m%d" % i: i for i in range(300)})
    seen, cursor, calls = {}, 0, 0
    while True:
        cursor, batch = rr.zscan("big", cursor, count=20)
        seen.update(batch)
        calls += 1
        if cursor == 0:
            break
        rr.zrem("big", b"m%d" % calls)  # removals mid-scan must not hide the others
    assert calls > 5
    assert set(seen) >= {b"m%d" % i for i in range(calls + 1, 300)}
    assert err(rr, "ZSCAN", "z", "x") == "invalid cursor"
    assert err(rr, "ZSCAN", "z", "0", "COUNT", "0") == "syntax error"


def test_zscan_score_text_on_the_wire(server, raw):
    redis.Redis(port=server.port).zadd("z", {"a": 1.0, "b": 1.5})
    assert raw_reply(raw, 3, "ZSCAN", "z", "0") == (
        b"*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n1.5\r\n")


# -- types, events, logging, encodings -----------------------------------------------------------


def test_wrongtype_on_every_zset_command(rr):
    rr.set("str", "v")
    calls = [
        ("ZADD", "str", "1", "a"), ("ZINCRBY", "str", "1", "a"), ("ZREM", "str", "a"), ("ZCARD", "str"),
        ("ZSCORE", "str", "a"), ("ZMSCORE", "str", "a"), ("ZRANK", "str", "a"), ("ZREVRANK", "str", "a"),
        ("ZCOUNT", "str", "0", "1"), ("ZLEXCOUNT", "str", "-", "+"), ("ZRANGE", "str", "0", "-1"),
        ("ZRANGEBYSCORE", "str", "0", "1"), ("ZREVRANGEBYLEX", "str", "+", "-"), ("ZRANGESTORE", "d", "str", "0", "1"),
        ("ZREMRANGEBYRANK", "str", "0", "1"), ("ZREMRANGEBYSCORE", "str", "0", "1"), ("ZREMRANGEBYLEX", "str", "-", "+"),
        ("ZPOPMIN", "str"), ("ZPOPMAX", "str", "0"), ("ZMPOP", "1", "str", "MIN"), ("ZRANDMEMBER", "str"),
        ("ZRANDMEMBER", "str", "1"), ("ZSCAN", "str", "0"), ("ZINTERCARD", "1", "str"), ("ZDIFF", "1", "str"),
    ]
    for argv in calls:
        assert err(rr, *argv) == WRONGTYPE, argv


def test_keyspace_events(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    r = redis.Redis(port=srv.port)
    events = Events(srv)
    r.zadd("z", {"a": 1, "b": 2, "c": 3})
    r.zadd("z", {"a": 1})
    r.zincrby("z", 1, "a")
    r.zrem("z", "a")
    r.zpopmin("z")
    r.zremrangebyscore("z", 0, 10)
    r.zunionstore("u", ["missing"])
    assert events.take() == [
        (b"zadd", b"z"), (b"zincr", b"z"), (b"zrem", b"z"), (b"zpopmin", b"z"),
        (b"zremrangebyscore", b"z"), (b"del", b"z"),
    ]
    events.close()
    r.close()


def test_zmpop_is_logged_as_zpop(server, r):
    r.zadd("z", {"a": 1, "b": 2})
    records = record_journal(server)
    r.zmpop(1, ["z"], max=True)
    r.zadd("z", {"b": 2})
    r.zadd("z", {"b": 2})
    assert records == [[[b"ZPOPMAX", b"z", b"1"]], [[b"ZADD", b"z", b"2", b"b"]]]


def test_object_encoding_follows_the_limits(r):
    r.config_set("zset-max-listpack-entries", 3)
    r.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert r.object("encoding", "z") == b"listpack"
    r.zadd("z", {"d": 4})
    assert r.object("encoding", "z") == b"skiplist"
    r.zrem("z", "d", "c")
    assert r.object("encoding", "z") == b"skiplist"
    r.zunionstore("u", ["z"])
    assert r.object("encoding", "u") == b"listpack"
    r.zadd("long", {"x" * 65: 1})
    assert r.object("encoding", "long") == b"skiplist"


def test_dump_restore_round_trip(r):
    r.zadd("z", {"a": 1.5, "b": -math.inf})
    r.restore("copy", 0, r.dump("z"))
    assert r.zrange("copy", 0, -1, withscores=True) == [(b"b", -math.inf), (b"a", 1.5)]
    value = ZSetValue.from_pairs([(b"x", 2.0)], (128, 64))
    loaded = load_value(dump_value(value))
    assert loaded.scores == {b"x": 2.0} and list(loaded.order) == [(2.0, b"x")]


def test_copy_makes_an_independent_set(r):
    r.zadd("z", {"a": 1, "b": 2})
    assert r.copy("z", "c") is True
    r.zadd("c", {"x": 3})
    r.zrem("z", "a")
    assert r.zrange("z", 0, -1) == [b"b"] and r.zrange("c", 0, -1) == [b"a", b"b", b"x"]
