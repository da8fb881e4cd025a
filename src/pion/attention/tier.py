"""The warm tier: prefixes ready for attention, bounded by a byte budget, and the cold registry.

A ``PrefixView`` is one (session, layer) prefix as the kernels read it: ``k, v [H_kv, N, D]``
float32 (head-major: the stored rows decoded and transposed) and its block summaries. ``owned``
counts the bytes it holds (summaries are counted apart): that is what the budget bounds.

When a new view does not fit, the least recently used ones are **demoted**: dropped from memory,
their keys remembered in the cold registry, so a query on them fails fast (``-COLDMISS`` on the
wire) until the caller rehydrates them. The stored rows stay in the V-store throughout: nothing
is lost, only the ready-to-use copy. Pure bookkeeping: the server decides what a key means.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.attention.select import BlockSummary

#: keys the cold registry remembers (the oldest are forgotten first: they then read as never loaded)
MAX_COLD = 65536


@dataclass(slots=True, eq=False)
class PrefixView:
    """A prefix ready for the kernels (never changed once built, except for added summaries)."""

    k: np.ndarray
    v: np.ndarray
    owned: int
    #: what the rows were read from (the server compares it to tell stale views)
    source: Any = None
    #: the V-store namespace the rows belong to
    origin: bytes = b""
    #: ``(block size, first token) -> summary``
    summaries: dict[tuple[int, int], BlockSummary] = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return self.k.shape[1]

    @property
    def kv_heads(self) -> int:
        return self.k.shape[0]

    @property
    def head_dim(self) -> int:
        return self.k.shape[2]

    @property
    def nbytes(self) -> int:
        return self.owned + sum(s.nbytes for s in self.summaries.values())



class WarmTier:
    """LRU of ``key -> PrefixView`` under ``budget`` bytes (0 = no limit), plus the cold keys."""

    def __init__(self, budget: int = 0) -> None:
        self.budget = budget
        self.entries: OrderedDict[Any, PrefixView] = OrderedDict()
        self.cold: OrderedDict[Any, bytes] = OrderedDict()
        self.nbytes = 0
        self.demotions = 0
        self.rehydrates = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key) -> PrefixView | None:
        """The warm view (now the most recently used), or None."""
        view = self.entries.get(key)
        if view is not None:
            self.entries.move_to_end(key)
        return view

    def is_cold(self, key) -> bool:
        return key in self.cold

    def bytes_of(self, owns: Callable[[Any], bool]) -> int:
        """The bytes of the warm views whose key ``owns`` accepts (a tenant's, for its quota)."""
        return sum(view.nbytes for key, view in self.entries.items() if owns(key))

    def put(self, key, view: PrefixView) -> list:
        """Keep ``view`` warm under ``key``; returns the keys demoted to make room.

        A view larger than the whole budget is not kept (it served its query; the next one
        builds it again) and its key is not cold: it was never demoted.
        """
        if key in self.cold:
            self.rehydrates += 1
        self.drop(key)
        if self.budget and view.nbytes > self.budget:
            return []
        demoted = self._make_room(view.nbytes)
        self.entries[key] = view
        self.nbytes += view.nbytes
        return demoted

    def add_summary(self, key, view: PrefixView, summary: BlockSummary, start: int = 0) -> None:
        """Keep a summary computed later (another block size) with a warm view, counted."""
        if (summary.block, start) in view.summaries:
            return
        view.summaries[(summary.block, start)] = summary
        if self.entries.get(key) is view:
            self.nbytes += summary.nbytes
            self.entries.move_to_end(key)
            self._make_room(0, keep=key)

    def drop(self, key) -> bool:
        """Forget ``key`` entirely (its rows changed or went away)."""
        self.cold.pop(key, None)
        view = self.entries.pop(key, None)
        if view is None:
            return False
        self.nbytes -= view.nbytes
        return True

    def drop_where(self, match) -> int:
        """Forget every key for which ``match(key)`` is true; how many were warm."""
        warm = [key for key in self.entries if match(key)]
        for key in warm:
            self.drop(key)
        for key in [key for key in self.cold if match(key)]:
            del self.cold[key]
        return len(warm)

    def set_budget(self, budget: int) -> list:
        self.budget = budget
        return self._make_room(0)

    def _make_room(self, incoming: int, keep=None) -> list:
        demoted = []
        while self.budget and self.entries and self.nbytes + incoming > self.budget:
            key = next(iter(self.entries))
            if key == keep:
                if len(self.entries) == 1:
                    break
                self.entries.move_to_end(key)
                continue
            view = self.entries.pop(key)
            self.nbytes -= view.nbytes
            self.cold[key] = view.origin
            self.demotions += 1
            demoted.append(key)
        while len(self.cold) > MAX_COLD:
            self.cold.popitem(last=False)
        return demoted
