"""SVS-VAMANA vector fields: a usearch graph with SVS's parameters, and its 8-bit compression.

Redis 8.2 added ``VECTOR SVS-VAMANA`` (Intel's Scalable Vector Search: one Vamana graph built by
greedy search and RobustPrune). Pion builds no Vamana graph of its own: the field runs on the
same usearch graph as HNSW (``hnsw_graph``), with SVS's parameters mapped to their nearest
analogues (``schema.finish_svs``): GRAPH_MAX_DEGREE is the graph's base-layer degree (usearch's
``connectivity`` is half of it, as HNSW's level 0 holds 2M links), CONSTRUCTION_WINDOW_SIZE its
build window (``expansion_add``), SEARCH_WINDOW_SIZE its search window (``expansion_search``,
and a query's SEARCH_WINDOW_SIZE overrides it as EF_RUNTIME does for HNSW), EPSILON the range
queries' factor. FT.INFO shows RediSearch 8.4's keys for the field (docs/vector.md).

**COMPRESSION.** Redis Open Source, and Redis on any non-Intel CPU, does not run Intel's LVQ or
LeanVec: every COMPRESSION kind falls back to global 8-bit scalar quantisation (Redis's
documentation), which FT.INFO names ``GlobalSQ8``. Pion does the same: once TRAINING_THRESHOLD
vectors have arrived, their global minimum and maximum fix one affine map of every value to
255 levels (for IP and COSINE the map is centred on 0, so dot products keep their order); the
graph then holds one int8 code per dimension (a quarter of a float32 graph's vectors) and is
searched with the query's codes. Until the threshold is reached the rows wait, unquantised, as
*pending* rows that every query scans exactly (as SVS's flat front buffer does). A compressed
graph's candidates are re-ranked with the field's full-precision rows (the matrix a FLAT field
scans), so the distances a query reports are exact; only which candidates the graph finds
depends on the codes. REDUCE (LeanVec's dimension) is checked and reported, and, as in Redis's
fallback, reduces nothing.

**Restart.** The graph is saved and loaded as HNSW's is (``graph_store``); a compressed one's
file also holds the trained code map, and a document claims its saved entry when its row's codes
equal the entry's. Before training there is no graph to save: the rows wait again at start.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pion.vector.hnsw_graph import HnswGraph
from pion.vector.schema import SVS_TRAINING_MAX, VectorParams

#: int8 codes span -127..127 (255 levels; usearch's i8 kernels take them as they are)
LEVELS = 127


class SvsGraph(HnswGraph):
    """An SVS-VAMANA field's graph: HNSW's with SVS's parameters, or 8-bit codes (COMPRESSION)."""

    def __init__(self, params: VectorParams, owner: Any) -> None:
        self.compressed = params.compression is not None
        self.owner = owner
        self.threshold = min(params.training_threshold, SVS_TRAINING_MAX)  # VecSim clamps it so
        #: COMPRESSION before training: slot -> (version, row) of the live rows waiting for it
        self.held: dict[int, tuple[int, np.ndarray]] = {}
        self.training = False  # the builder is training and adding the held rows
        self.center: float | None = None  # trained: value -> (value - center) * scale
        self.scale = 1.0
        super().__init__(params, owner)
        if self.compressed:
            from usearch.index import Index

            metric = {"COSINE": "ip", "IP": "ip", "L2": "l2sq"}[params.metric]
            self.index = Index(ndim=params.dim, metric=metric, dtype="i8", connectivity=params.m,
                               expansion_add=params.ef_construction, expansion_search=params.ef_runtime)

    @property
    def trained(self) -> bool:
        return self.center is not None

    # -- the compressed path ----------------------------------------------------------------------

    def train(self, rows: np.ndarray) -> None:
        """Fix the global affine map from these rows' minimum and maximum."""
        lo, hi = float(rows.min()), float(rows.max())
        if self.owner.metric in ("IP", "COSINE"):  # centred on 0: dot products keep their order
            half = max(abs(lo), abs(hi))
            center = 0.0
        else:
            half = (hi - lo) / 2
            center = (hi + lo) / 2
        self.scale = LEVELS / half if half > 0 else 1.0
        self.center = center

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """The int8 codes of float32 rows (values past the trained range clip to its ends)."""
        codes = np.rint((rows - self.center) * self.scale)
        return np.clip(codes, -LEVELS, LEVELS).astype(np.int8)

    def _apply(self, batch: list) -> None:
        if not self.compressed:
            super()._apply(batch)
            return
        if not self.trained:
            # flagged before the rows join ``held``, so ``waiting`` never counts rows about to train
            self.training = len(self.held) + sum(1 for _, version, _ in batch if version) >= self.threshold
            try:
                for slot, version, row in batch:
                    if version:
                        self.held[slot] = (version, row)
                    else:
                        self.held.pop(slot, None)
                if len(self.held) < self.threshold:
                    return
                batch = [(slot, version, row) for slot, (version, row) in self.held.items()]
                self.held = {}
                self.train(np.stack([row for _, _, row in batch]))
                super()._apply([(slot, version, self.encode(row)) for slot, version, row in batch])
            finally:
                self.training = False
            return
        super()._apply([(slot, version, None if row is None else self.encode(row)) for slot, version, row in batch])

    def waiting(self) -> int:
        """Rows held for TRAINING_THRESHOLD (not the builder's backlog: they wait for more rows)."""
        return 0 if self.training else len(self.held)

    def code_map(self) -> tuple[float, float] | None:
        """(center, scale) once trained, for the graph file (``graph_store``)."""
        return (float(self.center), self.scale) if self.compressed and self.center is not None else None

    def claim_rows(self, rows: np.ndarray) -> np.ndarray:
        """What a loaded graph holds for these rows: their codes when compressed."""
        return self.encode(rows) if self.compressed else rows

    def adopt(self, loaded: Any) -> bool:
        if self.compressed:
            if loaded.codes is None or self.held or self.trained:
                return False
            if not super().adopt(loaded):
                return False
            self.center, self.scale = loaded.codes
            return True
        return loaded.codes is None and super().adopt(loaded)

    def save_bytes(self) -> bytearray | None:
        if self.compressed and not self.trained:
            return None  # nothing in the graph yet: the rows wait for TRAINING_THRESHOLD
        return super().save_bytes()

    def _search_one(self, query: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.compressed:
            return super()._search_one(query, count)
        keys, _ = super()._search_one(self.encode(query), count)
        if not len(keys):
            return keys, np.zeros(0, dtype=np.float32)
        owner = self.owner
        rows, norms = owner.rows, owner.sq_norms
        slots = keys.astype(np.int64)
        slots = slots[slots < min(len(rows), len(norms))]
        dists = owner._distances(rows[slots], norms[slots], query).astype(np.float32)
        order = np.argsort(dists, kind="stable")
        return slots[order].astype(np.uint64), dists[order]
