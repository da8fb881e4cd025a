"""maxmemory: fill to the limit under every policy; evictions are logged as DEL."""

from __future__ import annotations

import time

import pytest
import redis

from pion.config import parse_memory, settings_from_pairs
from pion.storage.memory import estimate, key_size
from tests.recovery.helpers import DirServer, full_dump

LIMIT = 300_000
VALUE = b"v" * 1000


def client_for(make_server, policy, **more):
    srv = make_server(maxmemory=LIMIT, maxmemory_policy=policy, maxmemory_samples=10, **more)
    return srv, redis.Redis(port=srv.port, socket_timeout=10)


def used(srv) -> int:
    return srv.server.parts.memory.used_memory()


def fill(r, prefix, count, ttl=None, touch=(), pause_every=0):
    errors = 0
    for i in range(count):
        try:
            r.set(f"{prefix}{i}", VALUE, ex=ttl)
        except redis.exceptions.ResponseError as exc:
            assert isinstance(exc, redis.exceptions.OutOfMemoryError)  # the -OOM prefix
            assert str(exc) == "command not allowed when used memory > 'maxmemory'."
            errors += 1
        for key in touch:
            r.get(key)
        if pause_every and i % pause_every == 0:
            time.sleep(0.03)  # let the access clock (hz) move on
    return errors


def test_memory_units_parse_like_redis():
    assert parse_memory("1mb") == 1024**2 and parse_memory("2gb") == 2 * 1024**3 and parse_memory("100") == 100
    assert settings_from_pairs([("maxmemory", "1gb")]).maxmemory == 1024**3


def test_estimates_grow_with_the_data():
    assert estimate(b"x" * 1000) > 1000
    assert key_size(b"k", {b"f%d" % i: b"v" * 100 for i in range(100)}) > 10_000
    assert key_size(b"k", [b"v" * 100] * 1000) > 100_000


def test_noeviction_refuses_writes_but_serves_reads_and_deletes(make_server):
    srv, r = client_for(make_server, "noeviction")
    errors = fill(r, "k", 600)
    assert errors > 0
    assert used(srv) <= LIMIT + 2000
    assert r.get("k0") == VALUE
    with pytest.raises(redis.exceptions.OutOfMemoryError, match="^command not allowed when used memory"):
        r.set("more", "x")
    assert r.delete(*[f"k{i}" for i in range(100)]) == 100
    assert r.set("more", "x")
    assert r.info("stats")["evicted_keys"] == 0


def test_allkeys_lru_keeps_recently_used_keys(make_server):
    srv, r = client_for(make_server, "allkeys-lru")
    hot = [f"hot{i}" for i in range(10)]
    for key in hot:
        r.set(key, VALUE)
    assert fill(r, "cold", 800, touch=hot, pause_every=20) == 0
    assert used(srv) <= LIMIT + 2000
    assert r.info("stats")["evicted_keys"] > 400
    assert sum(r.exists(key) for key in hot) >= 9


def test_allkeys_lfu_keeps_frequently_used_keys(make_server):
    srv, r = client_for(make_server, "allkeys-lfu")
    hot = [f"hot{i}" for i in range(10)]
    for key in hot:
        r.set(key, VALUE)
    for _ in range(50):
        for key in hot:
            r.get(key)
    assert fill(r, "cold", 800) == 0
    assert used(srv) <= LIMIT + 2000
    assert sum(r.exists(key) for key in hot) >= 9


@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"])
def test_volatile_policies_evict_only_keys_with_a_ttl(make_server, policy):
    srv, r = client_for(make_server, policy)
    for i in range(100):
        r.set(f"keep{i}", VALUE)
    assert fill(r, "tmp", 300, ttl=1000) == 0
    assert all(r.exists(f"keep{i}") for i in range(100))
    assert used(srv) <= LIMIT + 2000
    errors = fill(r, "more", 400)  # no TTL: once the volatile keys are gone, -OOM
    assert errors > 0
    assert all(r.exists(f"keep{i}") for i in range(100))


def test_volatile_ttl_evicts_the_soonest_expiring_first(make_server):
    srv, r = client_for(make_server, "volatile-ttl")
    for i in range(200):
        r.set(f"t{i}", VALUE, ex=10_000 + i * 100)
    for i in range(150):
        r.set(f"plain{i}", VALUE)
    survivors = [i for i in range(200) if r.exists(f"t{i}")]
    assert survivors and sum(survivors) / len(survivors) > 120


@pytest.mark.parametrize("policy", ["allkeys-random"])
def test_allkeys_random_stays_under_the_limit(make_server, policy):
    srv, r = client_for(make_server, policy)
    assert fill(r, "k", 800) == 0
    assert used(srv) <= LIMIT + 2000 and r.info("stats")["evicted_keys"] > 400


def test_evictions_are_logged_so_a_restart_matches_the_live_keyspace(tmp_path):
    node = DirServer(tmp_path / "d", maxmemory=LIMIT, maxmemory_policy="allkeys-random").start()
    try:
        r = node.client()
        fill(r, "k", 600)
        assert r.info("stats")["evicted_keys"] > 0
        live = full_dump(r, databases=1)
        node.restart(maxmemory=0)
        assert full_dump(node.client(), databases=1) == live
    finally:
        node.stop()


def test_config_set_maxmemory_applies_at_once(make_server):
    srv = make_server(maxmemory_policy="allkeys-random")
    r = redis.Redis(port=srv.port)
    for i in range(500):
        r.set(f"k{i}", VALUE)
    r.config_set("maxmemory", "200000")
    r.get("k1")
    assert used(srv) <= 200_000 + 2000
    assert r.info("memory")["maxmemory"] == 200_000
