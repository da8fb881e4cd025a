"""Differential test: random sequences of hash, set, HyperLogLog and string commands over a
few keys, run against Pion and against Debian's redis-server 7.0.15, must give the same
replies (error texts included) and leave the same data.

Keys collide across types so the WRONGTYPE paths run. Where Redis leaves the order open (set
members, a hashtable-encoded hash) replies are compared sorted; a listpack hash must match in
order too. Random picks (SRANDMEMBER, HRANDFIELD) are compared by size; SPOP only pops counts
that take everything; SSCAN/HSCAN are iterated to the end and compared as collections, since
cursors differ. HyperLogLogs are compared byte for byte through GET. The field-expiry commands
are Redis 7.4 and cannot be checked against 7.0: test_hashes.py tests them directly.
"""

from __future__ import annotations

import os
import random

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.redis

KEYS = [b"k1", b"k2", b"k3"]
LONG = b"L" * 70  # over hash-max-listpack-value / set-max-listpack-value: forces hashtable
FIELDS = [b"f1", b"f2", b"f3", b"1", LONG]
VALUES = [b"v", b"", b"0", b"1", b"-3", b"10.5", b"1e3", b"abc", b"007", b"9223372036854775807", b"0x10",
          b" 1", b"inf", LONG]
MEMBERS = [b"1", b"2", b"3", b"-5", b"007", b"a", b"b", LONG]
NUMBERS = [b"0", b"1", b"-1", b"2", b"-2", b"5", b"-10", b"100", b"x", b"1.5", b"9223372036854775807",
           b"-9223372036854775808"]
FLOATS = [b"0.1", b"-1.25", b"1e2", b"3", b"abc", b"inf", b"nan", b"1e4000", b"0x1p3", b".5", b"-0.1"]
SCAN_OPTIONS = [[b"COUNT", b"2"], [b"COUNT", b"0"], [b"MATCH", b"f*"], [b"MATCH", b"*"], [b"MATCH", b"[12]"],
                [b"BOGUS"]]


def _some(rng: random.Random, items: list[bytes], low: int = 1, high: int = 4) -> list[bytes]:
    return [rng.choice(items) for _ in range(rng.randint(low, high))]


def _scan(rng: random.Random, name: bytes) -> list[bytes]:
    options = [a for _ in range(rng.randint(0, 2)) for a in rng.choice(SCAN_OPTIONS)]
    return [name, rng.choice(KEYS), rng.choice([b"0", b"0", b"x"]), *options]


#: one generator per command shape, picked uniformly (writes weighted up so data builds up)
_SHAPES = [
    lambda g: [g.choice([b"HSET", b"HMSET"]), g.choice(KEYS), *[x for _ in range(g.randint(1, 3))
                                                                 for x in (g.choice(FIELDS), g.choice(VALUES))]],
    lambda g: [b"SADD", g.choice(KEYS), *_some(g, MEMBERS, 1, 6)],
    lambda g: [b"PFADD", g.choice(KEYS), *_some(g, MEMBERS, 0, 4)],
] * 3 + [
    lambda g: [b"HSET", g.choice(KEYS), g.choice(FIELDS)],
    lambda g: [b"HSETNX", g.choice(KEYS), g.choice(FIELDS), g.choice(VALUES)],
    lambda g: [g.choice([b"HGET", b"HEXISTS", b"HSTRLEN"]), g.choice(KEYS), g.choice(FIELDS)],
    lambda g: [g.choice([b"HMGET", b"HDEL"]), g.choice(KEYS), *_some(g, FIELDS)],
    lambda g: [g.choice([b"HGETALL", b"HKEYS", b"HVALS", b"HLEN"]), g.choice(KEYS)],
    lambda g: [b"HINCRBY", g.choice(KEYS), g.choice(FIELDS), g.choice(NUMBERS)],
    lambda g: [b"HINCRBYFLOAT", g.choice(KEYS), g.choice(FIELDS), g.choice(FLOATS)],
    lambda g: [b"HRANDFIELD", g.choice(KEYS), *_some(g, NUMBERS, 0, 1)],
    lambda g: [b"HRANDFIELD", g.choice(KEYS), g.choice(NUMBERS), g.choice([b"WITHVALUES", b"withvalues", b"NO"])],
    lambda g: _scan(g, b"HSCAN"),
    lambda g: [b"SREM", g.choice(KEYS), *_some(g, MEMBERS)],
    lambda g: [g.choice([b"SCARD", b"SMEMBERS"]), g.choice(KEYS)],
    lambda g: [b"SISMEMBER", g.choice(KEYS), g.choice(MEMBERS)],
    lambda g: [b"SMISMEMBER", g.choice(KEYS), *_some(g, MEMBERS)],
    lambda g: [b"SRANDMEMBER", g.choice(KEYS), *_some(g, NUMBERS, 0, 1)],
    lambda g: [b"SPOP", g.choice(KEYS), g.choice([b"0", b"1000", b"-1", b"x"])],
    lambda g: [b"SMOVE", g.choice(KEYS), g.choice(KEYS), g.choice(MEMBERS)],
    lambda g: [g.choice([b"SINTER", b"SUNION", b"SDIFF"]), *_some(g, KEYS, 1, 3)],
    lambda g: [g.choice([b"SINTERSTORE", b"SUNIONSTORE", b"SDIFFSTORE"]), g.choice(KEYS), *_some(g, KEYS, 1, 3)],
    lambda g: (lambda ks: [b"SINTERCARD", b"%d" % len(ks), *ks, *g.choice(
        [[], [b"LIMIT", b"1"], [b"LIMIT", b"0"], [b"LIMIT", b"-1"], [b"FOO"]])])(_some(g, KEYS, 1, 3)),
    lambda g: _scan(g, b"SSCAN"),
    lambda g: [b"PFCOUNT", *_some(g, KEYS, 1, 3)],
    lambda g: [b"PFMERGE", g.choice(KEYS), *_some(g, KEYS, 0, 2)],
    lambda g: [b"SET", g.choice(KEYS), g.choice(VALUES)],
    lambda g: [g.choice([b"GET", b"TYPE", b"DEL"]), g.choice(KEYS)],
]


