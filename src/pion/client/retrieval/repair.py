"""Repair of a composed prompt: recompute a few chunk tokens so the chunks see each other.

Each chunk's K/V was computed after the stub only; composed behind other chunks, its tokens
never attended to them. Two published repairs, both here, both run through the model's own
forward on the composed cache (``run_in_place``: the chosen tokens at their positions, each
attending to everything before it, their new K/V written over the stale rows layer by layer):

- **first k** (EPIC / LegoLink, arXiv 2410.15332): recompute the first ``k`` tokens of every
  chunk, which otherwise act as a spurious attention sink at each chunk start. O(k x chunks).
- **deviation** (CacheBlend, arXiv 2405.16444; LMCache ``blend_recompute_ratio 0.15``,
  ``blend_check_layers [1]``): *all* chunk tokens run through the first layers, up to
  ``check_layer`` (in causal blocks), which recomputes those layers exactly; the ``ratio`` of tokens whose V
  on ``check_layer`` moved most from the cached V (the high-KV-deviation tokens) are then
  recomputed through every layer. Deviation is measured on V (CacheBlend's own code), K
  (LMCache's ``diff_k``: post-RoPE fresh K against the cached, re-rotated K) or both. With a
  ``refine_layer`` the selection is CacheBlend's progressive filtering: a wider preselection
  runs on to a deeper layer, whose deviation picks the final tokens; on transformers that and
  the recompute are one forward that drops the unselected tokens as it goes deeper.

Both can be combined: the first-k tokens are always recomputed and count toward the ratio's
budget, which the most deviating other tokens fill.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

MEASURES = ("v", "k", "kv")
#: tokens per in-place forward: a pass over many tokens runs as consecutive blocks (see ``in_blocks``)
BLOCK = 256


@dataclass(frozen=True)
class Repair:
    """What to recompute in a composed prompt (see the module doc)."""

    #: recompute the first ``first_k`` tokens of every composed chunk (EPIC)
    first_k: int = 0
    #: recompute this fraction of all chunk tokens, those whose V deviates most (CacheBlend)
    ratio: float = 0.0
    #: the attention layer (index among attention layers) whose V deviation picks the tokens
    check_layer: int = 1
    #: a deeper layer to re-rank on: the ``preselect`` share of chunk tokens that deviated most on
    #: ``check_layer`` runs on to it, and its deviation picks the final ``ratio`` (None: no funnel)
    refine_layer: int | None = None
    preselect: float = 0.0
    #: what deviation ranks tokens: ``"v"`` (CacheBlend), ``"k"`` (LMCache's ``diff_k``) or ``"kv"``
    #: (both, each scaled by its mean over the candidates so neither dominates)
    measure: str = "v"

    def __post_init__(self) -> None:
        if self.first_k < 0:
            raise ValueError("Repair.first_k must be >= 0")
        if not 0.0 <= self.ratio <= 1.0:
            raise ValueError("Repair.ratio must be in [0, 1]")
        if self.measure not in MEASURES:
            raise ValueError(f"Repair.measure must be one of {MEASURES}, not {self.measure!r}")
        if self.check_layer < 0:
            raise ValueError("Repair.check_layer must be >= 0")
        if self.refine_layer is not None:
            if self.refine_layer <= self.check_layer:
                raise ValueError("Repair.refine_layer must be deeper than check_layer")
            if not self.ratio <= self.preselect <= 1.0:
                raise ValueError("Repair.preselect must be between ratio and 1")

    @classmethod
    def epic(cls, k: int = 16) -> Repair:
        return cls(first_k=k)

    @classmethod
    def cacheblend(cls, ratio: float = 0.15, check_layer: int = 1, refine_layer: int | None = None,
                   preselect: float | None = None, measure: str = "v", first_k: int = 0) -> Repair:
        preselect = (min(1.0, 2 * ratio) if refine_layer is not None else 0.0) if preselect is None else preselect
        return cls(first_k=first_k, ratio=ratio, check_layer=check_layer, refine_layer=refine_layer,
                   preselect=preselect, measure=measure)

    def stages(self, n_tokens: int) -> list[tuple[int, int]]:
        """``(attention layer, tokens kept after it)`` of the deviation funnel."""
        final = math.ceil(self.ratio * n_tokens)
        if self.refine_layer is None:
            return [(self.check_layer, final)]
        return [(self.check_layer, max(final, math.ceil(self.preselect * n_tokens))), (self.refine_layer, final)]

    @property
    def active(self) -> bool:
        return self.first_k > 0 or self.ratio > 0

    def describe(self) -> dict:
        out = {"first_k": self.first_k, "ratio": self.ratio, "check_layer": self.check_layer, "measure": self.measure}
        if self.refine_layer is not None:
            out.update(refine_layer=self.refine_layer, preselect=self.preselect)
        return out


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


def run_repair(runtime, cache, token_ids: np.ndarray, segments: list[tuple[int, int]], plan: Repair,
               one_pass: bool = True) -> dict:
    """Apply ``plan`` to ``cache`` (holding ``token_ids``; chunks at ``segments``); a report.

    The deviation selection is a funnel: every chunk token runs to ``check_layer`` (those layers
    become exact; in position-ordered blocks, so that pass pays about half the attention, as a
    causal prefill does), the most deviating ``preselect`` share of them runs on to
    ``refine_layer`` when one is given, and the top ``ratio`` by the last deviation measured is
    recomputed through every layer. Where the runtime can narrow a forward (``run_funnel``:
    transformers) the deeper stages and the recompute are one forward that drops the unselected
    tokens' hidden states at each stage, as CacheBlend does; otherwise (or ``one_pass=False``)
    one in-place pass per stage and a last one for the chosen tokens, which computes the same
    rows. ``compute`` in the report is the work done, in token-layers, as a share of
    prefilling the chunk tokens (what text RAG pays for them).
    """
    started = time.perf_counter()
    attn = runtime.adapter.layout.attn
    chunk_positions = np.concatenate([np.arange(s, e) for s, e in segments]) if segments else np.zeros(0, np.int64)
    chosen = first_tokens(segments, plan.first_k) if plan.first_k else np.zeros(0, np.int64)
    token_layers, checked, check_ms, passes, in_one_forward = 0, 0, 0.0, 0, False
    if plan.ratio > 0 and len(chunk_positions):
        count = math.ceil(plan.ratio * len(chunk_positions))
        stages = plan.stages(len(chunk_positions))
        for layer, _ in stages:
            if layer >= len(attn):
                raise ValueError(f"Repair check layer {layer}: the model has {len(attn)} attention layers")
        free_final = max(0, count - len(chosen))
        (check, keep), deeper = stages[0], stages[1:]
        candidates = np.setdiff1d(chunk_positions, chosen)
        deviation = _deviation_at(runtime, cache, token_ids, candidates, attn[check], plan.measure)
        token_layers += len(candidates) * (check + 1)
        checked, passes = len(candidates), 1
        ranked = top_deviation(candidates, deviation, keep if deeper else free_final)  # most deviating first
        funnel = getattr(runtime, "run_funnel", None) if one_pass and deeper else None
        done = None
        if funnel is not None:  # the deeper stages and the recompute in one narrowing forward
            alive = np.sort(np.concatenate([chosen, ranked]))
            spec = [(attn[layer], keep if i + 1 < len(deeper) else min(keep, free_final), plan.measure)
                    for i, (layer, keep) in enumerate(deeper)]
            done = funnel(cache, token_ids[alive], alive, spec, np.isin(alive, chosen))
        if done is not None:
            chosen, counts = done
            token_layers += sum(counts)
            passes += 1
            in_one_forward = True
        else:
            candidates = np.sort(ranked)
            for layer, keep in deeper:
                deviation = _deviation_at(runtime, cache, token_ids, candidates, attn[layer], plan.measure)
                token_layers += len(candidates) * (layer + 1)
                passes += 1
                ranked = top_deviation(candidates, deviation, keep)
                candidates = np.sort(ranked)
            chosen = np.concatenate([chosen, ranked[:free_final]])
        check_ms = (time.perf_counter() - started) * 1000
    if not in_one_forward:
        chosen = np.unique(chosen)
        for run in in_blocks(chosen):
            runtime.run_in_place(cache, token_ids[run], run)
        token_layers += len(chosen) * len(attn)
        passes += int(len(chosen) > 0)
    total = len(chunk_positions) * len(attn)
    return {
        "recomputed": int(len(chosen)),
        "positions": np.sort(chosen).tolist(),
        "chunk_tokens": int(len(chunk_positions)),
        "recompute_fraction": len(chosen) / len(chunk_positions) if len(chunk_positions) else 0.0,
        "compute": token_layers / total if total else 0.0,
        "checked_tokens": checked,
        "passes": passes,
        "check_ms": round(check_ms, 3),
        "repair_ms": round((time.perf_counter() - started) * 1000, 3),
        "plan": plan.describe(),
    }


def in_blocks(positions: np.ndarray, block: int | None = None):
    """``positions`` (sorted) in consecutive runs of at most ``block``: each run is one forward
    whose attention reads the cache only up to its last position, so a long pass pays about
    half of the full-width attention, as a causal prefill does."""
    block = block or BLOCK
    for start in range(0, len(positions), block):
        yield positions[start:start + block]


def _deviation_at(runtime, cache, token_ids: np.ndarray, positions: np.ndarray, slot: int,
                  measure: str = "v") -> np.ndarray:
    """Recompute ``positions`` up to attention ``slot`` in place; their deviation there (``measure``)."""
    k_parts: list[np.ndarray] = []
    v_parts: list[np.ndarray] = []

    def on_update(at, new_k, new_v, old_k, old_v):
        if at == slot:
            k_parts.append(runtime.deviation(new_k, old_k))
            v_parts.append(runtime.deviation(new_v, old_v))

    for run in in_blocks(positions):  # in position order: each run sees the runs before it recomputed
        runtime.run_in_place(cache, token_ids[run], run, on_update=on_update, stop_after=slot)
    return combine_deviation(measure, lambda: np.concatenate(k_parts), lambda: np.concatenate(v_parts))


def combine_deviation(measure: str, k_dev, v_dev) -> np.ndarray:
    """The per-token score ``measure`` names, from lazy K and V squared deviations."""
    if measure == "k":
        return k_dev()
    if measure == "v":
        return v_dev()
    k, v = k_dev(), v_dev()
    return k / max(float(k.mean()), 1e-30) + v / max(float(v.mean()), 1e-30)
