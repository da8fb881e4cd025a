"""Inserting nodes into and deleting them from a vector set's graph, keeping every link
bidirectional (so a deletion can find and repair every node that pointed at the deleted one).

Insertion has Redis's two phases: ``candidates`` (read-only: the nearest nodes on each level
the new node will live on; it may run in a worker thread for VADD CAS) and ``commit`` (on the
loop: link the node). Linking, per level, walks the candidates nearest first and accepts one
when no already accepted neighbour is nearer to it than the new node (the HNSW heuristic that
keeps links diverse), until the node has ``M`` links. A candidate with no free link slot gives
up its farthest link for the new node, but only when the new node is nearer than that link and
the node losing the link keeps more than ``M/2`` links. A node left with fewer than ``M/2``
level-0 links is linked again without the diversity rule (and the losing node may keep only
``M/4``), then, below ``M/4``, by taking over a well-connected link of a full candidate.

Deletion unlinks the node, pairs its former neighbours with each other (nearest pairs first,
where both have room), and links a neighbour that found no partner through a fresh search.
Small sets (``EXACT_BUILD_MAX`` nodes, or more while nodes x dimensions stays under
``EXACT_BUILD_WORK``) collect their candidates with an exact scan: faster than a walk in Python
at that size, and a better graph.
"""

from __future__ import annotations

import numpy as np

from pion.vector.vset import kernel, quant
from pion.vector.vset.graph import Graph, Hit

#: collect insertion candidates by an exact scan up to this many nodes, and beyond while
#: nodes x dimensions stays under EXACT_BUILD_WORK (measured: 8,000 x 128 Q8 builds 1.5x faster
#: than with walks past 2,048, at the same recall; at 16,000 x 128 the walk is cheaper again)
EXACT_BUILD_MAX = 2048
EXACT_BUILD_WORK = 1 << 20
#: candidates Redis collects when repairing links after a deletion (HNSW_EF_C)
REPAIR_EF = 200


# -- link lists on any level ----------------------------------------------------------------


def _max_links(g: Graph, level: int) -> int:
    return g.m0 if level == 0 else g.m


def _count(g: Graph, slot: int, level: int) -> int:
    if level == 0:
        return int(g.n0[slot])
    layers = g.upper.get(slot)
    return int(layers[level - 1, 0]) if layers is not None and level <= len(layers) else 0


def _add(g: Graph, slot: int, other: int, level: int) -> None:
    if level == 0:
        n = g.n0[slot]
        g.links0[slot, n] = other
        g.n0[slot] = n + 1
    else:
        row = g.upper[slot][level - 1]
        n = row[0]
        row[1 + n] = other
        row[0] = n + 1


def _remove(g: Graph, slot: int, other: int, level: int) -> bool:
    if level == 0:
        row, counts, base = g.links0[slot], g.n0, slot
    else:
        layers = g.upper.get(slot)
        if layers is None or level > len(layers):
            return False
        row, counts, base = layers[level - 1, 1:], layers[:, 0], level - 1
    n = int(counts[base])
    where = np.flatnonzero(row[:n] == other)
    if not where.size:
        return False
    i = int(where[0])
    row[i : n - 1] = row[i + 1 : n].copy()
    if level == 0:
        row[n - 1] = -1
    counts[base] = n - 1
    return True


def _replace(g: Graph, slot: int, old: int, new: int, level: int) -> None:
    if level == 0:
        n = int(g.n0[slot])
        where = np.flatnonzero(g.links0[slot, :n] == old)
        g.links0[slot, int(where[0])] = new
    else:
        row = g.upper[slot][level - 1]
        where = np.flatnonzero(row[1 : 1 + row[0]] == old)
        row[1 + int(where[0])] = new


# -- insertion --------------------------------------------------------------------------------


