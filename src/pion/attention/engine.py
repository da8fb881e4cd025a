"""The Stage-2 engine: the warm tier of every tenant and the counters ``ATTEND.PREFIX.INFO`` shows.

The server keeps one (``server.parts.attention``). Its hooks are plain methods (``info``,
``metrics``, ``reset_stats``, ``sweep``, ``set_budget``) so a component wrapper only wires them.
Keys of the tier are ``(tenant, sid, layer)``: tenants never share a view.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pion.attention.query import Result
from pion.attention.tier import PrefixView, WarmTier

COUNTERS = ("queries", "dense_queries", "sparse_queries", "fused_queries", "coldmisses", "views_built",
            "bytes_in", "bytes_out")


class AttentionEngine:
    def __init__(self, budget: int = 0) -> None:
        self.tier = WarmTier(budget)
        self.counts: Counter[str] = Counter()
        self.attended_tokens = 0.0
        self.prefix_tokens = 0

    def set_budget(self, budget: int) -> list:
        """Follow the configured budget (CONFIG SET); returns the keys demoted."""
        return self.tier.set_budget(budget) if budget != self.tier.budget else []

    def record(self, result: Result, *, sparse: bool, fused: bool, bytes_in: int, bytes_out: int) -> None:
        counts = self.counts
        counts["queries"] += 1
        counts["sparse_queries" if sparse else "dense_queries"] += 1
        counts["fused_queries"] += int(fused)
        counts["bytes_in"] += bytes_in
        counts["bytes_out"] += bytes_out
        self.attended_tokens += result.attended
        self.prefix_tokens += result.prefix_tokens

    def sweep(self, is_current: Callable[[object, PrefixView], bool]) -> int:
        """Forget warm views whose stored rows changed or went away; how many."""
        stale = [key for key, view in self.tier.entries.items() if not is_current(key, view)]
        for key in stale:
            self.tier.drop(key)
        return len(stale)

    def info(self) -> list[tuple[str, object]]:
        tier = self.tier
        fraction = self.attended_tokens / self.prefix_tokens if self.prefix_tokens else 0.0
        return [
            ("warm_views", len(tier)), ("cold_views", len(tier.cold)), ("warm_bytes", tier.nbytes),
            ("warm_budget", tier.budget), ("demotions", tier.demotions),
            ("rehydrates", tier.rehydrates), *((name, self.counts[name]) for name in COUNTERS),
            ("attended_tokens", int(self.attended_tokens)), ("prefix_tokens", self.prefix_tokens),
            ("attended_fraction", f"{fraction:.6f}"),
        ]

    def metrics(self) -> dict[str, object]:
        return dict(self.info())

    def reset_stats(self) -> None:
        self.counts.clear()
        self.attended_tokens = 0.0
        self.prefix_tokens = 0
        self.tier.demotions = self.tier.rehydrates = 0
