"""MIGRATE between two Pion servers (redis-py's suite asks COMMAND GETKEYS about it): keys move with
their TTL, COPY/REPLACE/KEYS/AUTH2, NOKEY, Redis's IOERR and relayed target errors, and a DEL (not
the MIGRATE) in the log."""

from __future__ import annotations

import socket

import pytest
import redis

from tests.compat.test_keys import err, record_journal


@pytest.fixture
def pair(make_server):
    source, target = make_server(), make_server()
    return source, redis.Redis(port=source.port), target, redis.Redis(port=target.port)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_migrate_moves_a_key_with_its_ttl(pair):
    _, src, target, dst = pair
    src.set("k", "v", px=60000)
    src.rpush("l", "a", "b")
    assert src.migrate("127.0.0.1", target.port, "k", 3, 1000)
    assert src.exists("k") == 0
    dst.select(3)
    assert dst.get("k") == b"v" and 50000 < dst.pttl("k") <= 60000
    assert src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 1000, "KEYS", "l", "none") == b"OK"
    assert redis.Redis(port=target.port).lrange("l", 0, -1) == [b"a", b"b"]


def test_migrate_copy_keeps_the_source_and_replace_overwrites(pair):
    _, src, target, dst = pair
    src.set("k", "new")
    dst.set("k", "old")
    assert err(src, "MIGRATE", "127.0.0.1", target.port, "k", 0, 1000, "COPY") == (
        "Target instance replied with error: BUSYKEY Target key name already exists.")
    assert src.migrate("127.0.0.1", target.port, "k", 0, 1000, copy=True, replace=True)
    assert src.get("k") == b"new" and dst.get("k") == b"new"


def test_migrate_answers_nokey_and_redis_errors(pair):
    _, src, target, _ = pair
    assert src.execute_command("MIGRATE", "127.0.0.1", target.port, "none", 0, 1000) == b"NOKEY"
    src.set("k", "v")
    assert err(src, "MIGRATE", "127.0.0.1", target.port, "k", 0, 1000, "KEYS", "a") == (
        "When using MIGRATE KEYS option, the key argument must be set to the empty string")
    assert err(src, "MIGRATE", "127.0.0.1", target.port, "k", 0, 1000, "AUTH") == "syntax error"
    assert err(src, "MIGRATE", "127.0.0.1", target.port, "k", "x", 1000) == "value is not an integer or out of range"
    assert err(src, "MIGRATE", "127.0.0.1", _closed_port(), "k", 0, 1000) == (
        "IOERR error or timeout writing to target instance")
    assert src.get("k") == b"v"


def test_migrate_authenticates_to_the_target(make_server):
    target = make_server(requirepass="secret")
    src = redis.Redis(port=make_server().port)
    src.set("k", "v")
    assert err(src, "MIGRATE", "127.0.0.1", target.port, "k", 0, 1000) == (
        "Target instance replied with error: NOAUTH Authentication required.")
    assert src.execute_command("MIGRATE", "127.0.0.1", target.port, "k", 0, 1000, "AUTH2", "default", "secret")
    assert redis.Redis(port=target.port, password="secret").get("k") == b"v"


def test_migrate_is_logged_as_del(pair):
    source, src, target, _ = pair
    src.set("a", "1")
    src.set("b", "2")
    records = record_journal(source)
    src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 1000, "KEYS", "a", "b")
    assert records == [[(0, [b"DEL", b"a", b"b"])]]


def test_command_getkeys_finds_migrate_keys(r):
    assert r.command_getkeys("MIGRATE", "h", 1, "key1", 0, 5000) == ["key1"]
    assert r.command_getkeys("MIGRATE", "h", 1, "", 0, 5000, "COPY", "AUTH", "KEYS", "KEYS", "a", "b") == ["a", "b"]


def test_migrate_to_redis_relays_its_payload_error(r, redis_ref):
    """A Redis type goes in Redis's DUMP format (a Redis target takes it); a Pion-only value goes in
    Pion's, which a Redis target refuses, and MIGRATE says so (tests/cluster/test_migrate_redis.py)."""
    key = "migrate-to-redis:k"  # redis_ref is shared by the session
    r.set(key, "v")
    assert r.execute_command("MIGRATE", "127.0.0.1", redis_ref.port, key, 0, 1000, "REPLACE") in (True, b"OK")
    target = redis.Redis(port=redis_ref.port)
    assert r.get(key) is None and target.get(key) == b"v"
    target.delete(key)
    r.execute_command("JSON.SET", "doc", "$", "{}")
    message = err(r, "MIGRATE", "127.0.0.1", redis_ref.port, "doc", 0, 1000)
    assert message.startswith("Target instance replied with error: ERR DUMP payload version or checksum are wrong")
    assert "cannot be migrated to a Redis node" in message and r.exists("doc") == 1
