"""Stage 2 for a model: the prefix part of every attention call is computed by the server.

``PionPromptCache.enable_stage2(model)`` (or ``pion.client.adapters.enable_stage2(prompt_cache)``) returns a
``Stage2``. ``stage2.cache_for(prefix_ids)`` makes sure the prefix is stored (a Stage-1 store:
the same rows serve both stages) and returns a runtime cache that holds only the suffix; the
runtime's attention, re-routed by the adapter, sends each layer's query rows and the live
suffix to the server (``ATTEND.PREFIX.QUERY_FUSED ... FROM ns``: one softmax over the stored
prefix and the causal suffix) and gets the output back: exact for dense. Positions continue
after the prefix, so the model behaves as if the prefix were in its cache.

``sparse={"block": 64, "budget": 512, "selector": "quest"}`` makes decode steps (M=1) attend
only the selected blocks (``QUERY_SPARSE_AUTO_FUSED``; prefill of the suffix stays dense, as
the reference). ``lane="inproc"`` fetches the prefix once (a Stage-1 hit) and runs the same
kernels and selector in this process (``pion.attention``), with no round trip per layer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pion.attention.dense import grouped_map
from pion.attention.query import Query, Selector, answer
from pion.attention.select import (
    BLOCK_MEAN,
    BLOCK_MEAN_PER_HEAD,
    DEFAULT_BLOCK,
    QUEST,
    QUEST_PER_HEAD,
    SELECTOR_NAMES,
    summarize,
)
from pion.attention.tier import PrefixView
from pion.client.stage2_wire import Stage2Wire

SELECTORS = {"block-mean": BLOCK_MEAN, "block_mean": BLOCK_MEAN, "mean": BLOCK_MEAN, "quest": QUEST,
             "quest-per-head": QUEST_PER_HEAD, "block-mean-per-head": BLOCK_MEAN_PER_HEAD}
LANES = ("server", "inproc")


@dataclass(frozen=True, slots=True)
class Sparse:
    """Decode-time block selection: ``budget`` prefix tokens in blocks of ``block``."""

    block: int = DEFAULT_BLOCK
    budget: int = 512
    selector: int = QUEST

    @classmethod
    def parse(cls, spec: dict | None) -> Sparse | None:
        if spec is None:
            return None
        unknown = set(spec) - {"block", "budget", "selector"}
        if unknown:
            raise ValueError(f"unknown sparse option(s) {sorted(unknown)} (want block, budget, selector)")
        block, budget = int(spec.get("block", DEFAULT_BLOCK)), int(spec.get("budget", 512))
        name = str(spec.get("selector", "quest")).lower()
        if name not in SELECTORS:
            raise ValueError(f"unknown selector {name!r} (want quest or block-mean)")
        if block < 1 or budget < block:
            raise ValueError("sparse needs block >= 1 and budget >= block")
        return cls(block, budget, SELECTORS[name])

    @property
    def k_top(self) -> int:
        return self.budget // self.block

    def attended(self, n_tokens: int) -> int:
        """Prefix tokens a decode step attends (spec 6.4: K_top blocks and the tail, or all)."""
        if n_tokens <= self.block * self.k_top:
            return n_tokens
        return self.k_top * self.block + n_tokens % self.block


class PrefixHandle:
    """One prefix Stage 2 attends over: its namespace, length and (in-process lane) its views."""

    def __init__(self, ns: str, n_tokens: int, views: list[PrefixView] | None = None) -> None:
        self.ns = ns
        self.n_tokens = n_tokens
        self.views = views


class Stage2:
    """Routes the prefix part of attention to the server (or the in-process lane) for one model."""

    def __init__(self, prompt_cache, *, sparse: dict | None = None, lane: str = "server") -> None:
        if lane not in LANES:
            raise ValueError(f"lane must be one of {LANES}")
        self.pc = prompt_cache
        self.adapter = prompt_cache.adapter
        self.sparse = Sparse.parse(sparse)
        self.lane = lane
        self.wire = Stage2Wire(prompt_cache.client)
        self.attn_slots = {slot: index for index, slot in enumerate(self.adapter.layout.attn)}
        self.counts = {"queries": 0, "sparse_queries": 0, "attended_tokens": 0, "prefix_tokens": 0,
                       "prefixes_stored": 0, "prefixes_found": 0}
        self.ms = {"attend_ms_total": 0.0}

    def set_sparse(self, sparse: dict | None) -> None:
        """Switch decode-time selection on (``{"block", "budget", "selector"}``) or off (None)."""
        self.sparse = Sparse.parse(sparse)

    # -- prefixes -----------------------------------------------------------------------------

    def prefix(self, prefix_ids) -> PrefixHandle:
        """The stored prefix of these tokens (prefilled and stored first when the server lacks it)."""
        ids = [int(t) for t in prefix_ids]
        if not ids:
            raise ValueError("prefix_ids is empty")
        ns = self.pc.namespace(ids)
        if self.lane == "inproc":
            cache = self.pc.get_or_prefill(ids, namespace=ns)
            kv, _ = self.adapter.export(cache)
            return PrefixHandle(ns, len(ids), [self._view(k, v, slot) for slot, (k, v) in zip(self.adapter.layout.attn, kv, strict=True)])
        stored = self._stored(ns, ids)
        if stored is None:
            raise RuntimeError(f"Stage 2: the server's prefix under {ns} is not this model's or these tokens' "
                               f"({self.pc.last_mismatch}); it is never used (fail closed)")
        if stored:
            self.counts["prefixes_found"] += 1
        else:
            started = time.perf_counter()
            cache = self.adapter.prefill(ids)
            if not self.pc.put(ids, cache, namespace=ns, prefill_ms=(time.perf_counter() - started) * 1000):
                raise RuntimeError("Stage 2: the prefix could not be stored on the server (see the warning)")
            self.counts["prefixes_stored"] += 1
        return PrefixHandle(ns, len(ids))

    def _stored(self, ns: str, ids: list[int]) -> bool | None:
        """True: a complete stored prefix whose manifest is this model's and these tokens'; False:
        none; None: one that is not (a mismatch: never attended, never overwritten)."""
        client = self.pc.client
        if not client.kv_lookup(ns):
            return False
        raw = client.kv_manifest(ns)
        if raw is None:
            self.pc.last_mismatch = f"{ns}: no manifest"
            return None
        return True if self.pc._verify(ns, raw, ids, len(ids), True) else None

    def _view(self, k_rows: np.ndarray, v_rows: np.ndarray, slot: int) -> PrefixView:
        heads, k_dim, v_dim = self.adapter.layout.heads[self.attn_slots[slot]]
        n = k_rows.shape[0]
        k = np.ascontiguousarray(np.asarray(k_rows, np.float32).reshape(n, heads, k_dim).transpose(1, 0, 2))
        v = np.ascontiguousarray(np.asarray(v_rows, np.float32).reshape(n, heads, v_dim).transpose(1, 0, 2))
        view = PrefixView(k, v, k.nbytes + v.nbytes, origin=b"")
        block = self.sparse.block if self.sparse is not None else DEFAULT_BLOCK
        if n >= block:
            view.summaries[(block, 0)] = summarize(k, block)
        return view

    # -- attention ----------------------------------------------------------------------------

    def attend(self, handle: PrefixHandle, slot: int, q: np.ndarray, k_suf: np.ndarray, v_suf: np.ndarray,
               scale: float) -> np.ndarray:
        """``[H_q, M, D]``: attention of ``q`` over the prefix and the causal suffix ``[H_kv, S, D]``."""
        started = time.perf_counter()
        layer = self.attn_slots[slot]
        q_heads, rows, dim = q.shape
        kv_heads = k_suf.shape[0]
        sparse = self.sparse if rows == 1 and self.sparse is not None else None
        scale_arg = None if abs(scale - dim ** -0.5) < 1e-12 * scale else scale
        if handle.views is not None:
            query = Query(q, grouped_map(q_heads, kv_heads), scale, k_suffix=k_suf, v_suffix=v_suf,
                          selector=None if sparse is None else Selector(sparse.block, sparse.k_top, sparse.selector))
            out = answer(handle.views[layer], query).out
        elif sparse is None:
            out = self.wire.query_fused(handle.ns, layer, q, k_suf, v_suf, origin=handle.ns, scale=scale_arg)
        else:
            out = self.wire.query_sparse_auto(handle.ns, layer, q, block=sparse.block, k_top=sparse.k_top,
                                              kv_heads=kv_heads, selector=sparse.selector, k_suf=k_suf, v_suf=v_suf,
                                              origin=handle.ns, scale=scale_arg)
        self.counts["queries"] += 1
        self.counts["prefix_tokens"] += handle.n_tokens
        self.counts["attended_tokens"] += handle.n_tokens if sparse is None else sparse.attended(handle.n_tokens)
        self.counts["sparse_queries"] += int(sparse is not None)
        self.ms["attend_ms_total"] += (time.perf_counter() - started) * 1000
        return out

    def stats(self) -> dict:
        """Round trips, bytes both ways, queries and the fraction of prefix tokens attended."""
        counts = self.counts
        fraction = counts["attended_tokens"] / counts["prefix_tokens"] if counts["prefix_tokens"] else 0.0
        wire = self.wire.counters
        return {
            "round_trips": wire["round_trips"], "bytes_sent": wire["bytes_sent"],
            "bytes_received": wire["bytes_received"], "cold_rehydrates": wire["cold_rehydrates"],
            **counts, "selected_fraction": round(fraction, 6), "lane": self.lane,
            "sparse": None if self.sparse is None else {"block": self.sparse.block, "budget": self.sparse.budget,
                                                        "selector": SELECTOR_NAMES[self.sparse.selector]},
            "attend_ms_total": round(self.ms["attend_ms_total"], 3),
        }
