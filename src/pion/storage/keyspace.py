"""One logical database: keys to values, absolute expiry times, and change signals.

Values are plain Python objects: ``bytes`` for strings, and one class per container type
(registered in ``TYPE_NAMES``). Every write path calls ``signal(key)``: WATCH invalidation,
waking clients blocked on the key and keyspace events all hang off that one hook, so a command
family cannot forget one of them. Expiry is lazy on access plus an active sweep run by the
server; an expired key is removed through ``on_expired`` so the deletion can be logged.
Reads through ``get`` stamp the key's access time (or bump its LFU counter under an LFU
policy); ``peek`` reads without touching. SCAN and RANDOMKEY walk ``KeyTable`` (storage.scan),
kept in step by ``set``/``_remove`` once built.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from pion.protocol.errors import WRONGTYPE, ReplyError
from pion.storage.scan import KeyTable
from pion.storage.slot_index import SlotIndex

#: the counter a key starts with under an LFU policy (Redis's LFU_INIT_VAL)
LFU_INIT_VAL = 5
#: (value, expire ms or None, lru stamp, lfu word) as ``take`` hands a key to ``put``
Entry = tuple[Any, int | None, int | None, int | None]

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
        "id",
        "data",
        "expires",
        "watchers",
        "on_signal",
        "on_expired",
        "on_new",
        "on_reset",
        "lru",
        "avg_ttl",
        "lru_clock",
        "lfu",
        "lfu_log_factor",
        "lfu_decay_time",
        "scan_table",
        "slot_keys",
        "_expiring",
        "loading",
        "read_stats",
    )

    def __init__(self, index: int, db_id: int | None = None) -> None:
        #: the number SELECT uses; ``id`` is unique server-wide (tenants have their own dbs)
        self.index = index
        self.id = index if db_id is None else db_id
        self.data: dict[bytes, Any] = {}
        self.expires: dict[bytes, int] = {}
        #: key -> clients that WATCH it; each has ``touch_watched(db, key)``.
        self.watchers: dict[bytes, set[Any]] = {}
        #: called with (db, key) after any modification; the server wires blocking wake-ups here.
        self.on_signal: Callable[[Database, bytes], None] | None = None
        #: called with (db, key) when a key is found expired and removed.
        self.on_expired: Callable[[Database, bytes], None] | None = None
        #: called with (db, key) when ``set`` creates a key (the 'n' keyspace event).
        self.on_new: Callable[[Database, bytes], None] | None = None
        #: called with (db, "flush" | "swap") after ``flush`` or ``swap_contents`` replaced every
        #: key at once (the search engine drops or rebuilds the database's indexes)
        self.on_reset: Callable[[Database, str], None] | None = None
        #: key -> last access time in ms (OBJECT IDLETIME, LRU eviction); kept for touched keys.
        self.lru: dict[bytes, int] = {}
        self.avg_ttl = 0
        #: the ms stamp written into ``lru`` on access; the server cron refreshes it (hz), a
        #: shared int per tick keeps ``lru`` cheap (Redis's LRU clock is coarser: 1 s)
        self.lru_clock = now_ms()
        #: key -> (minutes << 8 | counter) while an LFU maxmemory-policy is active, else None
        self.lfu: dict[bytes, int] | None = None
        self.lfu_log_factor = 10
        self.lfu_decay_time = 1
        #: the bucketed key index behind SCAN and RANDOMKEY, built on first use
        self.scan_table: KeyTable | None = None
        #: per-slot key lists (``pion.storage.slot_index``), built by the first ``slot_index()``
        self.slot_keys: SlotIndex | None = None
        #: keys that have (or had) a TTL, for O(1) sampling; stale entries are dropped lazily
        self._expiring: list[bytes] = []
        #: True while the log is replayed: nothing expires (Redis's keyIsExpired while loading),
        #: so a replayed PERSIST or SET ... KEEPTTL finds the key the original command found
        self.loading = False
        #: while a read-only command runs, the object whose ``stat_keyspace_hits``/``_misses``
        #: count its lookups (Redis's lookupKeyRead; writes look up without stats); else None
        self.read_stats: Any = None

    # -- reads -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.data)

    def get(self, key: bytes) -> Any:
        """The live value of ``key`` or None; removes it first if its time has passed.

        Counts as an access (OBJECT IDLETIME/FREQ, eviction); ``peek`` does not."""
        if key in self.expires and self.expires[key] <= now_ms() and not self.loading:
            self.expire_now(key)
            if self.read_stats is not None:
                self._count_read(False)
            return None
        value = self.data.get(key)
        if value is not None:
            if self.lfu is None:
                self.lru[key] = self.lru_clock
            else:
                self._lfu_touch(key)
        if self.read_stats is not None:
            self._count_read(value is not None)
        return value

    def _count_read(self, hit: bool) -> None:
        if hit:
            self.read_stats.stat_keyspace_hits += 1
        else:
            self.read_stats.stat_keyspace_misses += 1

    def peek(self, key: bytes) -> Any:
        """Like ``get`` without touching the access time (Redis's LOOKUP_NOTOUCH)."""
        if key in self.expires and self.expires[key] <= now_ms() and not self.loading:
            self.expire_now(key)
            value = None
        else:
            value = self.data.get(key)
        if self.read_stats is not None:
            self._count_read(value is not None)
        return value

    def get_typed(self, key: bytes, cls: type) -> Any:
        """The value if it is a ``cls``; None if absent; WRONGTYPE if it is another type."""
        value = self.get(key)
        if value is None or value.__class__ is cls:
            return value
        raise ReplyError(WRONGTYPE)

    def exists(self, key: bytes) -> bool:
        return self.peek(key) is not None

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

    def key_table(self) -> KeyTable:
        """The SCAN index, (re)built when missing or out of step with ``data`` (a write that
        went around ``set``/``delete``); rebuilding keeps cursors valid."""
        table = self.scan_table
        if table is None or len(table) != len(self.data):
            table = self.scan_table = KeyTable(self.data)
        return table

    def slot_index(self) -> SlotIndex:
        """The keys by hash slot, (re)built when missing or out of step with ``data``."""
        index = self.slot_keys
        if index is None or index.total != len(self.data):
            index = self.slot_keys = SlotIndex(self.data)
        return index

    def keys_in_slot(self, slot: int, limit: int | None = None) -> list[bytes]:
        """The live keys of hash ``slot`` (expired ones not yet removed are skipped), at most ``limit``."""
        now = now_ms()
        expires = self.expires
        out = []
        for key in self.slot_index().keys(slot):
            when = expires.get(key)
            if when is None or when > now:
                out.append(key)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def random_key(self) -> bytes | None:
        """A random live key (expired ones met on the way are removed, as in Redis)."""
        for _ in range(100):
            key = self.key_table().random_key()
            if key is None:
                return None
            if self.peek(key) is not None:
                return key
        return next(self.keys(), None)

    # -- access tracking (OBJECT IDLETIME / FREQ, eviction) ----------------------------

    def apply_settings(self, settings: Any) -> None:
        """Follow ``maxmemory-policy``: LFU counters replace LRU stamps under an LFU policy."""
        lfu = "lfu" in getattr(settings, "maxmemory_policy", "")
        if lfu and self.lfu is None:
            self.lfu = {}
        elif not lfu:
            self.lfu = None
        extra = dict(getattr(settings, "extra", ()))
        self.lfu_log_factor = _int_or(extra.get("lfu-log-factor"), 10)
        self.lfu_decay_time = _int_or(extra.get("lfu-decay-time"), 1)

    def idle_ms(self, key: bytes) -> int:
        return max(0, now_ms() - self.lru.get(key, self.lru_clock))

    def lfu_counter(self, key: bytes) -> int:
        """The decayed LFU counter (OBJECT FREQ); LFU_INIT_VAL for a key never counted."""
        word = self.lfu.get(key) if self.lfu is not None else None
        return LFU_INIT_VAL if word is None else self._lfu_decayed(word)

    def set_access(self, key: bytes, idle_ms: int | None = None, freq: int | None = None) -> None:
        """RESTORE IDLETIME / FREQ: each applies only under the matching policy, as in Redis."""
        if self.lfu is not None:
            if freq is not None:
                self.lfu[key] = (_lfu_minutes(self.lru_clock) << 8) | freq
        elif idle_ms is not None:
            self.lru[key] = now_ms() - idle_ms

    def _lfu_decayed(self, word: int) -> int:
        elapsed = (_lfu_minutes(self.lru_clock) - (word >> 8)) % 65536
        periods = elapsed // self.lfu_decay_time if self.lfu_decay_time > 0 else 0
        return max(0, (word & 255) - periods)

    def _lfu_touch(self, key: bytes) -> None:
        """Redis's LFULogIncr: the counter grows with probability 1/((c-5)*factor+1)."""
        lfu = self.lfu
        word = lfu.get(key)  # type: ignore[union-attr]
        counter = LFU_INIT_VAL if word is None else self._lfu_decayed(word)
        if counter < 255:
            base = max(counter - LFU_INIT_VAL, 0)
            if random.random() < 1.0 / (base * self.lfu_log_factor + 1):
                counter += 1
        lfu[key] = (_lfu_minutes(self.lru_clock) << 8) | counter  # type: ignore[index]

    # -- writes ------------------------------------------------------------------------

    def set(self, key: bytes, value: Any, keep_ttl: bool = False) -> None:
        """Store ``value``. A plain SET clears the TTL, as in Redis."""
        data = self.data
        if key not in data:
            if self.scan_table is not None:
                self.scan_table.add(key)
            if self.slot_keys is not None:
                self.slot_keys.add(key)
            if self.lfu is not None:
                self.lfu[key] = (_lfu_minutes(self.lru_clock) << 8) | LFU_INIT_VAL
            data[key] = value
            if self.on_new is not None:
                self.on_new(self, key)
        elif self.lfu is not None:
            self._lfu_touch(key)
        data[key] = value
        if self.lfu is None:
            self.lru[key] = self.lru_clock
        if not keep_ttl and key in self.expires:
            del self.expires[key]
        self.signal(key)

    def delete(self, key: bytes) -> bool:
        if key in self.expires and self.expires[key] <= now_ms() and not self.loading:
            self.expire_now(key)
            return False
        if key not in self.data:
            return False
        self._remove(key)
        self.signal(key)
        return True

    def set_expire(self, key: bytes, when_ms: int) -> None:
        if key not in self.expires:
            self._expiring.append(key)
        self.expires[key] = when_ms
        self.signal(key)

    def take(self, key: bytes) -> Entry:
        """Remove a live key whatever its TTL and hand it over whole (RENAME, MOVE)."""
        entry = (self.data[key], self.expires.get(key), self.lru.get(key),
                 self.lfu.get(key) if self.lfu is not None else None)
        self._remove(key)
        self.signal(key)
        return entry

    def put(self, key: bytes, entry: Entry) -> None:
        """Store a key taken with ``take``, keeping its TTL and access data."""
        value, when, stamp, word = entry
        self.set(key, value)
        if when is not None:
            self.set_expire(key, when)
        if stamp is not None and self.lfu is None:
            self.lru[key] = stamp
        if word is not None and self.lfu is not None:
            self.lfu[key] = word

    def persist(self, key: bytes) -> bool:
        if self.expires.pop(key, None) is None:
            return False
        self.signal(key)
        return True

    def flush(self) -> None:
        """Drop every key. Only watched keys are signalled (not every key: O(watched)); the
        FLUSHDB/FLUSHALL handlers also signal the keys clients are blocked on."""
        watched = [key for key in self.watchers if key in self.data]
        self.data.clear()
        self.expires.clear()
        self.lru.clear()
        if self.lfu is not None:
            self.lfu.clear()
        self.scan_table = None
        self.slot_keys = None
        self._expiring.clear()
        self.avg_ttl = 0
        for key in watched:
            self.signal(key)
        if self.on_reset is not None:
            self.on_reset(self, "flush")

    def swap_contents(self, other: Database) -> None:
        """SWAPDB: exchange keys, TTLs and access data; watchers, hooks and index stay put.
        Watched keys present on either side are signalled, as Redis's touchAllWatchedKeysInDb:
        a watcher whose key only turns from missing or stale into stale sees no change."""
        mine = {key: key in self.data for key in self.watchers if key in self.data or key in other.data}
        theirs = {key: key in other.data for key in other.watchers if key in other.data or key in self.data}
        for name in ("data", "expires", "lru", "lfu", "scan_table", "slot_keys", "_expiring", "avg_ttl"):
            value = getattr(self, name)
            setattr(self, name, getattr(other, name))
            setattr(other, name, value)
        for db, keys in ((self, mine), (other, theirs)):
            for key, existed in keys.items():
                db._signal_swapped(key, existed)
        for db in (self, other):
            if db.on_reset is not None:
                db.on_reset(db, "swap")

    def _signal_swapped(self, key: bytes, existed: bool) -> None:
        present = key in self.data
        when = self.expires.get(key) if present else None
        stale = when is not None and when <= now_ms()
        for client in self.watchers.get(key, ()):
            swapped = getattr(client, "swapped_watched", None)
            if swapped is not None:
                swapped(self, key, existed, present, stale)
            else:
                client.touch_watched(self, key)
        if self.on_signal is not None:
            self.on_signal(self, key)

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
        if self.lfu is not None:
            self.lfu.pop(key, None)
        if self.scan_table is not None:
            self.scan_table.discard(key)
        if self.slot_keys is not None:
            self.slot_keys.discard(key)

    # -- active expiry -----------------------------------------------------------------

    def sweep_expired(self, samples: int = 20, max_rounds: int = 16) -> int:
        """Redis's active expire cycle: sample keys with a TTL, repeat while >25% were stale."""
        removed = 0
        for _ in range(max_rounds):
            if not self.expires:
                break
            now = now_ms()
            batch = self.sample_expiring(samples)
            stale = [key for key in batch if self.expires.get(key, now + 1) <= now]
            for key in stale:
                if key in self.data:
                    self.expire_now(key)
            removed += len(stale)
            if len(stale) * 4 <= len(batch):
                break
        return removed


    def sample_expiring(self, count: int) -> list[bytes]:
        """Up to ``count`` distinct random keys with a TTL, in O(count) amortized.

        ``_expiring`` may hold keys whose TTL is gone (dropped when drawn) and is rebuilt when
        it falls out of step with ``expires`` (a write that went around ``set_expire``)."""
        expires = self.expires
        pool = self._expiring
        if len(pool) < len(expires) or len(pool) > 2 * len(expires) + 64:
            pool[:] = expires
        if len(expires) <= count:
            return list(expires)
        picked: dict[bytes, None] = {}
        for _ in range(4 * count):
            if len(picked) >= count or not pool:
                break
            i = random.randrange(len(pool))
            key = pool[i]
            if key in expires:
                picked[key] = None
            else:
                pool[i] = pool[-1]
                pool.pop()
        if len(picked) < count:  # unlucky or out of step: start from a fresh copy next time
            pool[:] = expires
        return list(picked)


def _lfu_minutes(ms: int) -> int:
    return (ms // 60000) & 0xFFFF


def _int_or(raw: Any, default: int) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return default