def candidates(g: Graph, probe: np.ndarray, level: int, ef: int) -> list[list[Hit]]:
    """Per level 0..min(level, top): the nodes to try linking a new node to, nearest first (with
    the compiled kernel, walks give them as its ``Found``, which reads as these lists)."""
    if g.entry < 0:
        return []
    k = kernel.impl
    if g.count > EXACT_BUILD_MAX and g.count * g.dim > EXACT_BUILD_WORK:
        if k is not None:  # the same lists, kept in C until the linking reads them
            return k.packed_candidates(g, probe, level, ef)
        return g.layer_candidates(probe, level, ef)
    if k is not None:
        return k.exact_candidates(g, probe, level, ef)
    slots = g.live_slots()
    if not slots.size:
        return []
    ds = g.dist(probe, slots)
    order = np.argsort(ds, kind="stable")
    slots, ds = slots[order], ds[order]
    levels = g.levels[slots]
    found = []
    for lc in range(min(level, g.max_level) + 1):
        on_level = levels >= lc
        found.append(list(zip(ds[on_level][:ef].tolist(), slots[on_level][:ef].tolist(), strict=False)))
    return found


def commit(g: Graph, slot: int, level: int, found: list[list[Hit]]) -> None:
    """Link a node already stored with ``add_slot`` using the candidates of ``candidates``
    (taken now or earlier: candidates that died meanwhile are skipped)."""
    if g.entry < 0:
        g.entry, g.max_level = slot, level
        g.epoch += 1
        return
    k = kernel.impl
    if k is not None:
        k.commit_links(g, slot, level, found)
    else:
        _commit_links(g, slot, level, found)
    if level > g.max_level:
        g.entry, g.max_level = slot, level
        g.epoch += 1


def _commit_links(g: Graph, slot: int, level: int, found: list[list[Hit]]) -> None:
    for lc in range(min(level, g.max_level), -1, -1):
        hits = _still_there(g, found[lc], slot, lc) if lc < len(found) else []
        _select(g, slot, hits, lc, g.m, 0)
        if lc == 0 and g.n0[slot] < g.m // 2:
            _select(g, slot, hits, 0, g.m, 1)
            if g.n0[slot] < g.m // 4:
                _select(g, slot, hits, 0, g.m, 2)


def _still_there(g: Graph, hits: list[Hit], slot: int, level: int) -> list[Hit]:
    """The candidates still alive on ``level`` (a CAS insert's were collected earlier)."""
    if not hits:
        return hits
    slots = np.fromiter((s for _, s in hits), dtype=np.int64, count=len(hits))
    ok = (g.levels[slots] >= level) & (slots != slot)
    return hits if ok.all() else [hit for hit, good in zip(hits, ok.tolist(), strict=True) if good]


def insert(g: Graph, row: np.ndarray, rng: float, norm: float, ef: int, level: int | None = None) -> int:
    """Store and link one node (its encoded row, Q8 range and norm); returns its slot."""
    level = Graph.random_level() if level is None else level
    found = candidates(g, g.probe(row, rng), level, ef)
    slot = g.add_slot(row, rng, norm, level)
    commit(g, slot, level, found)
    return slot


def _select(g: Graph, new: int, hits: list[Hit], level: int, required: int, aggressive: int) -> None:
    """Link ``new`` to candidates (see the module docstring for the three levels of effort).

    The diversity rule needs each candidate's distance to the neighbours accepted so far:
    ``nearest[i]`` keeps candidate i's distance to the nearest accepted one, updated with one
    matrix-vector product per accepted neighbour. The compiled kernel does the same in C."""
    k = kernel.impl
    if k is not None:
        k.select(g, new, hits, level, required, aggressive)
        return
    limit = _max_links(g, level)
    linked = set(g.links(new, level))
    if not hits:
        return
    slots = np.array([s for _, s in hits], dtype=np.int32)
    near: list[float] = []
    if aggressive == 0:
        rows, ranges = g.rows[slots], g.ranges[slots]
        nearest = np.full(len(hits), np.inf, dtype=np.float32)
        for other in linked:
            nearest = np.minimum(nearest, quant.distances(rows, ranges, g.node_probe(other), g.quant, g.dim))
        near = nearest.tolist()
    count = _count(g, new, level)
    for i, cand in enumerate(slots.tolist()):
        if count >= limit or count >= required:
            return
        if cand in linked:
            continue
        d = hits[i][0]
        if near and near[i] < d:
            continue
        if _count(g, cand, level) < limit:
            _add(g, cand, new, level)
            _add(g, new, cand, level)
        elif not _take_link(g, new, cand, d, level, aggressive):
            continue
        linked.add(cand)
        count += 1
        if near:
            nearest = np.minimum(nearest, quant.distances(rows, ranges, g.node_probe(cand), g.quant, g.dim))
            near = nearest.tolist()


