"""Vector fields: exact FLAT search with numpy, HNSW with usearch, and KNN/range queries.

Every vector lives in a row of one float32 matrix (a *slot*; COSINE rows are stored unit-length,
so cosine distance is ``1 - dot``); the matrix is what FLAT scans, what a filtered query
brute-forces (ADHOC_BF) and what feeds the graph. For HNSW the graph is filled off the event loop:
a write puts its row in the matrix at once and queues it; one builder thread adds queued rows to
the usearch graph in batches (usearch releases the GIL and builds with several threads). Until a
row is in the graph it is *pending*, and every query scans the pending rows exactly, so a write
is visible to the next query whatever the builder's backlog. Each slot carries a version: the
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
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from pion.protocol.errors import ReplyError
from pion.vector.schema import PREALLOCATE_MAX, VectorParams

#: the hybrid policy (RediSearch's ADHOC_BF or BATCHES, when the query names none): a filtered KNN
#: scans the allowed rows exactly when that costs less than the graph search it replaces. A graph
#: search at window ``w`` computes about ``w * M / 2`` distances (usearch, measured: ~500 at EF 64,
#: M 16), each about ``GRAPH_ROW_COST`` times a row of numpy's scan (random access, per-call
#: overhead), plus ``ADHOC_FLOOR`` rows' worth of fixed cost per call; the window of a filtered
#: search is widened to ``k / selectivity`` (so that about k allowed results come back)
GRAPH_ROW_COST = 4
ADHOC_FLOOR = 2048
#: rows the builder adds to the graph per batch
BUILD_BATCH = 512


def usearch_available() -> bool:
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


class _RWLock:
    """Many readers or one writer (graph searches and adds vs. a capacity change)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    def acquire_read(self) -> None:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


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
        self.graph: _Graph | None = None
        #: a saved graph the rebuild scan is claiming (``graph_store.LoadedGraph``), until it ends
        self._restore: Any = None
        self._taken: np.ndarray | None = None  # restore: slot -> claimed by a document
        #: restore counts: graph entries documents claimed, entries nobody claimed (removed)
        self.restored = 0
        self.dropped = 0
        if params.algorithm == "HNSW":
            if not usearch_available():
                raise ReplyError("ERR HNSW vector fields need the usearch library: pip install 'pion[search]'")
            self.graph = _Graph(params, self)

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


_EMPTY_IDS = np.zeros(0, dtype=np.int64)
_EMPTY_DISTS = np.zeros(0, dtype=np.float32)


