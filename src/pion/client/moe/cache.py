"""``ExpertCache``: the client's own budget of experts, in front of an ``ExpertSource``.

The model's forward asks for the experts one layer routes to (``get_many``); what is resident is
a hit, what a prefetch is still bringing is waited for, the rest is fetched at once (in parallel
on the prefetch threads) and waited for. The time the forward waits is the *stall*, the number
that says whether paging costs tokens per second. ``prefetch`` queues experts a predictor
expects soon; they load in the background while the current layer computes.

Values are whatever ``convert(parts)`` makes of an expert's parts (the transformers adapter
makes torch weights), with ``size(value)`` bytes counted against ``budget_bytes``; an admitted
value is handed to ``store`` and what it returns is kept (the adapter copies the weights into a
slot of its arena and keeps the slot number), and ``release`` gets it back on eviction. The
policy is ``pion.paging``'s (the same one the server and the benchmark use). The experts a
forward is computing with are leased (``get_many`` ... ``done``) and never evicted meanwhile,
even by a prefetch landing on another thread; experts that do not fit are used once, unstored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from pion.client.moe.source import ExpertSource
from pion.paging.policies import DEFAULT_POLICY, make_policy


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    #: demand fetches that found the expert resident because a prefetch brought it
    prefetch_hits: int = 0
    #: demand fetches that waited for a prefetch still under way
    prefetch_late: int = 0
    prefetches: int = 0
    evictions: int = 0
    bypasses: int = 0
    bytes_fetched: int = 0
    stall_s: float = 0.0
    fetch_s: float = 0.0
    trace: list[tuple[int, int]] = field(default_factory=list)

    def as_dict(self) -> dict:
        total = self.hits + self.misses
        out = {k: v for k, v in self.__dict__.items() if k != "trace"}
        out["hit_rate"] = self.hits / total if total else 0.0
        out["stall_ms"] = self.stall_s * 1000
        out["fetch_ms"] = self.fetch_s * 1000
        return out


@dataclass(eq=False)
class _Slot:
    value: object
    nbytes: int
    prefetched: bool = False


class ExpertCache:
    """Experts by ``(layer ordinal, expert)``; ``layers[ordinal]`` is the model's layer index."""

    def __init__(self, source: ExpertSource, layers: list[int], budget_bytes: int,
                 convert: Callable[[dict], object], size: Callable[[object], int], *, top_k: int = 1,
                 policy: str = DEFAULT_POLICY, threads: int = 2, record_trace: bool = False,
                 store: Callable[[object], object] | None = None, release: Callable[[object], None] | None = None) -> None:
        self.source = source
        self.layers = layers
        self.budget = budget_bytes
        self.convert = convert
        self.size = size
        self.store = store or (lambda value: value)
        self.release = release or (lambda stored: None)
        self.in_use: dict[tuple, int] = {}
        self.policy = make_policy(policy)
        self.policy.add_model(0, len(layers), top_k)
        self.slots: dict[tuple, _Slot] = {}
        self.used = 0
        self.pending: dict[tuple, Future] = {}
        self.stats = CacheStats()
        self.record_trace = record_trace
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="pion-moe-fetch")

    # -- demand ----------------------------------------------------------------------------

    def get_many(self, ordinal: int, experts: list[int]) -> list[object]:
        """The values of ``experts`` of one layer, in order (fetching what is not resident):
        stored values for resident experts, converted ones for those used once. They are leased
        until ``done(ordinal, experts)``."""
        keys = [(0, ordinal, e) for e in experts]
        values: dict[tuple, object] = {}
        waits: dict[tuple, Future] = {}
        with self._lock:
            for key in keys:
                self.in_use[key] = self.in_use.get(key, 0) + 1
                self.policy.record(key)
                if self.record_trace:
                    self.stats.trace.append((ordinal, key[2]))
                slot = self.slots.get(key)
                if slot is not None:
                    self.stats.hits += 1
                    if slot.prefetched:
                        self.stats.prefetch_hits += 1
                        slot.prefetched = False
                    values[key] = slot.value
                    continue
                self.stats.misses += 1
                if key in self.pending:
                    self.stats.prefetch_late += 1
                    waits[key] = self.pending[key]
                else:
                    waits[key] = self._start(key, demand=True)
        if waits:
            began = time.perf_counter()
            for key, future in waits.items():
                values[key] = future.result()
            self.stats.stall_s += time.perf_counter() - began
            with self._lock:
                for key in waits:
                    kept = self._keep(key, values[key], protect=frozenset(keys))
                    if kept is not None:
                        values[key] = kept
        return [values[key] for key in keys]

    def done(self, ordinal: int, experts: list[int]) -> None:
        """End the lease ``get_many`` took: these experts may be evicted again."""
        with self._lock:
            for expert in experts:
                key = (0, ordinal, expert)
                left = self.in_use.get(key, 0) - 1
                if left > 0:
                    self.in_use[key] = left
                else:
                    self.in_use.pop(key, None)

    # -- prefetch --------------------------------------------------------------------------

    def prefetch(self, ordinal: int, experts: list[int]) -> int:
        """Start loading experts expected soon that are neither resident nor under way."""
        started = 0
        with self._lock:
            for expert in experts:
                key = (0, ordinal, expert)
                if key in self.slots or key in self.pending:
                    continue
                if not self._admits(key, prefetch=True):
                    continue
                self.stats.prefetches += 1
                future = self._start(key, demand=False)
                future.add_done_callback(lambda f, k=key: self._landed_prefetch(k, f))
                started += 1
        return started

    def _landed_prefetch(self, key: tuple, future: Future) -> None:
        if future.exception() is not None:
            return  # the demand fetch will retry and raise
        with self._lock:
            if key not in self.slots:
                self._keep(key, future.result(), protect=frozenset(), prefetched=True)

    # -- bookkeeping (under the lock) ------------------------------------------------------

    def _start(self, key: tuple, demand: bool) -> Future:
        future = self._pool.submit(self._load, key)
        self.pending[key] = future
        future.add_done_callback(lambda f, k=key: self._forget(k, f))
        return future

    def _forget(self, key: tuple, future: Future) -> None:
        with self._lock:
            if self.pending.get(key) is future:
                del self.pending[key]

    def _load(self, key: tuple) -> object:
        began = time.perf_counter()
        before = self.source.bytes_received
        value = self.convert(self.source.fetch(self.layers[key[1]], key[2]))
        with self._lock:
            self.stats.fetch_s += time.perf_counter() - began
            self.stats.bytes_fetched += self.size(value) if self.source.lane == "local" else (
                self.source.bytes_received - before)
        return value

    def _admits(self, key: tuple, prefetch: bool = False, nbytes: int | None = None,
                protect: frozenset = frozenset()) -> bool:
        victims = self._victims(nbytes if nbytes is not None else self._typical(), protect)
        return victims is not None and self.policy.admits(key, victims, prefetch)

    def _typical(self) -> int:
        return next(iter(self.slots.values())).nbytes if self.slots else 0

    def _victims(self, nbytes: int, protect: frozenset) -> list[tuple] | None:
        if nbytes > self.budget:
            return None
        chosen: list[tuple] = []
        freed = 0
        while self.used - freed + nbytes > self.budget:
            victim = self.policy.victim(lambda k: k in protect or k in chosen or k in self.in_use)
            if victim is None:
                return None
            chosen.append(victim)
            freed += self.slots[victim].nbytes
        return chosen

    def _keep(self, key: tuple, value: object, protect: frozenset, prefetched: bool = False) -> object | None:
        """Store an admitted value (evicting by policy); the stored value, or None (used once)."""
        if key in self.slots:
            return self.slots[key].value
        nbytes = self.size(value)
        victims = self._victims(nbytes, protect | {key})
        if victims is None or (not prefetched and not self.policy.admits(key, victims)):
            self.stats.bypasses += 1
            return None
        for victim in victims:
            self._drop(victim)
            self.stats.evictions += 1
        stored = self.store(value)
        self.slots[key] = _Slot(stored, nbytes, prefetched)
        self.used += nbytes
        self.policy.insert(key)
        return stored

    def _drop(self, key: tuple) -> None:
        slot = self.slots.pop(key)
        self.used -= slot.nbytes
        self.policy.remove(key)
        self.release(slot.value)

    def reset_stats(self) -> None:
        with self._lock:
            self.stats = CacheStats()

    def clear(self) -> None:
        with self._lock:
            for key in list(self.slots):
                if key not in self.in_use:
                    self._drop(key)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.source.close()
