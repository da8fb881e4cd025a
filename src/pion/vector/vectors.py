"""Vector fields: exact FLAT search with numpy, HNSW and SVS-VAMANA with usearch, and KNN/range queries.

Every vector lives in a row of one float32 matrix (a *slot*; COSINE rows are stored unit-length,
so cosine distance is ``1 - dot``); the matrix is what FLAT scans, what a filtered query
brute-forces (ADHOC_BF) and what feeds the graph. For HNSW the graph is filled off the event loop:
a write puts its row in the matrix at once and queues it; one builder thread adds queued rows to
the usearch graph in batches (``hnsw_graph.HnswGraph``; usearch releases the GIL and builds with
several threads). Until a row is in the graph it is *pending*, and every query scans the pending
rows exactly, so a write is visible to the next query whatever the builder's backlog. Each slot carries a version: the
graph's copy of a slot counts only while its version is the live one, so an updated or deleted
vector never answers from a stale graph entry.

Threading: writes (``put``/``remove``) run on the event loop; ``plan_*`` captures what a query
needs on the loop and returns a job that may run in a worker thread. Freed slots are recycled
only when no job is in flight, so a job never reads a row that was reused under it.

Distances are RediSearch's: L2 is the squared Euclidean distance, IP is ``1 - dot``, COSINE is
``1 - cos``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pion.protocol.errors import ReplyError
from pion.vector.hnsw_graph import HnswGraph
from pion.vector.ranking import EMPTY_DISTS as _EMPTY_DISTS
from pion.vector.ranking import EMPTY_IDS as _EMPTY_IDS
from pion.vector.ranking import best_per_doc as _best_per_doc
from pion.vector.ranking import gather as _gather
from pion.vector.schema import PREALLOCATE_MAX, VectorParams

#: the hybrid policy (RediSearch's ADHOC_BF or BATCHES, when the query names none): a filtered KNN
#: scans the allowed rows exactly when that costs less than the graph search it replaces. A graph
#: search at window ``w`` computes about ``w * M / 2`` distances (usearch, measured: ~500 at EF 64,
#: M 16), each about ``GRAPH_ROW_COST`` times a row of numpy's scan (random access, per-call
#: overhead), plus ``ADHOC_FLOOR`` rows' worth of fixed cost per call; the window of a filtered
#: search is widened to ``k / selectivity`` (so that about k allowed results come back)
GRAPH_ROW_COST = 4
ADHOC_FLOOR = 2048


def usearch_available() -> bool:
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


class VectorField:
    def __init__(self, params: VectorParams) -> None:
        self.params = params
        self.dim = params.dim
        self.metric = params.metric
        # INITIAL_CAP is a hint: a few rows up front, then doubling (10^9 would be allocated at once)
        capacity = max(16, min(params.initial_cap or 0, PREALLOCATE_MAX))
        self.rows = np.zeros((capacity, self.dim), dtype=np.float32)
        self.sq_norms = np.zeros(capacity, dtype=np.float32)  # L2 only
        self.slot_doc = np.full(capacity, -1, dtype=np.int64)
        self.slot_ver = np.zeros(capacity, dtype=np.int64)  # 0: dead
        self.high = 0  # slots ever used
        #: doc id -> its slot (an int), or a list of slots for a multi-vector JSON document
        self.doc_slots: dict[int, int | list[int]] = {}
        self.count = 0  # live vectors
        #: doc id -> its single slot (-1: none or several), so a prefilter maps to slots in numpy
        self.slot_of_doc = np.full(1024, -1, dtype=np.int64)
        self._free: list[int] = []
        self._free_later: list[int] = []
        self._version = 0
        self.in_flight = 0
        #: running costs of a search (seconds): per row of an exact scan, per graph search
        self._row_cost = 2e-8
        self._graph_cost = 2e-4
        self._flight_lock = threading.Lock()
        self.graph: HnswGraph | None = None
        #: a saved graph the rebuild scan is claiming (``graph_store.LoadedGraph``), until it ends
        self._restore: Any = None
        self._taken: np.ndarray | None = None  # restore: slot -> claimed by a document
        #: restore counts: graph entries documents claimed, entries nobody claimed (removed)
        self.restored = 0
        self.dropped = 0
        if params.algorithm in ("HNSW", "SVS-VAMANA"):
            if not usearch_available():
                raise ReplyError(f"ERR {params.algorithm} vector fields need the usearch library: pip install 'pion[search]'")
            if params.algorithm == "HNSW":
                self.graph = HnswGraph(params, self)
            else:
                from pion.vector.svs_graph import SvsGraph

                self.graph = SvsGraph(params, self)

    # -- writes (event loop) --------------------------------------------------------------------

    def __len__(self) -> int:
        return self.count

    def put(self, doc_id: int, rows: np.ndarray, key: bytes | None = None) -> None:
        """Store the document's vector(s) (replacing any it had). While a saved graph is being
        restored, ``key`` lets the document claim its entries there instead of queueing them."""
        self.remove(doc_id)
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if self.metric == "COSINE":
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
        claimed = self._claim(key, rows) if self._restore is not None and key is not None else None
        slots = []
        for i, row in enumerate(rows):
            slot = self._take_slot() if claimed is None else claimed[i]
            self.rows[slot] = row
            if self.metric == "L2":
                self.sq_norms[slot] = float(row @ row)
            self._version += 1
            self.slot_ver[slot] = self._version
            self.slot_doc[slot] = doc_id
            slots.append(slot)
            if claimed is not None:
                self.graph.mark_current(slot, self._version)  # type: ignore[union-attr]
            elif self.graph is not None:
                self.graph.enqueue(slot, self._version, row)
        self.doc_slots[doc_id] = slots[0] if len(slots) == 1 else slots
        self.count += len(slots)
        if doc_id >= len(self.slot_of_doc):
            grown = np.full(max(doc_id + 1, 2 * len(self.slot_of_doc)), -1, dtype=np.int64)
            grown[: len(self.slot_of_doc)] = self.slot_of_doc
            self.slot_of_doc = grown
        self.slot_of_doc[doc_id] = slots[0] if len(slots) == 1 else -1

    def remove(self, doc_id: int) -> None:
        slots = self.doc_slots.pop(doc_id, None)
        if slots is None:
            return
        if slots.__class__ is int:
            slots = [slots]
        self.count -= len(slots)
        if doc_id < len(self.slot_of_doc):
            self.slot_of_doc[doc_id] = -1
        for slot in slots:
            self.slot_ver[slot] = 0
            self.slot_doc[slot] = -1
            if self.graph is not None:
                self.graph.enqueue(slot, 0, None)
            (self._free_later if self.in_flight else self._free).append(slot)

    def clear(self) -> None:
        for doc_id in list(self.doc_slots):
            self.remove(doc_id)
        self.finish_restore()

    # -- a saved graph, loaded at start (graph_store) --------------------------------------------

    def adopt_graph(self, loaded: Any) -> bool:
        """Take a loaded graph in place of the empty one; documents then claim its entries
        (``put`` with their key) until ``finish_restore``. Only into an empty, idle field."""
        if self.graph is None or self.high or self.count or not self.graph.adopt(loaded):
            return False
        while len(self.rows) < loaded.high:
            self._grow()
        self.high = loaded.high
        self._taken = np.zeros(loaded.high, dtype=bool)
        self._restore = loaded
        return True

    def _claim(self, key: bytes, rows: np.ndarray) -> list[int] | None:
        """The saved slots holding exactly these rows under this key, or None (queue them)."""
        restore, taken = self._restore, self._taken
        saved = restore.claims.pop(key, None)
        if not saved or len(saved) < len(rows):
            return None
        position, vectors = restore.position, restore.vectors
        claim_rows = getattr(self.graph, "claim_rows", None)
        if claim_rows is not None:  # a compressed SVS-VAMANA graph holds codes
            rows = claim_rows(rows)
        free = [s for s in saved if 0 <= s < len(position) and position[s] >= 0 and not taken[s]]
        out = []
        for row in rows:
            for j, slot in enumerate(free):
                if np.array_equal(vectors[position[slot]], row):
                    out.append(slot)
                    del free[j]
                    break
            else:
                return None
        for slot in out:
            taken[slot] = True
        self.restored += len(out)
        return out

    def finish_restore(self) -> None:
        """The rebuild scan is over: entries no document claimed leave the graph, their slots
        are free, and the loaded vectors are let go."""
        restore, taken = self._restore, self._taken
        if restore is None or taken is None:
            return
        self._restore = self._taken = None
        loose = np.nonzero(~taken)[0]
        in_graph = restore.position[loose] >= 0
        for slot in loose[in_graph].tolist():
            self.graph.enqueue(slot, 0, None)  # type: ignore[union-attr]
        self.dropped += int(in_graph.sum())
        (self._free_later if self.in_flight else self._free).extend(loose.tolist())

    def restoring(self) -> bool:
        return self._restore is not None

    def graph_image(self, docs: dict[int, bytes]) -> tuple[np.ndarray, list[bytes]]:
        """(slots, keys) of the graph entries that hold their slot's live vector (on the loop)."""
        graph = self.graph
        assert graph is not None
        gv = graph.graph_ver
        n = min(self.high, len(gv))
        live = self.slot_ver[:n]
        slots = np.nonzero((live > 0) & (gv[:n] == live))[0]
        keys = [docs[d] for d in self.slot_doc[slots].tolist()]
        return slots.astype(np.uint64), keys

    def _take_slot(self) -> int:
        if not self.in_flight and self._free_later:
            self._free.extend(self._free_later)
            self._free_later.clear()
        if self._free:
            return self._free.pop()
        if self.high >= len(self.rows):
            self._grow()
        slot = self.high
        self.high += 1
        return slot

    def _grow(self) -> None:
        size = len(self.rows) * 2
        for name in ("rows", "sq_norms", "slot_doc", "slot_ver"):
            old = getattr(self, name)
            fill = -1 if name == "slot_doc" else 0
            new = np.full((size,) + old.shape[1:], fill, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)  # jobs in flight keep the old arrays alive and unchanged

    def memory_bytes(self) -> int:
        total = self.rows.nbytes + self.sq_norms.nbytes + self.slot_doc.nbytes + self.slot_ver.nbytes
        if self.graph is not None:
            total += self.graph.memory_bytes()
        return total

    def close(self) -> None:
        if self.graph is not None:
            self.graph.close()

    # -- queries --------------------------------------------------------------------------------

    def query_error(self, knn: Any) -> str | None:
        """The error VecSim's resolver gives a KNN clause's parameters on this field, or None:
        EF_RUNTIME is HNSW's alone, SEARCH_WINDOW_SIZE / SEARCH_BUFFER_CAPACITY /
        USE_SEARCH_HISTORY SVS-VAMANA's (``query_knn`` has checked their values)."""
        svs = self.params.algorithm == "SVS-VAMANA"
        if (svs and knn.ef_runtime) or (knn.svs and not svs):
            return "Error parsing vector similarity parameters: Invalid option"
        return None

    def prepare_query(self, blob: bytes) -> np.ndarray:
        from pion.vector.documents import NUMPY_TYPES

        params = self.params
        if len(blob) != params.blob_size:
            raise ReplyError("Error parsing vector similarity query: query vector blob size "
                             f"({len(blob)}) does not match index's expected size ({params.blob_size}).")
        # a view of the argument for FLOAT32 (no copy; the searches only read it)
        query = np.frombuffer(blob, dtype=NUMPY_TYPES[params.data_type]).astype(np.float32, copy=False)
        if self.metric == "COSINE":
            norm = math.sqrt(float(query.dot(query)))
            if norm > 0:
                query = query * (1.0 / norm)
        return query

    def _distances(self, rows: np.ndarray, norms: np.ndarray, query: np.ndarray) -> np.ndarray:
        # einsum, not ``rows @ query``: OpenBLAS's threaded sgemv measured 2-20x slower here on a
        # busy 2-core box (it spins threads per call); einsum's loop is single-threaded and steady
        dots = np.einsum("ij,j->i", rows, query)
        if self.metric == "L2":
            with np.errstate(over="ignore", invalid="ignore"):
                out = np.maximum(norms - 2.0 * dots + float(query @ query), 0.0)
            # components near float32's range overflow the expansion to inf - inf: the distance is
            # infinite, as RediSearch's sum of squares gives it (ranked last, ties by doc id)
            out[np.isnan(out)] = np.inf
            return out
        return 1.0 - dots

    def choose_policy(self, k: int, allowed_rows: int | None, ef: int | None, policy: str | None) -> str:
        """``ADHOC_BF`` (exact scan of the allowed rows) or ``BATCHES`` (graph search, widened
        while the filter rejects), as RediSearch chooses when the query names no policy."""
        if self.graph is None:
            return "ADHOC_BF"
        if policy is not None:
            return policy
        if allowed_rows is None:
            return "BATCHES"
        fraction = max(allowed_rows / max(len(self), 1), 1e-9)
        window = max(ef or self.params.ef_runtime, int(1.2 * k / fraction) + 1)
        graph_cost = GRAPH_ROW_COST * window * max(self.params.m, 2) // 2 + ADHOC_FLOOR
        return "ADHOC_BF" if allowed_rows <= graph_cost else "BATCHES"

    def plan_knn(self, query: np.ndarray, k: int, allowed: np.ndarray | None, ef: int | None,
                 policy: str | None, batch_size: int | None = None) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        """A job answering (doc ids, distances) of the k nearest documents, nearest first.

        ``allowed`` is a sorted array of the document ids the prefilter kept (None: all);
        ``policy`` and ``batch_size`` are the query's HYBRID_POLICY and BATCH_SIZE (None: chosen
        by ``choose_policy``; BATCHES pages the graph ``batch_size`` results further each round)."""
        self._enter()
        high = self.high
        rows, norms, slot_doc, slot_ver = self.rows, self.sq_norms, self.slot_doc, self.slot_ver
        if allowed is not None:
            slots = self._slots_of(allowed)
        else:
            slots = None
        graph = self.graph
        live_count = len(self)
        brute = self.choose_policy(k, None if slots is None else len(slots), ef, policy) == "ADHOC_BF"
        pending = None if brute else graph.pending_slots(slot_ver)

        scanned = (len(slots) if slots is not None else live_count) if brute else 0

        def job() -> tuple[np.ndarray, np.ndarray]:
            started = time.perf_counter()
            try:
                if brute:
                    cand = slots if slots is not None else np.nonzero(slot_ver[:high] > 0)[0]
                    return self._exact_top(cand, rows, norms, slot_doc, query, k)
                allowed_mask = None
                if slots is not None:
                    allowed_mask = np.zeros(high, dtype=bool)
                    allowed_mask[slots] = True
                return graph.search(query, k, ef or self.params.ef_runtime, pending, allowed_mask,
                                    rows, norms, slot_doc, slot_ver, live_count, self, batch_size)
            finally:
                self._exit()
                self._measured(brute, scanned, time.perf_counter() - started)

        job.expected_s = self._row_cost * scanned if brute else self._graph_cost  # type: ignore[attr-defined]
        job.exact = brute  # type: ignore[attr-defined]
        return job

    def _measured(self, brute: bool, scanned: int, seconds: float) -> None:
        """Keep the running cost of this field's searches (what ``expected_s`` predicts): a
        cheap one is not worth a thread hand-off (the hand-off costs the loop more than it saves).
        A sample counts at most twice the estimate: on a loaded machine a search preempted by other
        processes must not send every later one to the pool, where the hand-off costs the most.
        (Not CPU time: a thread's CPU clock is a system call, slower than the search here.)"""
        if brute:
            if scanned >= 256:
                per_row = min(seconds / scanned, 2.0 * self._row_cost)
                self._row_cost += 0.2 * (per_row - self._row_cost)
        else:
            self._graph_cost += 0.2 * (min(seconds, 2.0 * self._graph_cost) - self._graph_cost)

    def plan_range(self, query: np.ndarray, radius: float, allowed: np.ndarray | None
                   ) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        """A job answering every document within ``radius`` (exact scan), nearest first."""
        self._enter()
        high = self.high
        rows, norms, slot_doc, slot_ver = self.rows, self.sq_norms, self.slot_doc, self.slot_ver
        slots = self._slots_of(allowed) if allowed is not None else None

        def job() -> tuple[np.ndarray, np.ndarray]:
            try:
                cand = slots if slots is not None else np.nonzero(slot_ver[:high] > 0)[0]
                if len(cand) == 0:
                    return _EMPTY_IDS, _EMPTY_DISTS
                dists = self._distances(rows[cand], norms[cand], query)
                keep = dists <= radius
                return _best_per_doc(slot_doc[cand[keep]], dists[keep], None)
            finally:
                self._exit()

        return job

    def _enter(self) -> None:
        with self._flight_lock:
            self.in_flight += 1

    def _exit(self) -> None:
        with self._flight_lock:
            self.in_flight -= 1

    def _slots_of(self, doc_ids: np.ndarray) -> np.ndarray:
        table = self.slot_of_doc
        inside = doc_ids[doc_ids < len(table)]
        single = table[inside]
        out = single[single >= 0]
        if len(self.doc_slots) != self.count:  # some documents have several vectors (JSON arrays)
            extra: list[int] = []
            for doc in inside[single < 0].tolist():
                slots = self.doc_slots.get(doc)
                if slots is not None and slots.__class__ is not int:
                    extra.extend(slots)
            if extra:
                out = np.concatenate([out, np.asarray(extra, dtype=np.int64)])
        return out

    def _exact_top(self, cand: np.ndarray, rows, norms, slot_doc, query, k):
        if len(cand) == 0 or k <= 0:
            return _EMPTY_IDS, _EMPTY_DISTS
        lo, hi = int(cand[0]), int(cand[-1]) + 1
        single = len(self.doc_slots) == self.count  # one vector per document: no per-doc merge
        if hi - lo == len(cand):  # every slot in a run (a scan of all): views, not a copy of the rows
            dists = self._distances(rows[lo:hi], norms[lo:hi], query)
            return _best_per_doc(slot_doc[lo:hi], dists, k, single)
        dists = self._distances(_gather(rows, cand), norms[cand], query)
        docs = slot_doc[cand]
        return _best_per_doc(docs, dists, k, single)
