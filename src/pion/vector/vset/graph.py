"""The HNSW graph of one vector set: numpy storage, graph search and exact scans.

Why our own HNSW and not usearch: VLINKS must list each node's neighbours per level, and
usearch's Python binding exposes no links (only per-level counts); Redis's scores depend on
its own per-vector Q8 and sign-bit encodings, which usearch's i8/b1 do not reproduce; FILTER
needs a predicate evaluated inside the graph walk with Redis's effort bound (FILTER-EF), and
VREM must really unlink a node. This graph keeps Redis's shape: bidirectional links only,
``2M`` links per node on level 0 and ``M`` above, a level drawn with p = 0.25 (at most 16),
and the search of Malkov & Yashunin with Redis's filtered variant.

Storage is slot-indexed arrays that double when full: ``rows`` (encoded vectors), ``ranges``
(Q8 ranges), ``norms``, ``levels`` (-1 marks a free slot), ``uids`` (Redis's node ids),
``links0``/``n0`` (level-0 neighbours, -1 padded, and their count). A node on upper levels
has ``upper[slot]``, an int32 array with one row per level above 0: the row's count first,
then its links.

Code: ``kernel.impl`` (the compiled ``_kernel``) runs the walks, distances and link selection
when it is built; this module, ``walk`` and ``build`` are the reference it matches bit for bit.

Threads: all writes happen on the event loop. A search may run in a worker thread while the
loop writes: it reads through a ``walk.View``, which takes the arrays once at the start (growth
replaces them, so an old reader keeps a consistent frozen copy) and ignores slots outside them,
so it can never fail on a concurrent change; what it returns is re-checked on the loop
(``alive``) before it is used.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from pion.vector.vset import kernel, quant
from pion.vector.vset.blas import use_one_blas_thread
from pion.vector.vset.walk import Hit, View

MAX_LEVEL = 16
LEVEL_P = 0.25
MIN_M, MAX_M, DEFAULT_M = 4, 4096, 16



class Graph:
    """Nodes, vectors and links; see the module docstring for the layout."""

    def __init__(self, dim: int, quant_type: int, m: int = DEFAULT_M) -> None:
        use_one_blas_thread()
        self.dim = dim
        self.quant = quant_type
        self.m = m
        self.m0 = 2 * m
        self.width = quant.row_width(quant_type, dim)
        self.dtype = quant.row_dtype(quant_type)
        self.count = 0
        self.hw = 0  # slots below this have been handed out at least once
        self.entry = -1
        self.max_level = 0
        self.last_id = 0
        #: bumped whenever a node goes away or the entry point moves: a CAS insert prepared
        #: under another epoch re-checks its candidates
        self.epoch = 0
        self.free: list[int] = []
        self.upper: dict[int, np.ndarray] = {}
        self._allocate(0)

    # -- storage -----------------------------------------------------------------------

    def _allocate(self, cap: int) -> None:
        self.rows = np.zeros((cap, self.width), dtype=self.dtype)
        self.ranges = np.ones(cap, dtype=np.float32)
        self.norms = np.ones(cap, dtype=np.float32)
        self.levels = np.full(cap, -1, dtype=np.int8)
        self.uids = np.zeros(cap, dtype=np.int64)
        self.links0 = np.full((cap, self.m0), -1, dtype=np.int32)
        self.n0 = np.zeros(cap, dtype=np.int32)

    @property
    def cap(self) -> int:
        return len(self.levels)

    def _grow(self) -> None:
        old = (self.rows, self.ranges, self.norms, self.levels, self.uids, self.links0, self.n0)
        self._allocate(max(16, self.cap * 2))
        for new, prev in zip((self.rows, self.ranges, self.norms, self.levels, self.uids, self.links0, self.n0), old, strict=False):
            new[: len(prev)] = prev

    def add_slot(self, row: np.ndarray, rng: float, norm: float, level: int, uid: int = 0) -> int:
        """Store a node's vector (not linked yet) and return its slot."""
        if self.free:
            slot = self.free.pop()
        else:
            if self.hw == self.cap:
                self._grow()
            slot = self.hw
            self.hw += 1
        if uid == 0:
            self.last_id += 1
            uid = self.last_id
        self.rows[slot] = row
        self.ranges[slot] = rng
        self.norms[slot] = norm
        self.uids[slot] = uid
        self.n0[slot] = 0
        self.links0[slot] = -1
        if level > 0:
            self.upper[slot] = np.zeros((level, self.m + 1), dtype=np.int32)
        self.levels[slot] = level  # last: a reader sees the slot live only once it is whole
        self.count += 1
        return slot

    def release_slot(self, slot: int) -> None:
        self.levels[slot] = -1
        self.n0[slot] = 0
        self.upper.pop(slot, None)
        self.free.append(slot)
        self.count -= 1

    def alive(self, slot: int, uid: int) -> bool:
        return 0 <= slot < self.cap and self.levels[slot] >= 0 and self.uids[slot] == uid

    def live_slots(self) -> np.ndarray:
        return np.flatnonzero(self.levels[: self.hw] >= 0)

    def links(self, slot: int, level: int) -> list[int]:
        if level == 0:
            return self.links0[slot, : self.n0[slot]].tolist()
        layers = self.upper.get(slot)
        if layers is None or level > len(layers):
            return []
        row = layers[level - 1]
        return row[1 : 1 + row[0]].tolist()

    def compact(self) -> np.ndarray:
        """Renumber the live slots 0..n-1 in order and shrink the arrays (memory comes back after
        many removals); returns old slot -> new slot, -1 for the dead ones."""
        live = self.live_slots()
        n = int(live.size)
        remap = np.full(self.cap, -1, dtype=np.int32)
        remap[live] = np.arange(n, dtype=np.int32)
        old = [a[live] for a in (self.rows, self.ranges, self.norms, self.levels, self.uids, self.links0, self.n0)]
        links = old[5]
        old[5] = np.where(links >= 0, remap[np.where(links >= 0, links, 0)], -1)
        self._allocate(max(16, n))
        for new, prev in zip((self.rows, self.ranges, self.norms, self.levels, self.uids, self.links0, self.n0), old, strict=False):
            new[:n] = prev
        upper = {}
        for slot, layers in self.upper.items():
            moved = layers.copy()
            for row in moved:
                row[1 : 1 + row[0]] = remap[row[1 : 1 + row[0]]]
            upper[int(remap[slot])] = moved
        self.upper = upper
        self.entry = int(remap[self.entry]) if self.entry >= 0 else -1
        self.free = []
        self.hw = n
        self.epoch += 1
        return remap

    def random_slot(self) -> int:
        """A uniformly random live slot (rejection sampling: slots are mostly live, see compact)."""
        for _ in range(64):
            slot = random.randrange(self.hw)
            if self.levels[slot] >= 0:
                return slot
        return int(random.choice(self.live_slots().tolist()))

    @staticmethod
    def random_level() -> int:
        level = 0
        while random.random() < LEVEL_P and level < MAX_LEVEL:
            level += 1
        return level

    def nbytes(self) -> int:
        upper = sum(layers.nbytes + 112 for layers in self.upper.values())
        arrays = (self.rows, self.ranges, self.norms, self.levels, self.uids, self.links0, self.n0)
        return sum(a.nbytes for a in arrays) + upper

    # -- distances ----------------------------------------------------------------------

    def probe(self, row: np.ndarray, rng: float) -> np.ndarray:
        """An encoded vector (a query, or a stored node's row) ready for ``dist``."""
        return quant.probe(row, rng, self.quant)

    def encode(self, unit: np.ndarray) -> tuple[np.ndarray, float]:
        """``quant.encode`` for this graph's encoding; Q8 in one compiled pass where the kernel
        is built (the same bits)."""
        k = kernel.impl
        if k is not None and self.quant == quant.Q8:
            return k.encode_q8(np.ascontiguousarray(unit, dtype=np.float32))
        return quant.encode(unit, self.quant)

    def node_probe(self, slot: int) -> np.ndarray:
        return quant.probe(self.rows[slot], float(self.ranges[slot]), self.quant)

    def dist(self, probe: np.ndarray, slots: np.ndarray) -> np.ndarray:
        k = kernel.impl
        if k is not None:
            return k.distances(self.rows, self.ranges, probe, self.quant, self.dim, slots)
        return quant.distances(self.rows.take(slots, axis=0), self.ranges.take(slots), probe, self.quant, self.dim)

    def node_dist(self, a: int, slots: np.ndarray) -> np.ndarray:
        return self.dist(self.node_probe(a), slots)

    def pair_matrix(self, slots: np.ndarray) -> np.ndarray:
        rows, ranges = self.rows[slots], self.ranges[slots]
        return quant.pairwise(rows, ranges, rows, ranges, self.quant, self.dim)

    def pair_matrix_with(self, slots_a: np.ndarray, slots_b: np.ndarray) -> np.ndarray:
        return quant.pairwise(self.rows[slots_a], self.ranges[slots_a], self.rows[slots_b],
                              self.ranges[slots_b], self.quant, self.dim)

    # -- search ---------------------------------------------------------------------------

    def search(self, probe: np.ndarray, ef: int, accept: Callable[[int], bool] | None = None,
               effort: int = 0, limit: int = 0, clamped: bool = False) -> list[tuple[float, int, int]]:
        """Up to ``ef`` nearest nodes (nearest first) by graph search, as (distance, slot, uid);
        with ``accept`` only nodes it accepts, expanding at most ``effort`` candidates (0 = no
        bound). ``limit``: only the first ``limit`` of them (VSIM's COUNT; the walk is the same);
        ``clamped``: distances as ``quant.clamp`` reports them."""
        k = kernel.impl
        if k is not None:
            return k.search(self, probe, ef, accept, effort, limit, clamped)
        view = View(self)
        if view.entry < 0 or view.entry >= view.cap:
            return []
        ep = view.entry
        ep_d = float(view.dist(probe, np.array([ep]))[0])
        for level in range(view.top, 0, -1):
            ep_d, ep = view.greedy(probe, ep, ep_d, level)
        hits = view.beam(probe, [(ep_d, ep)], ef, 0, accept, effort)
        if limit > 0:
            hits = hits[:limit]
        if clamped:
            hits = [(quant.clamp(d), s) for d, s in hits]
        return view.with_uids(hits)

    def layer_candidates(self, probe: np.ndarray, level: int, ef: int, lowest: int = 0) -> list[list[Hit]]:
        """Candidate lists for levels ``lowest``..min(level, top), indexed by level (an insertion
        takes all levels; repairing one level's links after a deletion takes only that one)."""
        k = kernel.impl
        if k is not None:
            return k.layer_candidates(self, probe, level, ef, lowest)
        view = View(self)
        if view.entry < 0 or view.entry >= view.cap:
            return []
        ep = view.entry
        ep_d = float(view.dist(probe, np.array([ep]))[0])
        for lc in range(view.top, level, -1):
            ep_d, ep = view.greedy(probe, ep, ep_d, lc)
        found: list[list[Hit]] = [[] for _ in range(min(level, view.top) + 1)]
        entry = [(ep_d, ep)]
        for lc in range(min(level, view.top), lowest - 1, -1):
            found[lc] = view.beam(probe, entry, ef, lc, None, 0)
            if found[lc]:
                entry = found[lc][:1]
        return found

    def exact(self, probe: np.ndarray, k: int, accept: Callable[[int], bool] | None = None,
              effort: int = 0) -> list[tuple[float, int, int]]:
        """The true ``k`` nearest live nodes (TRUTH, small sets) by a linear scan, as
        (distance, slot, uid); with ``accept``, the nearest that pass among the ``effort``
        nearest (0: among all)."""
        view = View(self)
        slots = np.flatnonzero(view.levels[: min(self.hw, view.cap)] >= 0)
        if not slots.size or k <= 0:
            return []
        ds = view.dist(probe, slots)
        if accept is None:
            if slots.size > k:  # the k smallest (distance, slot): all within the k-th distance
                part = np.flatnonzero(ds <= ds[np.argpartition(ds, k - 1)[k - 1]])
                slots, ds = slots[part], ds[part]
            order = np.lexsort((slots, ds))[:k]
            return view.with_uids(list(zip(ds[order].tolist(), slots[order].tolist(), strict=True)))
        order = np.argsort(ds, kind="stable")
        if effort:
            order = order[:effort]
        hits: list[Hit] = []
        for d, slot in zip(ds[order].tolist(), slots[order].tolist(), strict=True):
            if accept(slot):
                hits.append((d, slot))
                if len(hits) >= k:
                    break
        return view.with_uids(hits)
