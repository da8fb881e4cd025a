"""The search worker: KNN graph searches and exact scans off the event loop, handed over cheaply.

Why: a KNN's own work (usearch's graph walk, a numpy scan of the rows a prefilter kept) releases
the GIL, so in a thread it runs on the second core while the loop parses and answers other
clients. The general worker pool (``deferred.workers``) hands a job over through a concurrent
future and asyncio's ``wrap_future``: two futures, a callback chain and a self-pipe write per job,
which on the loop costs about as much as a 100 us search. Here the loop appends the job to a
queue (waking a thread only when one sleeps), the threads take the queue in arrival order,
and the loop is woken once for every result that arrived since it last looked
(``call_soon_threadsafe`` only when no wake-up is pending already).

The contract is ``deferred``'s (this is a ``Deferred.executor``): the job reads what its handler
froze (a query's read lock, ``server/slices.py``) and changes nothing shared; ``done(result,
error)`` runs on the loop that posted it.

When a search goes here rather than inline (``should_offload``): when another client's query is
in flight here, or another client than this one ran a query during the last ``CONCURRENT_S``: then
there is other work for the loop to do meanwhile. A lone client's cheap search stays inline, where
it costs less than the hand-off (its latency is the whole round trip).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any

log = logging.getLogger("pion.search_pool")

#: worker threads, started as jobs find the others busy: a long scan does not hold up the
#: searches queued behind it while a core is free
WORKERS = max(2, os.cpu_count() or 2)
#: another client's query this recent means concurrent clients: hand the search to the worker
CONCURRENT_S = 0.002

Done = Callable[[Any, BaseException | None], None]


class _LoopInbox:
    """What the thread finished for one event loop, and whether that loop was woken for it."""

    __slots__ = ("loop", "results", "woken", "in_flight")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.results: deque = deque()
        self.woken = False
        #: posted from this loop and not yet answered (read and written on the loop only)
        self.in_flight = 0


class SearchWorker:
    """Worker threads (daemons, started as jobs find the others busy, up to ``WORKERS``) shared
    by every server in the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque = deque()
        #: threads waiting for a job, and every thread started (they never end: daemons)
        self._idle = 0
        self._threads: list[threading.Thread] = []
        self._inboxes: dict[int, _LoopInbox] = {}
        self.stats = {"jobs": 0, "wakeups": 0, "deliveries": 0}
        self._last_client = -1
        self._last_at = 0.0

    # -- the loop's side --------------------------------------------------------------------

    def should_offload(self, client_id: int) -> bool:
        """Is there other work for the loop while this client's search runs? (And note the query.)"""
        now = perf_counter()
        busy = self._inbox().in_flight > 0 or (client_id != self._last_client and now - self._last_at < CONCURRENT_S)
        self._last_client, self._last_at = client_id, now
        return busy

    def post(self, job: Callable[[], Any], done: Done) -> None:
        """Run ``job()`` in a worker thread; ``done(result, error)`` follows on this loop."""
        inbox = self._inbox()
        inbox.in_flight += 1
        with self._lock:
            self._queue.append((inbox, job, done))
            if self._idle:
                self._idle -= 1
                self._wake.notify()
            elif len(self._threads) < WORKERS:  # every thread is busy: one more, up to the cores
                thread = threading.Thread(target=self._run, name=f"pion-search-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _inbox(self) -> _LoopInbox:
        loop = asyncio.get_running_loop()
        inbox = self._inboxes.get(id(loop))
        if inbox is None or inbox.loop is not loop:
            for key, old in list(self._inboxes.items()):  # the loops of stopped servers
                if old.loop.is_closed():
                    del self._inboxes[key]
            inbox = self._inboxes[id(loop)] = _LoopInbox(loop)
        return inbox

    def _deliver(self, inbox: _LoopInbox) -> None:
        """On the loop: answer every result that arrived (the thread adds more meanwhile)."""
        self.stats["deliveries"] += 1
        while True:
            with self._lock:
                if not inbox.results:
                    inbox.woken = False
                    return
                done, result, error = inbox.results.popleft()
            inbox.in_flight -= 1
            try:
                done(result, error)
            except Exception:  # noqa: BLE001 - the other results must still be answered
                log.exception("a search result's answer failed")

    # -- the thread's side ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._idle += 1
                    self._wake.wait()
                inbox, job, done = self._queue.popleft()
            try:
                item = (done, job(), None)
            except BaseException as exc:  # noqa: BLE001 - answered on the loop, never lost
                item = (done, None, exc)
            self.stats["jobs"] += 1
            with self._lock:
                inbox.results.append(item)
                if inbox.woken:
                    continue
                inbox.woken = True
            self.stats["wakeups"] += 1
            try:
                inbox.loop.call_soon_threadsafe(self._deliver, inbox)
            except RuntimeError:  # that loop closed (its server stopped): nobody waits for it
                with self._lock:
                    inbox.results.clear()


_worker: SearchWorker | None = None


def worker() -> SearchWorker:
    """The process's search worker."""
    global _worker
    if _worker is None:
        _worker = SearchWorker()
    return _worker
