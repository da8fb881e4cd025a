"""INFO stats ``keyspace_hits``/``keyspace_misses`` count what Redis counts: the key lookups of
read-only commands (scripts' reads included), not those of writes. Compared with Debian's
redis-server 7.0.15 on the same command sequence."""

from __future__ import annotations

import pytest
import redis

pytestmark = pytest.mark.redis

SEQUENCE = [
    ("SET", "s", "1"), ("GET", "s"), ("GET", "nope"), ("MGET", "s", "nope", "s"),
    ("EXISTS", "s", "nope"), ("TYPE", "s"), ("STRLEN", "s"), ("STRLEN", "nope"),
    ("HSET", "h", "f", "v"), ("HGET", "h", "f"), ("HGET", "nope", "f"), ("HGETALL", "h"),
    ("RPUSH", "l", "a", "b"), ("LRANGE", "l", "0", "-1"), ("LLEN", "nope"),
    ("SADD", "set", "x"), ("SISMEMBER", "set", "x"), ("SMEMBERS", "nope"),
    ("ZADD", "z", "1", "m"), ("ZSCORE", "z", "m"), ("ZRANGE", "nope", "0", "-1"),
    ("INCR", "counter"), ("APPEND", "s", "2"), ("DEL", "nope"),
    ("EVAL", "return redis.call('GET', KEYS[1])", "1", "s"),
    ("EVAL", "return redis.call('GET', KEYS[1])", "1", "nope"),
]


def run(client: redis.Redis) -> tuple[int, int]:
    client.flushall()
    client.config_resetstat()
    for command in SEQUENCE:
        client.execute_command(*command)
    stats = client.info("stats")
    return stats["keyspace_hits"], stats["keyspace_misses"]


def test_hits_and_misses_equal_redis(r, redis_ref):
    with redis.Redis(port=redis_ref.port) as reference:
        theirs = run(reference)
    ours = run(r)
    assert theirs[0] > 0 and theirs[1] > 0
    assert ours == theirs


def test_resetstat_zeroes_them(r):
    r.set("k", "v")
    r.get("k")
    r.get("missing")
    stats = r.info("stats")
    assert (stats["keyspace_hits"], stats["keyspace_misses"]) == (1, 1)
    r.config_resetstat()
    stats = r.info("stats")
    assert (stats["keyspace_hits"], stats["keyspace_misses"]) == (0, 0)
