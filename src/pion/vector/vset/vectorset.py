"""A vector set: named elements, each with a vector and optional JSON attributes, in one HNSW.

This is the value stored under a key (TYPE answers ``vectorset``). It owns the graph plus the
element names and attributes by slot, and a name -> slot index. Inserting an element that
exists replaces its vector (a new node, as in Redis). The random projection of REDUCE is
Redis's deterministic matrix, stored with the set.

Reads that may run in a worker thread (``search``) return slots with their node ids; the loop
turns them into elements with ``resolve``, which drops any slot whose node changed meanwhile.
Attributes are parsed for FILTER on first use and cached with the exact string they came from,
so a concurrent VSETATTR can never leave a stale parse behind.
"""

from __future__ import annotations

import itertools
import random
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

import numpy as np

from pion.storage.budget import UNLIMITED, Budget
from pion.vector.vset import build, quant
from pion.vector.vset.attrs import parse_attributes
from pion.vector.vset.expr import Filter
from pion.vector.vset.graph import DEFAULT_M, Graph

#: up to this many elements VSIM scans exactly: faster than a graph walk in Python, and exact
#: (with a FILTER, among the FILTER-EF nearest elements)
EXACT_SEARCH_MAX = 4096
#: VSIM's exploration factor when none is given (VSET_DEFAULT_SEARCH_EF)
DEFAULT_SEARCH_EF = 100
#: VADD's exploration factor when none is given (VSET_DEFAULT_C_EF)
DEFAULT_BUILD_EF = 200
MAX_DIM = 1 << 16

_uids = itertools.count()

Match = tuple[float, int, int]  # (distance, slot, node uid)
#: FILTER verdicts cached per element (for that many different expressions)
_VERDICTS_KEPT = 4