def _gather(rows: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``rows[cand]``: ``take`` measured 31 us against fancy indexing's 43 us for 2,000 x 128
    (and against 70 us for ``take`` into a reused buffer)."""
    return rows.take(cand, axis=0)


def _best_per_doc(docs: np.ndarray, dists: np.ndarray, k: int | None,
                  single: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Nearest first (ties by doc id), one entry per document (its nearest vector), at most k;
    dead slots dropped. ``single``: every document has one vector (no merge needed)."""
    live = docs >= 0
    if not live.all():
        docs, dists = docs[live], dists[live]
    if len(docs) == 0:
        return _EMPTY_IDS, _EMPTY_DISTS
    if k is not None and len(docs) > 4 * k:
        part = np.argpartition(dists, 4 * k)[: 4 * k]
        docs, dists = docs[part], dists[part]
    order = np.lexsort((docs, dists))
    docs, dists = docs[order], dists[order]
    if single:
        if k is not None:
            docs, dists = docs[:k], dists[:k]
        return docs, dists.astype(np.float32, copy=False)
    _, first = np.unique(docs, return_index=True)
    first.sort()
    docs, dists = docs[first], dists[first]
    if k is not None:
        docs, dists = docs[:k], dists[:k]
    return docs, dists.astype(np.float32)


class _Graph:
    """The usearch HNSW graph of one field, filled by its own builder thread."""

    def __init__(self, params: VectorParams, owner: VectorField) -> None:
        from usearch.index import Index

        metric = {"COSINE": "ip", "IP": "ip", "L2": "l2sq"}[params.metric]
        self.index = Index(ndim=params.dim, metric=metric, dtype="f32", connectivity=params.m,
                           expansion_add=params.ef_construction, expansion_search=params.ef_runtime)
        self.default_ef = params.ef_runtime
        self.lock = _RWLock()
        self.ef_lock = threading.Lock()
        self.graph_ver = np.zeros(0, dtype=np.int64)  # slot -> version in the graph (0: none)
        self.queue: deque = deque()
        self.queue_cond = threading.Condition()
        self.pending: set[int] = set()
        self.closed = False
        self.building = False
        self.added = 0
        self.memory = 0
        #: graph_ver is replaced (grown) by the builder and written by the loop (mark_current)
        self.gv_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="pion-hnsw", daemon=True)
        self.thread.start()

    # loop side
    def enqueue(self, slot: int, version: int, row: np.ndarray | None) -> None:
        if version:
            self.pending.add(slot)
        with self.queue_cond:
            self.queue.append((slot, version, None if row is None else row.copy()))
            self.queue_cond.notify()

    def mark_current(self, slot: int, version: int) -> None:
        """A restored entry is this slot's live vector (claimed by its document)."""
        with self.gv_lock:
            self.graph_ver[slot] = version

    def adopt(self, loaded: Any) -> bool:
        """Replace the (empty, idle) graph with a loaded one; its entries wait to be claimed
        (graph version -1: never equal to a live version, so no query counts them meanwhile)."""
        with self.queue_cond:
            if self.queue or self.building or self.added or self.closed:
                return False
            self.lock.acquire_write()
            try:
                self.index = loaded.index
                gv = np.zeros(max(2 * loaded.high, 1024), dtype=np.int64)
                gv[: loaded.high][loaded.position >= 0] = -1
                with self.gv_lock:
                    self.graph_ver = gv
            finally:
                self.lock.release_write()
        self.memory = int(self.index.memory_usage)
        return True

    def save_bytes(self) -> bytearray | None:
        """usearch's serialization of the graph (no add runs meanwhile); None once closed."""
        self.lock.acquire_write()
        try:
            if self.closed:
                return None
            return self.index.save()
        finally:
            self.lock.release_write()

    def pending_slots(self, slot_ver: np.ndarray) -> np.ndarray:
        """Live slots whose current row is not in the graph yet (also drops landed ones)."""
        if not self.pending:
            return _EMPTY_IDS
        slots = np.fromiter(self.pending, dtype=np.int64, count=len(self.pending))
        gv = self.graph_ver
        in_graph = np.zeros(len(slots), dtype=np.int64)
        ok = slots < len(gv)
        in_graph[ok] = gv[slots[ok]]
        current = slot_ver[slots]
        still = (current > 0) & (in_graph != current)
        self.pending = set(slots[still].tolist())
        return slots[still]

    @property
    def backlog(self) -> int:
        return len(self.queue)

    def memory_bytes(self) -> int:
        """The graph's size as the builder thread last read it (reading it here, while the builder
        adds, is not safe in usearch)."""
        return self.memory

    def close(self) -> None:
        with self.queue_cond:
            self.closed = True
            self.queue.clear()
            self.queue_cond.notify_all()

    # builder thread
    def _run(self) -> None:
        while True:
            with self.queue_cond:
                while not self.queue and not self.closed:
                    self.building = False
                    self.queue_cond.wait()
                if self.closed:
                    return
                self.building = True
                batch = []
                while self.queue and len(batch) < BUILD_BATCH:
                    batch.append(self.queue.popleft())
            try:
                self._apply(batch)
            except Exception:  # noqa: BLE001 - keep building; the rows stay pending (exact)
                import logging

                logging.getLogger("pion.search").exception("HNSW build batch failed")

    def _apply(self, batch: list) -> None:
        latest: dict[int, tuple[int, np.ndarray | None]] = {}
        for slot, version, row in batch:
            latest[slot] = (version, row)
        top = max(latest) + 1
        index = self.index
        if top > len(self.graph_ver):
            with self.gv_lock:
                grown = np.zeros(max(top, 2 * len(self.graph_ver), 1024), dtype=np.int64)
                grown[: len(self.graph_ver)] = self.graph_ver
                self.graph_ver = grown  # readers keep the old array: stale entries only drop results
        gv = self.graph_ver
        stale = [slot for slot in latest if gv[slot]]
        if stale:
            self.lock.acquire_write()
            try:
                index.remove(np.asarray(stale, dtype=np.uint64))
                for slot in stale:
                    gv[slot] = 0
            finally:
                self.lock.release_write()
        adds = [(slot, version, row) for slot, (version, row) in latest.items() if version]
        if adds:
            keys = np.asarray([slot for slot, _, _ in adds], dtype=np.uint64)
            vectors = np.stack([row for _, _, row in adds])
            # usearch grows its capacity inside add, which must not race a search
            grows = len(index) + len(adds) > index.capacity
            (self.lock.acquire_write if grows else self.lock.acquire_read)()
            try:
                index.add(keys, vectors, threads=2)
            finally:
                (self.lock.release_write if grows else self.lock.release_read)()
            for slot, version, _ in adds:
                gv[slot] = version
            self.added += len(adds)
        self.memory = int(index.memory_usage)

    # queries (any thread)
    def search(self, query, k, ef, pending, allowed_mask, rows, norms, slot_doc, slot_ver, live_count, owner,
               batch_size=None):
        """Graph search (paging wider while a filter rejects candidates: by ``batch_size`` more
        results a round when given, else four times as many) plus the pending rows."""
        want = k
        graph_size = len(self.index)
        if allowed_mask is None and not len(pending) and graph_size and len(owner.doc_slots) == owner.count:
            # the common case (no filter, nothing pending, one vector per document): usearch's
            # answer, nearest first, minus stale entries; ties sorted by doc id as below
            keys, dists = self._search(query, min(graph_size, k), min(ef, graph_size))
            keys = keys.astype(np.int64)
            gv = self.graph_ver
            if len(keys) and int(keys.max()) < min(len(gv), len(slot_ver)):
                current = slot_ver[keys]
                if ((current > 0) & (gv[keys] == current)).all() and (len(keys) >= k or graph_size <= k):
                    docs = slot_doc[keys]
                    if len(dists) < 2 or bool((dists[1:] > dists[:-1]).all()):
                        return docs, dists
                    return _best_per_doc(docs, dists, k)
        found_docs = _EMPTY_IDS
        found_dists = _EMPTY_DISTS
        if graph_size:
            fraction = 1.0
            if allowed_mask is not None:
                fraction = max(float(allowed_mask.sum()) / max(live_count, 1), 1e-6)
            if batch_size:
                count = min(graph_size, max(k, batch_size) + len(pending))
            else:
                count = min(graph_size, max(k, int(k / fraction * 1.2) + 1) + len(pending))
            while True:
                # an ef past the graph's size finds nothing more, and usearch allocates by it
                wide = min(max(ef, count if allowed_mask is not None else ef), max(graph_size, count))
                keys, dists = self._search(query, count, wide)
                gv = self.graph_ver
                keys = keys.astype(np.int64)
                ok = (keys < len(gv)) & (keys < len(slot_ver))
                keys, dists = keys[ok], dists[ok]
                current = (slot_ver[keys] > 0) & (gv[keys] == slot_ver[keys])
                if allowed_mask is not None:
                    inside = keys < len(allowed_mask)
                    current &= inside
                    current[inside] &= allowed_mask[keys[inside]]
                keys, dists = keys[current], dists[current]
                found_docs, found_dists = _best_per_doc(slot_doc[keys], dists.astype(np.float32), None)
                if len(found_docs) >= want or count >= graph_size:
                    break
                if allowed_mask is None and owner.restoring():
                    # a loaded graph's entries not claimed yet are documents the rebuild scan has
                    # not reached: the index answers over what it holds so far, as any scan does,
                    # rather than paging the whole graph for them
                    break
                count = min(graph_size, count + batch_size if batch_size else count * 4)
            if allowed_mask is not None and len(found_docs) < want and count >= graph_size:
                cand = np.nonzero(allowed_mask)[0]  # the graph ran out: finish exactly
                return owner._exact_top(cand, rows, norms, slot_doc, query, k)
        if len(pending):
            cand = pending if allowed_mask is None else pending[(pending < len(allowed_mask)) & allowed_mask[np.minimum(pending, len(allowed_mask) - 1)]]
            if len(cand):
                pdocs, pdists = owner._exact_top(cand, rows, norms, slot_doc, query, k)
                found_docs = np.concatenate([found_docs, pdocs])
                found_dists = np.concatenate([found_dists, pdists])
        return _best_per_doc(found_docs, found_dists, k)

    def _search(self, query: np.ndarray, count: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        self.lock.acquire_read()
        try:
            if ef == self.default_ef:
                keys, dists = self._search_one(query, count)
            else:
                with self.ef_lock:
                    self.index.expansion_search = ef
                    try:
                        keys, dists = self._search_one(query, count)
                    finally:
                        self.index.expansion_search = self.default_ef
        finally:
            self.lock.release_read()
        return keys, dists

    def _search_one(self, query: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The compiled call with one thread: usearch's wrapper spreads one query over every core
        (threads=0) and checks its arguments in Python, which costs more than the search."""
        compiled = getattr(self.index, "_compiled", None)
        if compiled is None:  # another usearch build: its public call
            matches = self.index.search(query, count, threads=1)
            return np.asarray(matches.keys), np.asarray(matches.distances, dtype=np.float32)
        keys, dists, counts = compiled.search_many(query.reshape(1, -1), count, False, 1)[:3]
        found = int(counts[0])
        return keys[0, :found], dists[0, :found].astype(np.float32, copy=False)
