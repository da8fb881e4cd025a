"""One search over a graph: a reader's consistent view of the arrays and the layer walks.

A ``View`` takes the graph's arrays once (growth replaces them, so a reader in a worker thread
keeps a consistent frozen copy while the loop writes) and ignores slots outside them. Walks
expand ``BATCH`` candidates per numpy call; see ``View.beam``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from pion.vector.vset import kernel, quant

if TYPE_CHECKING:
    from pion.vector.vset.graph import Graph

Hit = tuple[float, int]  # (distance, slot)

#: candidates a layer search expands per numpy call
BATCH = 4
#: results a plain layer search lets pile up past ``ef`` before cutting back to ``ef``
PRUNE_SLACK = 16
_EMPTY = np.zeros(0, dtype=np.int32)


class View:
    """One reader's consistent references to the graph's arrays (see the module docstring)."""

    __slots__ = ("g", "rows", "ranges", "links0", "n0", "levels", "uids", "cap", "entry", "top", "upper")

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.rows, self.ranges, self.links0, self.n0 = g.rows, g.ranges, g.links0, g.n0
        self.levels, self.uids = g.levels, g.uids
        self.cap = len(self.n0)
        self.entry, self.top, self.upper = g.entry, g.max_level, g.upper

    def dist(self, probe: np.ndarray, slots: np.ndarray) -> np.ndarray:
        k = kernel.impl
        if k is not None:  # the same bits, without the gather
            return k.distances(self.rows, self.ranges, probe, self.g.quant, self.g.dim, slots)
        return quant.distances(self.rows.take(slots, axis=0), self.ranges.take(slots), probe, self.g.quant,
                               self.g.dim)

    def with_uids(self, hits: list[Hit]) -> list[tuple[float, int, int]]:
        uids = self.uids
        return [(d, s, int(uids[s])) for d, s in hits]

    def neighbours(self, slot: int, level: int) -> np.ndarray:
        if level == 0:
            return self.links0[slot, : self.n0[slot]]
        layers = self.upper.get(slot)
        if layers is None or level > len(layers):
            return _EMPTY
        row = layers[level - 1]
        nb = row[1 : 1 + row[0]]
        if self.cap != len(self.g.n0):  # the graph grew after this reader started
            nb = nb[nb < self.cap]
        return nb

    def greedy(self, probe: np.ndarray, ep: int, ep_d: float, level: int) -> Hit:
        """Walk an upper level towards the query (a search with ef = 1)."""
        seen = {ep}
        while True:
            nb = self.neighbours(ep, level)
            nb = nb[[s not in seen for s in nb.tolist()]] if nb.size else nb
            if not nb.size:
                return ep_d, ep
            seen.update(nb.tolist())
            ds = self.dist(probe, nb)
            best = int(np.argmin(ds))
            if ds[best] >= ep_d:
                return ep_d, ep
            ep, ep_d = int(nb[best]), float(ds[best])

    def beam(self, probe: np.ndarray, entry: list[Hit], ef: int, level: int,
             accept: Callable[[int], bool] | None, effort: int) -> list[Hit]:
        """The layer search (Malkov & Yashunin): expand the nearest candidate not yet expanded,
        keep the ``ef`` nearest nodes seen, stop when the nearest candidate is farther than all
        of them. Candidates are expanded ``BATCH`` at a time (the nearest ones still worth
        expanding), so one numpy call measures all their new neighbours: Python's per-call cost,
        not arithmetic, is what a search spends its time on."""
        if accept is None:
            return self._beam_plain(probe, entry, ef, level)
        return self._beam_filtered(probe, entry, ef, level, accept, effort)

    def _expand(self, batch: list[int], level: int, visited: np.ndarray, stamp: np.ndarray) -> np.ndarray:
        """The not yet visited neighbours of ``batch`` (each once), marked visited."""
        if level == 0:
            links0, n0 = self.links0, self.n0
            parts = [links0[c, : n0[c]] for c in batch]
        else:
            parts = [self.neighbours(c, level) for c in batch]
        nb = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if not nb.size:
            return nb
        nb = nb[~visited.take(nb)]
        if len(parts) > 1 and nb.size > 1:
            order = np.arange(nb.size, dtype=np.int32)
            stamp[nb] = order
            nb = nb[stamp[nb] == order]
        visited[nb] = True
        return nb

    def _start(self, entry: list[Hit]) -> tuple[np.ndarray, np.ndarray, list[Hit]]:
        """A walk's visited marks, its de-duplication scratch and its candidate heap."""
        visited = np.zeros(self.cap, dtype=bool)
        for _, slot in entry:
            visited[slot] = True
        cand = list(entry)
        heapq.heapify(cand)
        return visited, np.empty(self.cap, dtype=np.int32), cand

    def _beam_plain(self, probe: np.ndarray, entry: list[Hit], ef: int, level: int) -> list[Hit]:
        visited, stamp, cand = self._start(entry)
        found = _Nearest(ef, entry)
        size = BATCH if ef <= 100 else 2 * BATCH
        heappop, push = heapq.heappop, heapq.heappush
        while cand and cand[0][0] <= found.worst:
            batch = [heappop(cand)[1]]
            while cand and len(batch) < size and cand[0][0] <= found.worst:
                batch.append(heappop(cand)[1])
            nb = self._expand(batch, level, visited, stamp)
            if not nb.size:
                continue
            ds = self.dist(probe, nb)
            if found.worst < np.inf:
                keep = ds < found.worst
                if not keep.any():
                    continue
                nb, ds = nb[keep], ds[keep]
            for item in zip(ds.tolist(), nb.tolist(), strict=True):
                push(cand, item)
            found.add(ds, nb)
        return found.hits()

    def _beam_filtered(self, probe: np.ndarray, entry: list[Hit], ef: int, level: int,
                       accept: Callable[[int], bool], effort: int) -> list[Hit]:
        """Redis's filtered walk: candidates are explored whether or not they pass (so the walk
        crosses non-matching regions), only passing nodes enter the results, and at most
        ``effort`` candidates are expanded (FILTER-EF). A neighbour becomes a candidate when it
        is nearer than the ``ef``-th result or the candidate heap holds fewer than ``ef``; the
        filter runs only on neighbours that could enter the results."""
        visited, stamp, cand = self._start(entry)
        found = _Nearest(ef, [hit for hit in entry if accept(hit[1])])
        evaluated = 1
        heappop, push = heapq.heappop, heapq.heappush
        while cand and cand[0][0] <= found.worst and not (effort and evaluated >= effort):
            batch = [heappop(cand)[1]]
            while cand and len(batch) < BATCH and cand[0][0] <= found.worst:
                batch.append(heappop(cand)[1])
            evaluated += len(batch)
            nb = self._expand(batch, level, visited, stamp)
            if not nb.size:
                continue
            ds = self.dist(probe, nb)
            near = ds < found.worst if found.worst < np.inf else None
            grow, grow_d = (nb, ds) if near is None or len(cand) < ef else (nb[near], ds[near])
            for item in zip(grow_d.tolist(), grow.tolist(), strict=True):
                push(cand, item)
            if near is not None:
                if not near.any():
                    continue
                nb, ds = nb[near], ds[near]
            ok = np.fromiter(map(accept, nb.tolist()), dtype=bool, count=nb.size)
            if ok.any():
                found.add(ds[ok], nb[ok])
        return found.hits()