class VectorSet:
    __slots__ = ("graph", "index", "names", "attrs", "parsed", "proj", "proj_in", "uid", "numattribs", "_sorted",
                 "generation")

    def __init__(self, dim: int, quant_type: int = quant.Q8, m: int = DEFAULT_M, proj_in: int = 0) -> None:
        self.graph = Graph(dim, quant_type, m)
        self.index: dict[bytes, int] = {}
        self.names: list[bytes | None] = []
        self.attrs: list[bytes | None] = []
        self.parsed: list[tuple[bytes, Any, dict] | None] = []
        self.proj_in = proj_in
        self.proj = quant.projection_matrix(proj_in, dim) if proj_in else None
        self.uid = next(_uids)
        self.numattribs = 0
        self._sorted: list[bytes] | None = None
        #: bumped when slots are renumbered (compaction): a search that saw it change starts over
        self.generation = 0

    # -- shape ---------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        return self.graph.dim

    @property
    def quant(self) -> int:
        return self.graph.quant

    def __len__(self) -> int:
        return len(self.index)

    def dup(self) -> VectorSet:
        """An independent copy (COPY), through the stored form (the codec ``persist`` registers)."""
        from pion.storage.serialize import dump_value, load_value

        return load_value(dump_value(self))

    def unit(self, vec: np.ndarray, projected: bool = False) -> tuple[np.ndarray, float]:
        """A query or new vector as stored: projected when the set has REDUCE (unless it already
        is, as an element's own vector is), then normalized."""
        if self.proj is not None and not projected:
            vec = quant.project(vec, self.proj)
        return quant.normalize(vec)

    # -- writes ----------------------------------------------------------------------------

    def add(self, name: bytes, vec: np.ndarray, attr: bytes | None, ef: int = DEFAULT_BUILD_EF,
            found: list | None = None, level: int | None = None) -> bool:
        """Insert or update ``name``; True if it is new. ``attr`` None keeps the attributes of
        an existing element, b"" removes them. ``found``/``level``: a CAS insert's candidates."""
        unit, norm = self.unit(vec)
        row, rng = self.graph.encode(unit)
        existing = self.index.get(name)
        if existing is not None:
            if attr is None:
                attr = self.attrs[existing]
            self._drop(name, existing)
        g = self.graph
        level = Graph.random_level() if level is None else level
        if found is None:
            found = build.candidates(g, g.probe(row, rng), level, ef)
        slot = g.add_slot(row, rng, norm, level)
        self._place(slot, name, attr or None)
        build.commit(g, slot, level, found)
        return existing is None

    def _place(self, slot: int, name: bytes, attr: bytes | None) -> None:
        while len(self.names) <= slot:
            self.names.append(None)
            self.attrs.append(None)
            self.parsed.append(None)
        self.names[slot] = name
        self.attrs[slot] = attr
        self.parsed[slot] = None
        self.index[name] = slot
        self.numattribs += attr is not None
        self._sorted = None

    def remove(self, name: bytes) -> bool:
        slot = self.index.get(name)
        if slot is None:
            return False
        self._drop(name, slot)
        self._maybe_compact()
        return True

    def _drop(self, name: bytes, slot: int) -> None:
        del self.index[name]
        self.numattribs -= self.attrs[slot] is not None
        self.names[slot] = self.attrs[slot] = self.parsed[slot] = None
        self._sorted = None
        build.delete(self.graph, slot)

    def set_attr(self, name: bytes, attr: bytes) -> bool:
        slot = self.index.get(name)
        if slot is None:
            return False
        new = attr or None
        self.numattribs += (new is not None) - (self.attrs[slot] is not None)
        self.attrs[slot] = new
        self.parsed[slot] = None
        return True

    def _maybe_compact(self) -> None:
        """Give memory back after many removals: renumber the slots when under a quarter are used."""
        g = self.graph
        if g.cap < 64 or g.count * 4 > g.cap:
            return
        self.generation += 1
        remap = g.compact()
        live = np.flatnonzero(remap >= 0).tolist()
        self.names = [self.names[s] for s in live]
        self.attrs = [self.attrs[s] for s in live]
        self.parsed = [None] * len(live)
        self.index = {name: i for i, name in enumerate(self.names)}

    # -- reads -----------------------------------------------------------------------------

    def slot_of(self, name: bytes) -> int | None:
        return self.index.get(name)

    def embedding(self, slot: int) -> np.ndarray:
        g = self.graph
        return quant.decode(g.rows[slot], float(g.ranges[slot]), float(g.norms[slot]), g.quant, g.dim)

    def raw(self, slot: int) -> tuple[str, bytes, float, float | None]:
        """VEMB RAW: encoding name, stored bytes, norm and (Q8) range."""
        g = self.graph
        rng = float(g.ranges[slot]) if g.quant == quant.Q8 else None
        return quant.QUANT_NAMES[g.quant], g.rows[slot].tobytes(), float(g.norms[slot]), rng

    def accept(self, flt: Filter, budget: Budget = UNLIMITED) -> Callable[[int], bool]:
        """The predicate a filtered search calls per slot (any thread). An element's parsed
        attributes, and the verdicts of the last few expressions on them, are cached with the
        exact attribute string they came from: a VSETATTR replaces the string, so a stale entry
        can never be used, even one written by a search that raced with it."""
        attrs, parsed, source = self.attrs, self.parsed, flt.source
        tick = budget.tick
        cost = 1 + len(source) // 16  # a long expression ticks the budget more per element

        def accept(slot: int) -> bool:
            tick(cost)  # past the budget: QueryTimeout, the command's error
            raw = attrs[slot]
            if raw is None:
                return False
            cached = parsed[slot]
            if cached is None or cached[0] is not raw:
                cached = parsed[slot] = (raw, parse_attributes(raw), {})
            verdicts = cached[2]
            verdict = verdicts.get(source)
            if verdict is None:
                if len(verdicts) >= _VERDICTS_KEPT:
                    verdicts.clear()
                verdict = verdicts[source] = flt.matches(cached[1])
            return verdict

        return accept

    def search(self, unit: np.ndarray, count: int, ef: int, flt: Filter | None, filter_ef: int,
               truth: bool, budget: Budget = UNLIMITED) -> list[Match]:
        """VSIM's candidates, nearest first: (distance, slot, uid). Safe in a worker thread.
        The FILTER's evaluation ticks ``budget`` (past it: ``QueryTimeout``)."""
        for _ in range(3):
            generation = self.generation
            found = self._search(unit, count, ef, flt, filter_ef, truth, budget)
            if self.generation == generation:
                return found
        return []

    def _search(self, unit, count, ef, flt, filter_ef, truth, budget: Budget = UNLIMITED) -> list[Match]:
        g = self.graph
        ef = max(ef or DEFAULT_SEARCH_EF, count)
        row, rng = g.encode(unit)
        probe = g.probe(row, rng)
        accept = self.accept(flt, budget) if flt is not None else None
        size = g.count
        if truth:
            hits = g.exact(probe, min(count, size), accept)  # exact: the first COUNT are final
        elif size <= EXACT_SEARCH_MAX:  # FILTER-EF bounds how many nearest ones are examined
            hits = g.exact(probe, min(count, size), accept, filter_ef if accept is not None else 0)
        else:  # the walk cuts to COUNT and clamps (in C where the kernel is built)
            return g.search(probe, min(ef, size), accept, filter_ef if accept is not None else 0, count, True)
        return [(quant.clamp(d), s, uid) for d, s, uid in hits[:count]]

    def resolve(self, matches: list[Match], fresh: bool = False) -> list[tuple[bytes, float, bytes | None]]:
        """On the loop: (element, distance, attributes) for the matches still current.
        ``fresh``: the search ran on the loop just now (inline), so nothing changed since and
        every match is current without a check."""
        if not matches:
            return []
        g, names, attrs = self.graph, self.names, self.attrs
        if fresh:
            return [(names[s], d, attrs[s]) for d, s, _ in matches]
        slots = [s for _, s, _ in matches]
        if max(slots) >= g.cap:  # compacted meanwhile: check them one by one
            return [(names[s], d, attrs[s]) for d, s, uid in matches if g.alive(s, uid) and names[s] is not None]
        # one numpy check for all (a search that ran in a worker may meet nodes changed meanwhile)
        idx = np.array(slots, dtype=np.intp)
        want = np.fromiter((uid for _, _, uid in matches), dtype=np.int64, count=len(matches))
        ok = ((g.levels[idx] >= 0) & (g.uids[idx] == want)).tolist()
        return [(names[s], d, attrs[s]) for (d, s, _), good in zip(matches, ok, strict=True)
                if good and names[s] is not None]

    def links(self, slot: int) -> list[list[tuple[bytes, float]]]:
        """VLINKS: per level from the top down, each neighbour with its distance."""
        g = self.graph
        out = []
        for level in range(int(g.levels[slot]), -1, -1):
            nb = np.array(g.links(slot, level), dtype=np.int32)
            ds = [quant.clamp(d) for d in g.node_dist(slot, nb).tolist()] if nb.size else []
            out.append([(self.names[s], d) for s, d in zip(nb.tolist(), ds, strict=False)])
        return out

    def random_members(self, count: int) -> list[bytes]:
        """VRANDMEMBER with a count: distinct when positive (at most all), repeats when negative."""
        g, names = self.graph, self.names
        if count < 0:  # one C call for the picks (a Python call per pick took seconds for millions)
            return random.choices(self.live_names(), k=-count)
        if count >= len(self.index):
            out = list(self.index)
            random.shuffle(out)
            return out
        if count * 5 <= len(self.index):
            picked: dict[int, None] = {}
            while len(picked) < count:
                picked[g.random_slot()] = None
            return [names[s] for s in picked]
        slots = np.random.default_rng().choice(g.live_slots(), size=count, replace=False)
        return [names[s] for s in slots.tolist()]

    def live_names(self) -> list[bytes]:
        """Every element's name (a snapshot, in slot order)."""
        names = self.names
        return [names[s] for s in self.graph.live_slots().tolist()]

    def random_member(self) -> bytes:
        return self.names[self.graph.random_slot()]

    def lex_range(self, start: bytes | None, start_incl: bool, end: bytes | None, end_incl: bool,
                  count: int) -> list[bytes]:
        """VRANGE: names in byte order from start to end (None = open), at most ``count`` (< 0: all)."""
        if self._sorted is None:
            self._sorted = sorted(self.index)
        names = self._sorted
        lo = 0 if start is None else (bisect_left(names, start) if start_incl else bisect_right(names, start))
        hi = len(names) if end is None else (bisect_right(names, end) if end_incl else bisect_left(names, end))
        if count >= 0:
            hi = min(hi, lo + count)
        return names[lo:hi] if lo < hi else []

    def info(self) -> dict[str, Any]:
        g = self.graph
        return {
            "quant-type": quant.QUANT_NAMES[g.quant],
            "hnsw-m": g.m,
            "vector-dim": g.dim,
            "projection-input-dim": self.proj_in,
            "size": len(self.index),
            "max-level": g.max_level,
            "attributes-count": self.numattribs,
            "vset-uid": self.uid,
            "hnsw-max-node-uid": g.last_id,
        }

    def nbytes(self) -> int:
        """Memory held: the graph's arrays, names and attributes (sampled), the index."""
        n = len(self.index)
        sample = list(itertools.islice(self.index, 32))
        name_bytes = sum(len(s) + 33 for s in sample) * n // max(1, len(sample))
        attr_sample = [a for a in itertools.islice(self.attrs, 256) if a is not None]
        attr_bytes = (sum(len(a) + 33 for a in attr_sample) // max(1, len(attr_sample))) * self.numattribs
        proj = self.proj.nbytes if self.proj is not None else 0
        return (200 + self.graph.nbytes() + name_bytes + attr_bytes + n * 100 + proj + len(self.names) * 24
                + self._parsed_bytes())

    def _parsed_bytes(self) -> int:
        """The FILTER caches: the share of sampled slots holding one, times a sampled entry's size."""
        sample = self.parsed[:: max(1, len(self.parsed) // 64)]
        held = [entry for entry in sample if entry is not None]
        if not held:
            return 0
        entry = held[0]
        one = 64 + sys.getsizeof(entry[1] or {}) + sys.getsizeof(entry[2]) + sum(
            sys.getsizeof(k) + sys.getsizeof(v) for k, v in (entry[1] or {}).items())
        return one * len(held) * len(self.parsed) // len(sample)
