"""MIGRATE between Pion and a real redis-server 7.0.15, both ways, for every Redis type (streams
with their consumer groups, pending entries and consumers included); RESTORE of
redis-server's own DUMP payloads on Pion; Pion-only values refused clearly for a Redis target and
still carried losslessly between Pions (``pion.storage.rdb_payload``)."""

from __future__ import annotations

import random

import pytest
import redis

from pion.storage.crc64 import crc64_bytewise
from pion.storage.rdb_payload import crc64, dump_redis, is_redis_payload, load_redis
from tests.support.servers import RedisServer, ThreadServer, make_settings


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server not installed (make test installs it)")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield redis.Redis(port=server.port), server.port
    server.stop()


@pytest.fixture(scope="module")
def pion(tmp_path_factory):
    server = ThreadServer(make_settings(tmp_path_factory.mktemp("pion"))).start()
    yield redis.Redis(port=server.port), server.port
    server.stop()


def _fill(client: redis.Redis) -> None:
    """One key per type and encoding Redis 7.0 DUMPs differently (int, LZF, listpack, intset, ...)."""
    client.set("s:plain", "hello")
    client.set("s:int", "-12345")
    client.set("s:int64", str(2**40))
    client.set("s:long", "abc" * 2000)  # Redis compresses it with LZF
    client.set("s:bin", bytes(range(256)))
    client.rpush("l:small", "a", "1", "-5", "300", "70000", str(2**40), "x" * 100)
    client.rpush("l:big", *[str(i) * 3 for i in range(3000)])
    client.sadd("set:ints", 1, 2, 3, -4, 2**40)
    client.sadd("set:small", "a", "b", "c")
    client.sadd("set:big", *[f"m{i}" for i in range(600)])
    client.zadd("z:small", {"a": 1.5, "b": -2, "c": float("inf")})
    client.zadd("z:big", {f"m{i}": i / 3 for i in range(300)})
    client.hset("h:small", mapping={"f": "v", "n": "12", "neg": "-3"})
    client.hset("h:big", mapping={f"f{i}": "v" * i for i in range(200)})
    client.set("s:ttl", "soon", px=60_000)
    for i in range(250):  # 3 listpack nodes; entries with the master's fields and others
        client.xadd("st", {"a": str(i), "b": "x"} if i % 3 else {"other": "f", "n": str(i)}, id=f"{1000 + i}-{i % 2}")
    client.xdel("st", "1005-1")
    client.xgroup_create("st", "g1", id="0")
    client.xgroup_create("st", "g2", id="$")
    client.xreadgroup("g1", "alice", {"st": ">"}, count=5)
    client.xreadgroup("g1", "bob", {"st": ">"}, count=3)
    client.xack("st", "g1", "1001-1")
    client.xadd("st:empty", {"x": "1"}, id="5-5")
    client.xdel("st:empty", "5-5")  # an empty stream is a value


def _stream(client: redis.Redis, key: bytes) -> tuple:
    info = client.xinfo_stream(key)
    groups = [(g["name"], g["last-delivered-id"], g["pending"], g["entries-read"], g["lag"])
              for g in client.xinfo_groups(key)]
    consumers = [(c["name"], c["pending"]) for g in client.xinfo_groups(key) for c in client.xinfo_consumers(key, g["name"])]
    pending = [(e["message_id"], e["consumer"], e["times_delivered"])
               for g in client.xinfo_groups(key) for e in client.xpending_range(key, g["name"], "-", "+", 1000)]
    return (client.xrange(key), info["length"], info["last-generated-id"], info["entries-added"],
            info["max-deleted-entry-id"], groups, consumers, pending)


def _snapshot(client: redis.Redis) -> dict:
    out = {}
    for key in sorted(client.keys()):
        kind = client.type(key)
        read = {b"string": client.get, b"list": lambda k: client.lrange(k, 0, -1), b"set": client.smembers,
                b"zset": lambda k: client.zrange(k, 0, -1, withscores=True), b"hash": client.hgetall,
                b"stream": lambda k: _stream(client, k)}[kind]
        out[key] = (kind, read(key), client.pttl(key) > 0)
    return out


def _migrate_all(src: redis.Redis, dst_port: int) -> None:
    keys = src.keys()
    assert src.execute_command("MIGRATE", "127.0.0.1", dst_port, "", 0, 5000, "KEYS", *keys) in (True, b"OK")