def _take_link(g: Graph, new: int, cand: int, d: float, level: int, aggressive: int) -> bool:
    """``cand`` is full: give ``new`` the slot of one of its links, if the rules allow."""
    current = np.array(g.links(cand, level), dtype=np.int32)
    if not current.size:
        return False
    ds = g.node_dist(cand, current)
    worst = int(np.argmax(ds))
    if aggressive == 0 and d >= ds[worst]:
        return False
    keep = g.m // 2 if aggressive == 0 else g.m // 4
    if _count(g, int(current[worst]), level) <= keep:
        if aggressive < 2:
            return False
        well_linked = [i for i, s in enumerate(current.tolist()) if _count(g, s, level) > keep]
        if not well_linked:
            return False
        worst = max(well_linked, key=lambda i: ds[i])
    dropped = int(current[worst])
    _remove(g, dropped, cand, level)
    _replace(g, cand, dropped, new, level)
    _add(g, new, cand, level)
    return True


# -- deletion ---------------------------------------------------------------------------------


def delete(g: Graph, slot: int) -> None:
    """Unlink and free a node, then repair the links its neighbours lost."""
    level = int(g.levels[slot])
    former = [g.links(slot, lc) for lc in range(level + 1)]
    for lc, nodes in enumerate(former):
        for other in nodes:
            _remove(g, other, slot, lc)
    g.release_slot(slot)
    g.epoch += 1
    if g.entry == slot:
        _new_entry(g)
    for lc, nodes in enumerate(former):
        _reconnect(g, [s for s in nodes if g.levels[s] >= lc], lc)


def _new_entry(g: Graph) -> None:
    live = g.live_slots()
    if not live.size:
        g.entry, g.max_level = -1, 0
        return
    best = int(np.argmax(g.levels[live]))
    g.entry = int(live[best])
    g.max_level = int(g.levels[g.entry])


def _reconnect(g: Graph, nodes: list[int], level: int) -> None:
    """Pair the former neighbours of a deleted node, nearest pairs first; search for the rest."""
    if not nodes:
        return
    limit = _max_links(g, level)
    arr = np.array(nodes, dtype=np.int32)
    matrix = g.pair_matrix(arr) if len(nodes) > 1 else np.zeros((1, 1), dtype=np.float32)
    paired = [False] * len(nodes)
    order = np.dstack(np.unravel_index(np.argsort(matrix, axis=None), matrix.shape))[0]
    for i, j in order.tolist():
        if i >= j or paired[i] or paired[j]:
            continue
        a, b = nodes[i], nodes[j]
        if _count(g, a, level) >= limit or _count(g, b, level) >= limit or b in g.links(a, level):
            continue
        _add(g, a, b, level)
        _add(g, b, a, level)
        paired[i] = paired[j] = True
    for i, node in enumerate(nodes):
        if paired[i] or _count(g, node, level) >= limit:
            continue
        wanted = _count(g, node, level) + 1
        local = [(float(matrix[i, j]), nodes[j]) for j in np.argsort(matrix[i]).tolist()
                 if j != i and _count(g, nodes[j], level) < limit]
        _select(g, node, local, level, wanted, 1)
        if _count(g, node, level) >= wanted or g.entry < 0:
            continue
        found = g.layer_candidates(g.node_probe(node), level, REPAIR_EF, lowest=level)
        hits = found[level] if level < len(found) else []
        hits = [(d, s) for d, s in hits if s != node]
        _select(g, node, hits, level, wanted, 1 if _count(g, node, level) > g.m // 2 else 2)