class _Nearest:
    """A walk's ``ef`` nearest nodes so far, in numpy arrays cut back to ``ef`` only when
    ``PRUNE_SLACK`` more have piled up: ``worst`` (the ``ef``-th distance at the last cut, or
    infinity before there were ``ef``) may then be a little above the true one, which can only
    make the walk explore more, never less. Ties are broken by slot (nearest means smallest
    (distance, slot)), so the compiled kernel, which keeps the same set in a heap, agrees."""

    __slots__ = ("ef", "d", "s", "worst")

    def __init__(self, ef: int, hits: list[Hit]) -> None:
        self.ef = ef
        self.d = np.array([d for d, _ in hits], dtype=np.float32)
        self.s = np.array([s for _, s in hits], dtype=np.int32)
        self.worst = np.inf

    def add(self, ds: np.ndarray, slots: np.ndarray) -> None:
        self.d = np.concatenate((self.d, ds))
        self.s = np.concatenate((self.s, slots))
        if self.d.size >= (self.ef if self.worst == np.inf else self.ef + PRUNE_SLACK):
            keep = np.lexsort((self.s, self.d))[: self.ef]
            self.d, self.s = self.d[keep], self.s[keep]
            self.worst = float(self.d.max())

    def hits(self) -> list[Hit]:
        order = np.lexsort((self.s, self.d))[: self.ef]
        return list(zip(self.d[order].tolist(), self.s[order].tolist(), strict=True))