@pytest.mark.parametrize("direction", ["pion->redis", "redis->pion"])
def test_migrate_every_type_both_ways(pion, ref, direction):
    (src, _), (dst, dst_port) = (pion, ref) if direction == "pion->redis" else (ref, pion)
    src.flushall()
    dst.flushall()
    _fill(src)
    before = _snapshot(src)
    _migrate_all(src, dst_port)
    assert src.dbsize() == 0  # moved, not copied
    assert _snapshot(dst) == before
    assert 0 < dst.pttl("s:ttl") <= 60_000
    for key, encoding in [("s:int", b"int"), ("set:ints", b"intset"), ("set:big", b"hashtable"),
                          ("z:small", b"listpack"), ("z:big", b"skiplist"), ("h:small", b"listpack"),
                          ("h:big", b"hashtable"), ("l:big", b"quicklist")]:
        assert dst.object("encoding", key) == encoding, key  # encoded by size, as Redis does on RESTORE


def test_restore_of_redis_dump_payloads_on_pion(pion, ref):
    (p, _), (r, _) = pion, ref
    r.flushall()
    p.flushall()
    _fill(r)
    for key in r.keys():
        payload = r.dump(key)
        assert is_redis_payload(payload)
        assert p.restore(key, 0, payload) in (True, b"OK")
    r.persist("s:ttl")
    assert _snapshot(p) == _snapshot(r)
    payload = bytearray(r.dump("h:small"))
    payload[3] ^= 0xFF  # a flipped byte: the CRC64 no longer matches
    with pytest.raises(redis.ResponseError, match="DUMP payload version or checksum are wrong"):
        p.restore("bad", 0, bytes(payload))
    assert p.exists("bad") == 0


def test_pion_only_values_are_refused_for_a_redis_target(pion, ref):
    (p, _), (r, r_port) = pion, ref
    p.flushall()
    r.flushall()
    p.hset("ttlhash", mapping={"f": "v"})
    p.execute_command("HEXPIRE", "ttlhash", 100, "FIELDS", 1, "f")
    p.execute_command("JSON.SET", "doc", "$", '{"a": 1}')
    for key, what in [("ttlhash", "field TTLs"), ("doc", "JsonValue")]:
        with pytest.raises(redis.ResponseError) as caught:
            p.execute_command("MIGRATE", "127.0.0.1", r_port, key, 0, 5000)
        assert "cannot be migrated to a Redis node" in str(caught.value) and what in str(caught.value)
        assert p.exists(key) == 1 and r.exists(key) == 0  # nothing lost, nothing half-written


def test_pion_to_pion_keeps_pion_only_values(pion, tmp_path):
    p, _ = pion
    other = ThreadServer(make_settings(tmp_path / "other")).start()
    try:
        q = redis.Redis(port=other.port)
        p.flushall()
        p.hset("ttlhash", mapping={"f": "v", "g": "w"})
        p.execute_command("HEXPIRE", "ttlhash", 100, "FIELDS", 1, "f")
        p.xadd("stream", {"a": "1"})
        p.rpush("list", "a", "b")
        p.execute_command("MIGRATE", "127.0.0.1", other.port, "", 0, 5000, "KEYS", "ttlhash", "stream", "list")
        assert p.dbsize() == 0
        assert q.hgetall("ttlhash") == {b"f": b"v", b"g": b"w"}
        assert q.execute_command("HTTL", "ttlhash", "FIELDS", 2, "f", "g")[1] == -1
        assert 0 < q.execute_command("HTTL", "ttlhash", "FIELDS", 1, "f")[0] <= 100
        assert len(q.xrange("stream")) == 1 and q.lrange("list", 0, -1) == [b"a", b"b"]
    finally:
        other.stop()


def test_crc64_and_payload_units():
    assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA  # Redis's crc64.c test vector
    rng = random.Random(7)
    for size in (65535, 65536, 65537, 300_001, (1 << 20) + 13):  # numpy lanes folded: equal to the byte loop
        data, start = rng.randbytes(size), rng.getrandbits(64)
        assert crc64(data, start) == crc64_bytewise(data, start) == crc64_bytewise(memoryview(data), start)
    payload = dump_redis(b"v")
    assert payload == b"\x00\x01v\n\x00" + payload[5:] and is_redis_payload(payload)
    assert load_redis(payload, None) == b"v"
    assert not is_redis_payload(payload[:-1] + bytes([payload[-1] ^ 1]))
