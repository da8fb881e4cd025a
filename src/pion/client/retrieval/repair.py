"""Repair of a composed prompt: recompute a few chunk tokens so the chunks see each other.

Each chunk's K/V was computed after the stub only; composed behind other chunks, its tokens
never attended to them. Two published repairs, both here, both run through the model's own
forward on the composed cache (``run_in_place``: the chosen tokens at their positions, each
attending to everything before it, their new K/V written over the stale rows layer by layer):

- **first k** (EPIC / LegoLink, arXiv 2410.15332): recompute the first ``k`` tokens of every
  chunk, which otherwise act as a spurious attention sink at each chunk start. O(k x chunks).
- **deviation** (CacheBlend, arXiv 2405.16444; LMCache ``blend_recompute_ratio 0.15``,
  ``blend_check_layers [1]``): one forward of *all* chunk tokens through the first layers, up
  to ``check_layer``, which recomputes those layers exactly; the ``ratio`` of tokens whose V
  on ``check_layer`` moved most from the cached V (the high-KV-deviation tokens) are then
  recomputed through every layer. As LMCache does, deviation is measured on V.

Both can be combined: the first-k tokens are always recomputed and count toward the ratio's
budget, which the most deviating other tokens fill.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Repair:
    """What to recompute in a composed prompt (see the module doc)."""

    #: recompute the first ``first_k`` tokens of every composed chunk (EPIC)
    first_k: int = 0
    #: recompute this fraction of all chunk tokens, those whose V deviates most (CacheBlend)
    ratio: float = 0.0
    #: the attention layer (index among attention layers) whose V deviation picks the tokens
    check_layer: int = 1

    def __post_init__(self) -> None:
        if self.first_k < 0:
            raise ValueError("Repair.first_k must be >= 0")
        if not 0.0 <= self.ratio <= 1.0:
            raise ValueError("Repair.ratio must be in [0, 1]")
        if self.check_layer < 0:
            raise ValueError("Repair.check_layer must be >= 0")

    @classmethod
    def epic(cls, k: int = 16) -> Repair:
        return cls(first_k=k)

    @classmethod
    def cacheblend(cls, ratio: float = 0.15, check_layer: int = 1) -> Repair:
        return cls(ratio=ratio, check_layer=check_layer)

    @property
    def active(self) -> bool:
        return self.first_k > 0 or self.ratio > 0

    def describe(self) -> dict:
        return {"first_k": self.first_k, "ratio": self.ratio, "check_layer": self.check_layer}


def first_tokens(segments: list[tuple[int, int]], k: int) -> np.ndarray:
    """Positions of the first ``k`` tokens of each ``[start, end)`` segment."""
    parts = [np.arange(start, min(start + k, end)) for start, end in segments]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def top_deviation(positions: np.ndarray, deviation: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` positions of largest deviation (ties broken by position, deterministic)."""
    if count <= 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((positions, -deviation))
    return positions[order[:count]]


def run_repair(runtime, cache, token_ids: np.ndarray, segments: list[tuple[int, int]], plan: Repair) -> dict:
    """Apply ``plan`` to ``cache`` (holding ``token_ids``; chunks at ``segments``); a report."""
    started = time.perf_counter()
    attn = runtime.adapter.layout.attn
    chunk_positions = np.concatenate([np.arange(s, e) for s, e in segments]) if segments else np.zeros(0, np.int64)
    chosen = first_tokens(segments, plan.first_k) if plan.first_k else np.zeros(0, np.int64)
    checked = 0
    check_ms = 0.0
    if plan.ratio > 0 and len(chunk_positions):
        if plan.check_layer >= len(attn):
            raise ValueError(f"Repair.check_layer {plan.check_layer}: the model has {len(attn)} attention layers")
        check_slot = attn[plan.check_layer]
        found: dict[str, np.ndarray] = {}

        def on_update(slot, new_k, new_v, old_k, old_v):
            if slot == check_slot:
                found["deviation"] = runtime.deviation(new_v, old_v)

        runtime.run_in_place(cache, token_ids[chunk_positions], chunk_positions, on_update=on_update,
                             stop_after=check_slot)
        checked = len(chunk_positions)
        check_ms = (time.perf_counter() - started) * 1000
        count = math.ceil(plan.ratio * len(chunk_positions))
        rest = np.setdiff1d(chunk_positions, chosen)
        deviation = found["deviation"][np.searchsorted(chunk_positions, rest)]
        chosen = np.concatenate([chosen, top_deviation(rest, deviation, count - len(chosen))])
    chosen = np.unique(chosen)
    if len(chosen):
        runtime.run_in_place(cache, token_ids[chosen], chosen)
    return {
        "recomputed": int(len(chosen)),
        "positions": chosen.tolist(),
        "chunk_tokens": int(len(chunk_positions)),
        "recompute_fraction": len(chosen) / len(chunk_positions) if len(chunk_positions) else 0.0,
        "checked_tokens": checked,
        "check_layers": plan.check_layer + 1 if checked else 0,
        "check_ms": round(check_ms, 3),
        "repair_ms": round((time.perf_counter() - started) * 1000, 3),
        "plan": plan.describe(),
    }