def _program(seed: int, length: int) -> list[list[bytes]]:
    """The command sequence for one example: hypothesis picks (and shrinks) seed and length, a
    seeded generator picks uniformly among the shapes (hypothesis's own choices favour the
    first alternatives, which left most commands barely exercised)."""
    rng = random.Random(seed)
    return [rng.choice(_SHAPES)(rng) for _ in range(length)]


UNORDERED = {b"SMEMBERS", b"SINTER", b"SUNION", b"SDIFF", b"SPOP"}
HASH_READS = {b"HGETALL", b"HKEYS", b"HVALS"}


def _call(client: redis.Redis, argv: list[bytes]):
    try:
        return client.execute_command(*argv)
    except redis.ResponseError as exc:
        return ("error", str(exc))


def _sorted(reply):
    """Order-free form that still tells a RESP3 set or map from an array."""
    if isinstance(reply, dict):
        return ("map", sorted(reply.items()))
    if isinstance(reply, (list, set)):
        return (type(reply).__name__, sorted(reply, key=repr))
    return reply


def _scan_all(client: redis.Redis, argv: list[bytes]):
    """Iterate a SSCAN/HSCAN to the end; the collection of what it returned."""
    found, cursor = [], argv[2]
    for _ in range(200):
        reply = _call(client, [*argv[:2], cursor, *argv[3:]])
        if isinstance(reply, tuple):
            return reply
        cursor, items = reply
        found += [tuple(items[i:i + 2]) for i in range(0, len(items), 2)] if argv[0] == b"HSCAN" else items
        if cursor in (b"0", 0):
            return sorted(set(found))
    raise AssertionError(f"{argv} did not finish")


def _normal(ref: redis.Redis, argv: list[bytes], reply):
    """What to compare: the reply, or its order-free / size-only form where Redis allows."""
    name = argv[0].upper()
    if isinstance(reply, tuple) or reply is None:
        return reply
    if name in UNORDERED:
        return _sorted(reply)
    if name in HASH_READS and ref.object("encoding", argv[1]) != b"listpack":
        return _sorted(reply)
    if name in (b"SRANDMEMBER", b"HRANDFIELD"):
        return ("size", len(reply)) if isinstance(reply, list) else ("one", type(reply))
    return reply


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def pair(request, server, redis_ref):
    proto = request.param
    pion = redis.Redis(port=server.port, protocol=proto, socket_timeout=10)
    ref = redis.Redis(port=redis_ref.port, protocol=proto, socket_timeout=10)
    for client in (pion, ref):  # compare the replies as sent, not as redis-py reshapes them
        client.response_callbacks.clear()
    yield server, pion, ref
    pion.close()
    ref.close()


def _state(client: redis.Redis, ref: redis.Redis) -> list:
    out = []
    for k in KEYS:
        kind = _call(client, [b"TYPE", k])
        if kind in (b"hash", "hash"):
            out.append(_normal(ref, [b"HGETALL", k], _call(client, [b"HGETALL", k])))
        elif kind in (b"set", "set"):
            out.append(_sorted(_call(client, [b"SMEMBERS", k])))
        else:
            out.append((kind, _call(client, [b"GET", k]) if kind in (b"string", "string") else None))
    return out


#: PION_DIFF_EXAMPLES=2000 for a longer hunt; 50 keeps the suite fast
EXAMPLES = int(os.environ.get("PION_DIFF_EXAMPLES", "50"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), length=st.integers(1, 40))
def test_same_replies_as_redis(pair, seed, length):
    server, pion, ref = pair
    commands = _program(seed, length)
    server.call(lambda: [db.flush() for db in server.server.dbs])
    ref.flushall()
    for argv in commands:
        if argv[0] in (b"SSCAN", b"HSCAN"):
            assert _scan_all(pion, argv) == _scan_all(ref, argv), argv
            continue
        mine, theirs = _call(pion, argv), _call(ref, argv)
        assert _normal(ref, argv, mine) == _normal(ref, argv, theirs), argv
    assert _state(pion, ref) == _state(ref, ref)
