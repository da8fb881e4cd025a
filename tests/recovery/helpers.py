"""Helpers for durability tests: a thread server that restarts on the same data directory, and a
canonical dump of a whole keyspace to compare a live server with a recovered one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis

from tests.support.servers import ThreadServer, make_settings


class DirServer:
    """A ThreadServer bound to one data directory; ``restart`` stops it and starts a new one there."""

    def __init__(self, datadir: Path, **overrides: Any) -> None:
        self.datadir = datadir
        datadir.mkdir(parents=True, exist_ok=True)
        self.overrides = overrides
        self.thread: ThreadServer | None = None

    def start(self, **more: Any) -> DirServer:
        self.overrides.update(more)
        self.thread = ThreadServer(make_settings(self.datadir, **self.overrides)).start()
        return self

    @property
    def server(self):
        return self.thread.server

    @property
    def port(self) -> int:
        return self.thread.port

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=20, **kwargs)

    def call(self, fn, *args):
        return self.thread.call(fn, *args)

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

    def restart(self, **more: Any) -> DirServer:
        self.stop()
        return self.start(**more)


def full_dump(client: redis.Redis, databases: int = 16) -> dict:
    """Every key of every database in a canonical, order-independent form, with its expiry."""
    out: dict = {}
    for db in range(databases):
        client.execute_command("SELECT", db)
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            out[(db, key)] = (kind, _value(client, kind, key), client.pexpiretime(key))
    client.execute_command("SELECT", 0)
    return out


def _value(client: redis.Redis, kind: str, key: bytes) -> Any:
    if kind == "string":
        return client.get(key)
    if kind == "hash":
        return client.hgetall(key)
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "set":
        return sorted(client.smembers(key))
    if kind == "zset":
        return client.zrange(key, 0, -1, withscores=True)
    if kind == "stream":
        return client.xrange(key)
    return client.dump(key)


def populate(r: redis.Redis, n: int = 50) -> None:
    for i in range(n):
        r.set(f"s{i}", f"value{i}")
    r.incr("counter")
    r.incrby("counter", 41)
    r.hset("h", mapping={"a": "1", "b": "2"})
    r.lpush("l", "x", "y", "z")
    r.sadd("set", "m1", "m2")
    r.zadd("z", {"one": 1.0, "two": 2.5})
    r.set("ttl", "v", ex=1000)
    r.delete("s3")
    r.execute_command("SELECT", 2)
    r.set("in-db-2", "yes")
    r.execute_command("SELECT", 0)


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")
