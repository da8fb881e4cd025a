"""Used-memory accounting and eviction (``maxmemory`` and its policies).

Accounting: Python cannot say how many bytes a dict of lists really holds without walking it,
so each key's size is *estimated* the way ``MEMORY USAGE`` does: exact for strings, and for a
container its length times the mean size of a few sampled elements. The estimate of a key is
refreshed whenever a logged write touches it (the journal sees every write's keys), so the total
stays current without scanning. Arena blobs are counted separately (``ArenaStore.live_bytes``).

Eviction follows Redis: sample ``maxmemory-samples`` keys per database (all keys, or only keys
with a TTL for ``volatile-*``), keep the best candidates in a pool of 16, evict the best.
LRU and LFU read the access data ``Database.get`` keeps (``lru`` stamps, ``lfu_counter``).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

POOL_SIZE = 16
#: bytes a key costs beyond its name and value objects, measured with 16-byte keys and 100-byte
#: values (docs/durability.md, "maxmemory and resident memory"): the int objects of its LRU stamp
#: and of this accounting's entry (64), and about 72 bytes in each of three dicts (the keyspace,
#: the LRU stamps, this table): 44 after a fresh fill, 88 after eviction churn, since a dict
#: keeps its size after deletions. It was 96 for all of it, which left maxmemory 100mb at
#: 366 MB resident (505 with appendfsync no): the estimate missed two thirds of every key.
KEY_OVERHEAD = 280

_SIZERS: dict[type, Callable[[Any], int]] = {}


# -- size estimates ------------------------------------------------------------------------------


def register_sizer(cls: type, sizer: Callable[[Any], int]) -> None:
    """An exact or cheaper size function for a value class (default: sampled walk)."""
    _SIZERS[cls] = sizer


def estimate(value: Any, samples: int = 5) -> int:
    """The approximate bytes a value holds (O(samples), not O(size))."""
    sizer = _SIZERS.get(value.__class__)
    if sizer is not None:
        return sizer(value)
    return _estimate(value, samples, 2)


def allocated(size: int) -> int:
    """What the allocator hands out for an object of ``size`` bytes: pymalloc's 16-byte size
    classes up to 512 bytes, malloc's 16-byte chunks with their 16-byte header above."""
    return (size + 15) & ~15 if size <= 512 else ((size + 31) & ~15)


def _estimate(value: Any, samples: int, depth: int) -> int:
    cls = value.__class__
    if cls is bytes or cls is str:
        return allocated(sys.getsizeof(value))
    if cls is int or cls is float or value is None:
        return sys.getsizeof(value)
    if cls is memoryview:
        return 200  # the view itself; its bytes are arena residency
    size = sys.getsizeof(value)
    if depth <= 0:
        return size
    if isinstance(value, dict):
        return size + _sample_total(value.items(), len(value), samples, depth)
    if isinstance(value, (list, tuple, set, frozenset)) or _is_sized_iterable(value):
        try:
            count = len(value)
        except TypeError:
            return size
        return size + _sample_total(value, count, samples, depth)
    fields = getattr(value, "__dict__", None)
    if fields is None:
        fields = {name: getattr(value, name) for name in _slot_names(cls) if hasattr(value, name)}
    return size + sum(_estimate(item, samples, depth - 1) for item in fields.values())


def _is_sized_iterable(value: Any) -> bool:
    return hasattr(value, "__len__") and hasattr(value, "__iter__") and not hasattr(value, "__dict__")


def _sample_total(items: Any, count: int, samples: int, depth: int) -> int:
    if count == 0:
        return 0
    total = 0
    taken = 0
    for item in items:
        total += _estimate(item, samples, depth - 1)
        taken += 1
        if taken >= samples:
            break
    return total * count // max(taken, 1)


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return names


def key_size(key: bytes, value: Any, samples: int = 5) -> int:
    return KEY_OVERHEAD + allocated(sys.getsizeof(key)) + estimate(value, samples)


class Accounting:
    """Per-key size estimates and their total, kept current from the keys each write touched."""

    def __init__(self, db_count: int) -> None:
        self.sizes: list[dict[bytes, int]] = [{} for _ in range(db_count)]
        self.used = 0

    def rescan(self, dbs: list[Any]) -> None:
        """Recount everything (at start, after a reload, or a FLUSH/SWAPDB)."""
        self.sizes = [{key: key_size(key, value) for key, value in db.data.items()} for db in dbs]
        self.used = sum(sum(sizes.values()) for sizes in self.sizes)

    def update(self, db: Any, key: bytes) -> None:
        sizes = self.sizes[db.index]
        old = sizes.get(key, 0)
        value = db.data.get(key)
        if value is None:
            if old:
                del sizes[key]
                self.used -= old
            return
        new = key_size(key, value)
        sizes[key] = new
        self.used += new - old


# -- eviction ----------------------------------------------------------------------------------


class Evictor:
    """Chooses the next key to evict under a policy (Redis's sampling + pool)."""

    def __init__(self) -> None:
        self.pool: list[tuple[float, int, bytes]] = []

    def choose(self, dbs: list[Any], policy: str, samples: int) -> tuple[int, bytes] | None:
        """The next victim, or None when no key qualifies (a sample may miss: try a few times)."""
        volatile = policy.startswith("volatile-")
        if not any(db.expires if volatile else db.data for db in dbs):
            return None
        for _ in range(8):
            found = self._choose_once(dbs, policy, samples, volatile)
            if found is not None:
                return found
        return None

    def _choose_once(self, dbs: list[Any], policy: str, samples: int, volatile: bool) -> tuple[int, bytes] | None:
        if policy.endswith("-random"):
            db = random.choice([db for db in dbs if (db.expires if volatile else db.data)])
            keys = _sample(db, volatile, 1)
            return (db.index, keys[0]) if keys and keys[0] in db.data else None
        for db in dbs:
            if db.expires if volatile else db.data:
                for key in _sample(db, volatile, samples):
                    self._offer(_score(db, key, policy), db.index, key)
        while self.pool:
            _, index, key = self.pool.pop()
            db = dbs[index]
            if key in db.data and (not volatile or key in db.expires):
                return index, key
        return None

    def _offer(self, score: float, index: int, key: bytes) -> None:
        pool = self.pool
        for i, (_, other_index, other_key) in enumerate(pool):
            if other_index == index and other_key == key:
                pool[i] = (score, index, key)
                pool.sort()
                return
        if len(pool) < POOL_SIZE:
            pool.append((score, index, key))
            pool.sort()
        elif score > pool[0][0]:
            pool[0] = (score, index, key)
            pool.sort()


def _sample(db: Any, volatile: bool, count: int) -> list[bytes]:
    """Random keys in O(count): the keyspace's TTL pool or its SCAN table."""
    if volatile:
        return db.sample_expiring(count)
    table = db.key_table()
    out = []
    for _ in range(count):
        key = table.random_key()
        if key is not None:
            out.append(key)
    return out


def _score(db: Any, key: bytes, policy: str) -> float:
    """Higher is evicted first: idle time, inverse frequency, or nearness of expiry."""
    if policy.endswith("-lru"):
        return float(db.lru_clock - db.lru.get(key, 0))
    if policy.endswith("-lfu"):
        return float(255 - db.lfu_counter(key))
    return float(-db.expires.get(key, 0))  # volatile-ttl: soonest expiry first
