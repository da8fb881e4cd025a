"""Commands that finish later: CPU-heavy work in a thread pool, the state change back on the loop.

Why: encoding a batch of K/V rows for ``V.STOREBATCH`` (or decoding one for ``V.FETCH``) takes
milliseconds of numpy work that reads only the command's own arguments and immutable stored
blobs. On the event loop it would stop every other client and the reading of the next request;
numpy releases the GIL, so worker threads can do it while the loop goes on (docs/design.md, section 2).

The contract (single writer, log order):

- A handler returns ``Deferred(jobs, finish)``, and only when ``can_defer(ctx)`` (a top-level
  command of a connected client: not inside MULTI/EXEC, a script or log replay, where the reply
  is needed at once). Before returning it the handler changes nothing.
- The jobs run in the pool, in parallel. They may read only what nobody changes meanwhile (their
  arguments, immutable blobs) and must change nothing shared.
- When all are done, ``finish(ctx, results)`` runs on the loop in the client's context, like a
  handler: it re-checks what it relies on (other clients ran meanwhile), applies the change, calls
  ``ctx.dirty``/``ctx.rewrite`` and returns the reply (or raises ``ReplyError``). The command takes
  effect, and its log record is appended, at that moment; the reply waits for the record to be
  durable as any write's does.
- Meanwhile the client's connection runs no further command from its pipeline, so its replies
  stay in order and its next commands see this one's effect; other clients go on.

``finish`` may return another ``Deferred`` (a second stage that needs the first's result read on
the loop); it starts at once and the client stays parked until that one answers.

A job that raises ``ReplyError`` answers with it (``finish`` is not called, ``abandon`` is: it
releases what the handler took, such as an arena reservation); any other exception is logged
and answered with ``-ERR``, so a connection never stays parked.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ReplyError

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.context import Ctx
    from pion.server.net.client import Client

log = logging.getLogger("pion.deferred")

#: worker threads: one per core (numpy work holds no GIL, so more would only queue)
WORKERS = max(2, os.cpu_count() or 2)
_pool: ThreadPoolExecutor | None = None


@dataclass(eq=False)
class Deferred:
    """What a handler returns to finish later: ``jobs`` for the pool, then ``finish(ctx, results)``."""

    jobs: list[Callable[[], Any]]
    finish: Callable[[Ctx, list], Any]
    abandon: Callable[[], None] | None = None
    argv: list = field(default_factory=list)
    #: a pool of the engine's own for jobs that mostly wait (on an embedding model), or the search
    #: worker (``search_pool``: one job, handed over by its ``post``); None: ``workers()``
    executor: Executor | Any = None
    #: a query's read lock held from its handler to its answer (``pion.server.slices``), or None
    hold: Any = None


def workers() -> ThreadPoolExecutor:
    """The process's worker pool (created on first use, shared by every server in the process)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="pion-work")
    return _pool


def can_defer(ctx: Ctx) -> bool:
    """May this handler return ``Deferred``? Only a top-level command of a connected client."""
    return ctx.can_block and ctx.server.dispatcher.depth == 1 and not ctx.server.loading


def start(server: Server, client: Client, request: Deferred) -> None:
    """Park the client's connection and hand the jobs to the pool (called by the dispatcher)."""
    conn = client.conn
    if conn is not None:
        conn.defer()
    pool = request.executor or workers()
    post = getattr(pool, "post", None)
    if post is not None and len(request.jobs) == 1:  # the search worker (``search_pool``): no futures
        post(request.jobs[0], lambda result, error: _finished(server, client, request, [result], error))
        return
    loop = asyncio.get_running_loop()
    gathered = asyncio.gather(*(loop.run_in_executor(pool, job) for job in request.jobs))
    gathered.add_done_callback(lambda done: _complete(server, client, request, done))


def _complete(server: Server, client: Client, request: Deferred, done: asyncio.Future) -> None:
    """On the loop: the jobs' results (or their error) to ``_finished``."""
    try:
        results = done.result()
    except Exception as exc:
        _finished(server, client, request, None, exc)
    else:
        _finished(server, client, request, results, None)


def _finished(server: Server, client: Client, request: Deferred, results: list | None,
              error: BaseException | None) -> None:
    """On the loop: run ``finish`` (or answer the jobs' error), then let the pipeline go on."""
    if error is None:
        # a query's finish may run in slices (server/slices.py): then it answers through ``answer``
        reply: Any = server.dispatcher.run_deferred(client, request, results,
                                                    lambda late: answer(server, client, request, late))
        if reply is SLICED:
            return
        answer(server, client, request, reply)
        return
    if isinstance(error, ReplyError):
        reply = error
    else:  # a full disk, or a bug in a job: answer it rather than park the client
        name = bytes(request.argv[0]).decode("latin-1").lower() if request.argv else "deferred work"
        reply = server.dispatcher.internal_error(name, error)
    answer(server, client, request, reply, job_failed=True)


#: what ``Dispatcher.run_deferred`` returns when the finish goes on in slices (it answers later)
SLICED = object()


def answer(server: Server, client: Client, request: Deferred, reply: Any, job_failed: bool = False) -> None:
    """The deferred command's reply: a second stage starts, else the pipeline goes on."""
    if isinstance(reply, Deferred):  # a second stage (AI.SEMANTIC_CACHE GET VERIFY model): the
        reply.argv = request.argv      # connection stays parked until it answers
        reply.hold = request.hold
        start(server, client, reply)
        return
    if request.hold is not None:  # the query answered: what its read lock held back runs
        server.slices.release(request.hold)
    if job_failed and request.abandon is not None:
        request.abandon()
    if isinstance(reply, ReplyError):
        server.dispatcher.count_error(reply)
    conn = client.conn
    if conn is not None:
        conn.undefer(reply)
