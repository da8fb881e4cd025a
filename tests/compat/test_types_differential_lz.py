"""Differential test: random sequences of list, sorted-set and string commands on a few shared
keys (so WRONGTYPE paths run too) go to Pion and to the reference Redis 7.0; every reply, error
text and the final contents must match. Both protocols. The order of ZRANDMEMBER-like replies
is unspecified in Redis, so those commands are left out; everything else compares exactly."""

from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEYS = ["k1", "k2", "k3"]
MEMBERS = ["a", "b", "c", "d", "", "10"]
SCORES = ["0", "1", "2", "1.5", "-1", "-0", "inf", "-inf", "+inf", "1e3", "x", "nan", "0x10", "3"]
INDEXES = ["0", "1", "-1", "2", "-2", "5", "-9", "x"]
BOUNDS = ["-inf", "+inf", "0", "(0", "1", "(1", "2", "(2", "x", "(", ""]
LEX = ["-", "+", "[a", "(a", "[c", "(c", "[", "a", "(d", "[10"]

key = st.sampled_from(KEYS)
member = st.sampled_from(MEMBERS)
score = st.sampled_from(SCORES)
index = st.sampled_from(INDEXES)
bound = st.sampled_from(BOUNDS)
lex = st.sampled_from(LEX)
where = st.sampled_from(["LEFT", "RIGHT", "left", "UP"])


def cmd(*parts) -> st.SearchStrategy[list[str]]:
    return st.tuples(*(st.just(p) if isinstance(p, str) else p for p in parts)).map(
        lambda items: [x for item in items for x in (item if isinstance(item, list) else [item])])


def some(*options: str, max_size: int = 2) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(options), max_size=max_size).map(lambda xs: [w for x in xs for w in x.split()])


LIST_COMMANDS = st.one_of(
    cmd(st.sampled_from(["RPUSH", "LPUSH", "RPUSHX", "LPUSHX"]), key, member, st.lists(member, max_size=2)),
    cmd(st.sampled_from(["LPOP", "RPOP"]), key, some("0", "1", "3", "-1", "x", max_size=1)),
    cmd("LRANGE", key, index, index),
    cmd("LINDEX", key, index),
    cmd("LSET", key, index, member),
    cmd("LINSERT", key, st.sampled_from(["BEFORE", "after", "MIDDLE"]), member, member),
    cmd("LREM", key, st.sampled_from(["0", "1", "-1", "2", "x"]), member),
    cmd("LTRIM", key, index, index),
    cmd("LPOS", key, member, some("RANK 1", "RANK -1", "RANK 2", "RANK 0", "COUNT 0", "COUNT 2", "MAXLEN 2")),
    cmd("LMOVE", key, key, where, where),
    cmd("RPOPLPUSH", key, key),
    cmd("LMPOP", st.sampled_from(["1", "2", "0"]), key, key, where, some("COUNT 2", "COUNT 0", max_size=1)),
    cmd("LLEN", key),
    cmd(st.sampled_from(["BLPOP", "BRPOP"]), key, key, "0.01"),
    cmd("BLMOVE", key, key, where, where, "0.01"),
)

