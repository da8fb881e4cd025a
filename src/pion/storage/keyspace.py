"""One logical database: keys to values, absolute expiry times, and change signals.

Values are plain Python objects: ``bytes`` for strings, and one class per container type
(registered in ``TYPE_NAMES``). Every write path calls ``signal(key)``: WATCH invalidation,
waking clients blocked on the key and keyspace events all hang off that one hook, so a command
family cannot forget one of them. Expiry is lazy on access plus an active sweep run by the
server; an expired key is removed through ``on_expired`` so the deletion can be logged.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from pion.protocol.errors import WRONGTYPE, ReplyError

#: Python class of a stored value -> the name TYPE answers. Families register their classes.
TYPE_NAMES: dict[type, str] = {bytes: "string"}


def register_type(cls: type, name: str) -> type:
    TYPE_NAMES[cls] = name
    return cls


def type_name(value: Any) -> str:
    return TYPE_NAMES.get(value.__class__, "none") if value is not None else "none"


def now_ms() -> int:
    return int(time.time() * 1000)


class Database:
    """A keyspace. ``data`` and ``expires`` are public for the commands that scan or swap them."""

    __slots__ = (
        "index",
        "data",
        "expires",
        "watchers",
        "on_signal",
        "on_expired",
        "lru",
        "avg_ttl",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.data: dict[bytes, Any] = {}
        self.expires: dict[bytes, int] = {}
        #: key -> clients that WATCH it; each has ``touch_watched(db, key)``.
        self.watchers: dict[bytes, set[Any]] = {}
        #: called with (db, key) after any modification; the server wires blocking wake-ups here.
        self.on_signal: Callable[[Database, bytes], None] | None = None
        #: called with (db, key) when a key is found expired and removed.
        self.on_expired: Callable[[Database, bytes], None] | None = None
        #: key -> last access time in ms (OBJECT IDLETIME, LRU eviction); kept for touched keys.
        self.lru: dict[bytes, int] = {}
        self.avg_ttl = 0

    # -- reads -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.data)

    def get(self, key: bytes) -> Any:
        """The live value of ``key`` or None; removes it first if its time has passed."""
        if key in self.expires and self.expires[key] <= now_ms():
            self.expire_now(key)
            return None
        return self.data.get(key)

    def get_typed(self, key: bytes, cls: type) -> Any:
        """The value if it is a ``cls``; None if absent; WRONGTYPE if it is another type."""
        value = self.get(key)
        if value is None or value.__class__ is cls:
            return value
        raise ReplyError(WRONGTYPE)

    def exists(self, key: bytes) -> bool:
        return self.get(key) is not None

    def ttl_ms(self, key: bytes) -> int | None:
        """Absolute expiry time in ms, or None for a persistent key."""
        return self.expires.get(key)

    def keys(self) -> Iterator[bytes]:
        """Live keys (expired ones are skipped, not removed: iteration must not mutate)."""
        now = now_ms()
        expires = self.expires
        for key in self.data:
            when = expires.get(key)
            if when is None or when > now:
                yield key

    def random_key(self) -> bytes | None:
        for _ in range(100):
            if not self.data:
                return None
            key = random.choice(list(self.data)) if len(self.data) < 64 else _sample_key(self.data)
            if self.get(key) is not None:
                return key
        return next(self.keys(), None)

    # -- writes ------------------------------------------------------------------------

    def set(self, key: bytes, value: Any, keep_ttl: bool = False) -> None:
        """Store ``value``. A plain SET clears the TTL, as in Redis."""
        self.data[key] = value
        if not keep_ttl and key in self.expires:
            del self.expires[key]
        self.signal(key)

    def delete(self, key: bytes) -> bool:
        if key in self.expires and self.expires[key] <= now_ms():
            self.expire_now(key)
            return False
        if key not in self.data:
            return False
        self._remove(key)
        self.signal(key)
        return True

    def set_expire(self, key: bytes, when_ms: int) -> None:
        self.expires[key] = when_ms
        self.signal(key)

    def persist(self, key: bytes) -> bool:
        if self.expires.pop(key, None) is None:
            return False
        self.signal(key)
        return True

    def flush(self) -> None:
        keys = list(self.data)
        self.data.clear()
        self.expires.clear()
        self.lru.clear()
        for key in keys:
            self.signal(key)

    def signal(self, key: bytes) -> None:
        """Tell watchers and blocked clients that ``key`` changed."""
        watchers = self.watchers.get(key)
        if watchers:
            for client in watchers:
                client.touch_watched(self, key)
        if self.on_signal is not None:
            self.on_signal(self, key)

    def expire_now(self, key: bytes) -> None:
        """Remove a key whose time has passed and report it (logged as DEL by the server)."""
        self._remove(key)
        self.signal(key)
        if self.on_expired is not None:
            self.on_expired(self, key)

    def _remove(self, key: bytes) -> None:
        del self.data[key]
        self.expires.pop(key, None)
        self.lru.pop(key, None)

    # -- active expiry -----------------------------------------------------------------

    def sweep_expired(self, samples: int = 20, max_rounds: int = 16) -> int:
        """Redis's active expire cycle: sample keys with a TTL, repeat while >25% were stale."""
        removed = 0
        for _ in range(max_rounds):
            if not self.expires:
                break
            now = now_ms()
            batch = _sample_keys(self.expires, samples)
            stale = [key for key in batch if self.expires.get(key, now + 1) <= now]
            for key in stale:
                if key in self.data:
                    self.expire_now(key)
            removed += len(stale)
            if len(stale) * 4 <= len(batch):
                break
        return removed


def _sample_key(mapping: dict[bytes, Any]) -> bytes:
    return _sample_keys(mapping, 1)[0]


def _sample_keys(mapping: dict[bytes, Any], count: int) -> list[bytes]:
    """A cheap random sample: a random window of the dict's iteration order."""
    size = len(mapping)
    if size <= count:
        return list(mapping)
    start = random.randrange(size - count + 1)
    out = []
    for i, key in enumerate(mapping):
        if i >= start:
            out.append(key)
            if len(out) == count:
                break
    return out
