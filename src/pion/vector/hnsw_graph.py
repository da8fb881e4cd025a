"""The usearch HNSW graph of one vector field, filled off the event loop by its own builder thread.

A write puts its row in the field's matrix at once (``vectors.VectorField``) and queues it here;
the builder adds queued rows to the graph in batches of ``BUILD_BATCH`` (usearch releases the GIL
and builds with several threads). ``graph_ver`` records which version of each slot the graph
holds, so the field counts a graph entry only while it is the slot's live vector and scans the
rest (*pending*) exactly. A capacity change in usearch must not race a search: ``RWLock`` lets
many searches and adds run together and a growth or removal run alone. A saved graph
(``graph_store``) is adopted into an empty graph at start.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

from pion.vector.ranking import EMPTY_DISTS, EMPTY_IDS, best_per_doc
from pion.vector.schema import VectorParams

#: rows the builder adds to the graph per batch
BUILD_BATCH = 512
#: a graph smaller than this is built with one thread. usearch's parallel add splits a batch between
#: threads that each start from the (almost empty) graph, and their parts link poorly: 2,000 x 16
#: random rows in batches of 512 reached recall@10 0.983-1.0 (mean 0.9982, ef 400, 40 builds) with
#: 2 threads against 1.0 every time with one, and the CI smoke (1,000 x 32) once 0.905 at ef 64. On a
#: larger graph both reach the same recall (20,000 rows: 0.999), so the second thread is kept there.
SERIAL_BELOW = 4096


class RWLock:
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


class HnswGraph:
    """The usearch HNSW graph of one field, filled by its own builder thread."""

    def __init__(self, params: VectorParams, owner: Any) -> None:
        from usearch.index import Index

        metric = {"COSINE": "ip", "IP": "ip", "L2": "l2sq"}[params.metric]
        self.index = Index(ndim=params.dim, metric=metric, dtype="f32", connectivity=params.m,
                           expansion_add=params.ef_construction, expansion_search=params.ef_runtime)
        self.default_ef = params.ef_runtime
        self.lock = RWLock()
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
            return EMPTY_IDS
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
                index.add(keys, vectors, threads=1 if len(index) < SERIAL_BELOW else 2)
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
                    return best_per_doc(docs, dists, k)
        found_docs = EMPTY_IDS
        found_dists = EMPTY_DISTS
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
                found_docs, found_dists = best_per_doc(slot_doc[keys], dists.astype(np.float32), None)
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
        return best_per_doc(found_docs, found_dists, k)

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