ZSET_COMMANDS = st.one_of(
    cmd("ZADD", key, some("NX", "XX", "GT", "LT", "CH", "INCR"), score, member, st.lists(st.tuples(score, member)
        .map(list), max_size=2).map(lambda xs: [w for x in xs for w in x])),
    cmd("ZINCRBY", key, score, member),
    cmd("ZREM", key, member, st.lists(member, max_size=2)),
    cmd(st.sampled_from(["ZCARD", "TYPE", "EXISTS", "GET", "DEL"]), key),
    cmd(st.sampled_from(["ZSCORE", "ZRANK", "ZREVRANK"]), key, member),
    cmd("ZMSCORE", key, member, member),
    cmd("ZCOUNT", key, bound, bound),
    cmd("ZLEXCOUNT", key, lex, lex),
    cmd("ZRANGE", key, index, index, some("REV", "WITHSCORES")),
    cmd("ZRANGE", key, bound, bound, "BYSCORE", some("REV", "WITHSCORES", "LIMIT 1 2", "LIMIT 0 -1", "LIMIT -1 1")),
    cmd("ZRANGE", key, lex, lex, "BYLEX", some("REV", "LIMIT 0 2", "WITHSCORES")),
    cmd(st.sampled_from(["ZRANGEBYSCORE", "ZREVRANGEBYSCORE"]), key, bound, bound, some("WITHSCORES", "LIMIT 1 1")),
    cmd(st.sampled_from(["ZRANGEBYLEX", "ZREVRANGEBYLEX"]), key, lex, lex, some("LIMIT 0 1", "LIMIT 1 -1")),
    cmd("ZREVRANGE", key, index, index, some("WITHSCORES")),
    cmd("ZRANGESTORE", key, key, index, index, some("REV", "BYSCORE")),
    cmd("ZREMRANGEBYSCORE", key, bound, bound),
    cmd("ZREMRANGEBYRANK", key, index, index),
    cmd("ZREMRANGEBYLEX", key, lex, lex),
    cmd(st.sampled_from(["ZUNIONSTORE", "ZINTERSTORE"]), key, "2", key, key,
        some("WEIGHTS 2 0.5", "WEIGHTS 1 x", "AGGREGATE MIN", "AGGREGATE max", "AGGREGATE avg")),
    cmd(st.sampled_from(["ZUNION", "ZINTER"]), "2", key, key, some("WEIGHTS -1 1", "AGGREGATE MAX", "WITHSCORES")),
    cmd(st.sampled_from(["ZDIFF", "ZDIFFSTORE k3"]).map(str.split), "2", key, key, some("WITHSCORES", max_size=1)),
    cmd("ZINTERCARD", "2", key, key, some("LIMIT 1", "LIMIT -1", max_size=1)),
    cmd(st.sampled_from(["ZPOPMIN", "ZPOPMAX"]), key, some("0", "1", "2", "-1", max_size=1)),
    cmd("ZMPOP", "2", key, key, st.sampled_from(["MIN", "max", "mid"]), some("COUNT 2", max_size=1)),
    cmd(st.sampled_from(["BZPOPMIN", "BZPOPMAX"]), key, "0.01"),
    cmd("ZSCAN", key, "0", some("MATCH a*", "COUNT 5", max_size=1)),
    cmd("ZRANDMEMBER", key, st.sampled_from(["0", "x", "1 foo", "-9223372036854775808"]).map(str.split)),
    cmd("SET", key, member),
    cmd("APPEND", key, member),
)

SEQUENCES = st.lists(st.one_of(LIST_COMMANDS, ZSET_COMMANDS), min_size=1, max_size=20)


def raw_client(port: int, protocol: int) -> redis.Redis:
    """A client that returns replies as parsed from the wire (no per-command callbacks)."""
    client = redis.Redis(port=port, protocol=protocol, socket_timeout=10)
    client.response_callbacks.clear()
    return client


def outcome(client: redis.Redis, argv: list[str]):
    try:
        return ("ok", client.execute_command(*argv))
    except redis.ResponseError as exc:
        return ("error", str(exc))


def contents(client: redis.Redis) -> dict:
    state = {}
    for name in KEYS:
        kind = client.execute_command("TYPE", name)
        if kind == b"list":
            state[name] = client.execute_command("LRANGE", name, 0, -1)
        elif kind == b"zset":
            state[name] = (
                client.execute_command("ZRANGE", name, 0, -1, "WITHSCORES"),
                client.execute_command("OBJECT", "ENCODING", name),
                sorted(client.execute_command("ZSCAN", name, 0, "COUNT", 1000)[1]),
            )
        elif kind == b"string":
            state[name] = client.execute_command("GET", name)
        else:
            state[name] = kind
    return state


@pytest.fixture(params=[(2, 128), (3, 3)], ids=["resp2", "resp3-small-listpacks"])
def pair(request, server, redis_ref):
    """Both servers, one protocol; the second variant makes sets turn into skiplists early."""
    protocol, entries = request.param
    mine = raw_client(server.port, protocol)
    ref = raw_client(redis_ref.port, protocol)
    for client in (mine, ref):
        client.execute_command("CONFIG", "SET", "zset-max-listpack-entries", entries)
    yield mine, ref
    ref.execute_command("CONFIG", "SET", "zset-max-listpack-entries", 128)
    mine.close()
    ref.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=SEQUENCES)
def test_list_zset_string_commands_match_redis(pair, sequence):
    mine, ref = pair
    mine.execute_command("FLUSHALL")
    ref.execute_command("FLUSHALL")
    for argv in sequence:
        assert outcome(mine, argv) == outcome(ref, argv), argv
    assert contents(mine) == contents(ref)
