"""Budget-bound queries run in slices on the loop; what would change what they read waits.

Why: a search, an aggregation, a hybrid query, a vector-set FILTER or a JSONPath read may use
its whole time budget (RediSearch's TIMEOUT, 500 ms by default; ``pion.storage.budget``). Run in
one go it would hold the event loop that long, and every other client with it. Here such a
command runs inside a greenlet of its own on the loop thread: at each budget check (every few
hundred items) ``maybe_yield`` sees whether the slice's ``SLICE_SECONDS`` are spent and, if so,
switches back to the loop, which serves other clients for one turn and then resumes the query
where it stopped. No evaluator was rewritten for this: the budget's clock read is the yield
point, whatever the depth of the call stack (the same mechanism a script uses past
busy-reply-threshold, ``scripting/busy.py``).

The contract, as RediSearch's read lock gives it (one consistent state for the whole query):

- Only a top-level command of a connected client is sliced (``can_slice``: not inside
  MULTI/EXEC, a script, log replay or a detached script), as ``deferred.can_defer``. Elsewhere
  the same code runs in one go, as before. A query that ends within its first slice costs one
  greenlet switch and nothing else.
- While it is in flight its client is parked (its pipeline runs nothing more, so its replies
  stay in order), as a deferred command's is.
- While any query is in flight, a command of another client that could change what one reads
  is parked (``holds``) and runs, in arrival order, when the last query ended: a write to a key
  an index being queried covers (its prefixes) or to the JSON / vector-set key being read, a
  write whose keys are not known (FLUSHALL, FLUSHDB, SWAPDB, ...), scripts (EVAL, EVALSHA,
  FCALL; the ``_RO`` forms only read), DEBUG, CONFIG SET, every FT.* command that is not a
  query (FT.ALTER, FT.DROPINDEX, FT.SYNUPDATE, FT.CREATE, ...), an EXEC whose queue holds one,
  and under memory pressure every ``denyoom`` write (eviction may take a key a query reads).
  Reads and unrelated writes go on. The wait is bounded by the queries' budgets.
- What changes state without a client command is held too: the search engine applies no
  indexing to a frozen index (``SearchEngine.freeze``: the keys stay queued), active expiry of
  keys and hash fields and eviction wait, a replica applies nothing of its primary's stream,
  and a blocked client whose retry would write a read key stays blocked until the end.
  Lazy expiry on another client's read still removes a key (deleting a key changes no value a
  query holds, and the index change it queues waits for the freeze to end).
- The budget's deadline is wall time: the turns given to other clients count, as in
  RediSearch, so ``Timeout limit was reached`` (FAIL) or the partial result with its warning
  (RETURN) come at the same moment as before; INFO commandstats and the slow log count the
  time the query itself ran (its slices).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections import OrderedDict
from time import perf_counter, perf_counter_ns
from typing import TYPE_CHECKING, Any

import greenlet

from pion.protocol.errors import ReplyError
from pion.server.deferred import Deferred
from pion.storage import budget

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec, CommandTable

log = logging.getLogger("pion.slices")

#: how long one slice of a query may hold the loop before it hands it back for a turn
SLICE_SECONDS = 0.01
#: a slice longer than this is logged at DEBUG with the stack it stopped at (what does not tick)
LONG_SLICE_NS = 50_000_000

#: FT.* queries: the argv position of the index (or alias) they read
_INDEX_ARG = {"ft.search": 1, "ft.aggregate": 1, "ft.hybrid": 1, "ft.profile": 1, "ft.cursor": 2}
#: the other sliced commands read the keys the command table gives them (VSIM, JSON reads)
_KEYED = frozenset({"vsim"})
#: parked whatever their keys while a query is in flight: they may touch any key or index
_ALWAYS_HELD = frozenset({"eval", "evalsha", "fcall", "debug", "config|set", "flushall", "flushdb", "swapdb"})

_YIELDED = object()
#: idle worker greenlets kept for the next queries
_IDLE_WORKERS = 8
#: greenlet -> the run it carries (process-wide: ``maybe_yield`` is one hook for every server)
_RUNS: dict[Any, SlicedRun] = {}


def maybe_yield() -> bool:
    """The budget's pause hook: inside a sliced run whose slice is spent, hand the loop back
    (returns True once resumed); anywhere else return False at once."""
    run = _RUNS.get(greenlet.getcurrent())
    if run is None or perf_counter() < run.slice_end:
        return False
    run.greenlet.parent.switch(_YIELDED)
    return True


def is_sliced(spec: CommandSpec) -> bool:
    name = spec.full_name
    return name in _INDEX_ARG or name in _KEYED or (name.startswith("json.") and spec.is_read)


class SlicedRun:
    """One query in slices: its client and command, what it reads, what it has used."""

    __slots__ = ("client", "spec", "argv", "job", "answer", "greenlet", "slice_end", "db_index", "index", "keys",
                 "everything", "ns", "effects", "ready", "slices", "started", "held")

    def __init__(self, client: Client, spec: CommandSpec, argv: list[bytes], job: Any = None, answer: Any = None) -> None:
        self.client = client
        self.spec = spec
        self.argv = argv
        #: what runs: ``job(ctx)`` (a deferred command's finish) or, None, the handler
        self.job = job
        #: a deferred finish answers through this (``deferred.answer``); None: the dispatcher's way
        self.answer = answer
        self.greenlet: Any = None
        self.slice_end = 0.0
        self.db_index = client.db_index
        #: the search index it reads (frozen while it runs), or None
        self.index: Any = None
        #: the keys it reads (VSIM, JSON); ``everything``: its read set is unknown
        self.keys: frozenset[bytes] = frozenset()
        self.everything = False
        #: the time its slices held the loop, in ns (commandstats, slow log)
        self.ns = 0
        #: its own log effects and woken keys, kept apart from other clients' between slices
        self.effects: list = []
        self.ready: list = []
        self.slices = 0
        self.started = perf_counter()
        #: it returned a Deferred (its KNN in the worker pool): its read lock lasts until the
        #: Deferred answers (``release``), so the finish sees the state the handler saw
        self.held = False

    def reads(self, key: bytes) -> bool:
        if self.everything or key in self.keys:
            return True
        index = self.index
        return index is not None and index.definition.covers(key)


class Slices:
    """The server's sliced queries and the commands parked behind them."""

    def __init__(self, server: Server, table: CommandTable) -> None:
        self.server = server
        #: the queries in flight (past their first slice)
        self.active: list[SlicedRun] = []
        #: client id -> (client, argv) parked until no query is in flight, in arrival order
        #: (and the keys it may write, None: any; a new query that reads one of them waits behind it)
        self.parked: OrderedDict[int, tuple[Client, list[bytes], frozenset[bytes] | None]] = OrderedDict()
        #: (db id, key) slots whose blocked clients were not retried while a query ran
        self.held_ready: list[tuple[int, bytes]] = []
        self._idle: asyncio.Event | None = None
        #: worker greenlets waiting for a query (making one costs ~25 us, a switch ~1.5 us)
        self._workers: list[Any] = []
        #: INFO stats (``pion_*``): queries that ran past one slice, the turns they gave back,
        #: commands parked behind them, the longest slice of a query that gave a turn back (us)
        self.stats = {"sliced_queries": 0, "query_slices_yielded": 0, "commands_parked_by_queries": 0,
                      "longest_query_slice_usec": 0}
        for spec in _specs(table):
            spec.sliced = is_sliced(spec)
        budget.set_pause(maybe_yield)

    # -- running a query --------------------------------------------------------------------

    def can_slice(self, client: Client) -> bool:
        server = self.server
        return (client.conn is not None and not client.in_script and client.multi is None
                and not client.executing and not server.loading and server.dispatcher.busy is None)

    def run(self, client: Client, spec: CommandSpec, argv: list[bytes], job: Any = None, answer: Any = None) -> Any:
        """Run ``spec``'s handler (or ``job(ctx)``, a deferred finish that answers through
        ``answer``) in a greenlet, called by the dispatcher at depth 0: its reply when it ends
        within its first slice, else BLOCKED (it goes on in later turns)."""
        from pion.server.dispatch import BLOCKED

        run = SlicedRun(client, spec, argv, job, answer)
        client.ctx.effects = None
        client.ctx.rewritten = False
        here = greenlet.getcurrent()
        workers = self._workers
        while workers and (workers[-1].dead or workers[-1].parent is not here):  # another thread's
            workers.pop()
        run.greenlet = workers.pop() if workers else greenlet.greenlet(_work)
        _RUNS[run.greenlet] = run
        out = self._switch(run, first=True)
        if out is not _YIELDED:
            return self._conclude(run, out)
        self._begin(run)
        conn = client.conn
        if conn is not None and not conn.deferred:
            conn.defer()
        asyncio.get_running_loop().call_soon(self._resume, run)
        return BLOCKED

    def _switch(self, run: SlicedRun, first: bool = False) -> Any:
        """One slice, in the command's context (depth, effects, woken keys, keyspace stats)."""
        server = self.server
        dispatcher = server.dispatcher
        blocking = server.blocking
        tracking = server.tracking
        saved = dispatcher.pending, blocking.ready, tracking.current
        dispatcher.pending, blocking.ready = run.effects, run.ready
        tracking.current = run.client
        db = run.client.dbs[run.db_index]
        counted = run.spec.is_read and db.read_stats is None
        if counted:
            db.read_stats = server
        dispatcher.depth += 1
        start = perf_counter_ns()
        run.slice_end = perf_counter() + SLICE_SECONDS
        run.greenlet.parent = greenlet.getcurrent()
        out = None
        try:
            out = run.greenlet.switch(run) if first else run.greenlet.switch()
            return out
        finally:
            took = perf_counter_ns() - start
            run.ns += took
            if took > LONG_SLICE_NS and log.isEnabledFor(logging.DEBUG):  # where a slice ran long
                frame = run.greenlet.gr_frame
                log.debug("a slice of %s held the loop %.1f ms, until: %s", run.spec.full_name, took / 1e6,
                          "".join(traceback.format_stack(frame, limit=12)) if frame is not None else "its end")
            if (out is _YIELDED or not first) and took // 1000 > self.stats["longest_query_slice_usec"]:
                self.stats["longest_query_slice_usec"] = took // 1000
            run.slices += 1
            dispatcher.depth -= 1
            if counted:
                db.read_stats = None
            run.effects, run.ready = dispatcher.pending, blocking.ready
            dispatcher.pending, blocking.ready, tracking.current = saved

    def _resume(self, run: SlicedRun) -> None:
        """A later loop turn: the query's next slice, or its end."""
        client = run.client
        self.stats["query_slices_yielded"] += 1
        if client.conn is None or client.closing:  # its client left: stop it where it is
            run.greenlet.parent = greenlet.getcurrent()
            run.greenlet.throw(greenlet.GreenletExit)
            self._end(run)
            return
        try:
            out = self._switch(run)
        except BaseException:
            self._end(run)
            raise
        if out is _YIELDED:
            asyncio.get_running_loop().call_soon(self._resume, run)
            return
        from pion.server.dispatch import BLOCKED

        try:
            reply = self._conclude(run, out)
            if run.answer is not None:
                run.answer(reply)
            elif reply is not BLOCKED and client.conn is not None:  # BLOCKED: a Deferred took over
                client.conn.undefer(reply)
        finally:
            if not run.held:
                self._end(run)  # then what waited for it runs

    def _conclude(self, run: SlicedRun, out: Any) -> Any:
        """The handler ended: the dispatcher's bookkeeping, as for any command."""
        dispatcher = self.server.dispatcher
        self._recycle(run)
        dispatcher.pending.extend(run.effects)
        self.server.blocking.ready.extend(run.ready)
        kind, value = out
        if kind == "crash":
            value = dispatcher.internal_error(run.spec.full_name, value)
        elif value.__class__ is Deferred and run.answer is None:  # its KNN goes to the pool: keep
            run.held = True                                       # the read lock until it answers
            value.hold = run
            if run not in self.active:
                self._begin(run, sliced=False)
        return dispatcher.finish_sliced(run.client, run.spec, run.argv, value, kind != "ok", kind == "crash",
                                        run.ns, run.db_index, counted=run.answer is None)

    # -- isolation ------------------------------------------------------------------------

    def _begin(self, run: SlicedRun, sliced: bool = True) -> None:
        """Past its first slice (or into the worker pool): freeze what it reads."""
        if sliced:
            self.stats["sliced_queries"] += 1
        self._read_set(run)
        if run.index is not None:
            self.server.parts.search.freeze(run.index)  # type: ignore[union-attr]
        if not self.active and self._idle is not None:
            self._idle.clear()
        self.active.append(run)

    def _read_set(self, run: SlicedRun) -> None:
        """What the query reads: the index it names (an FT.* query), else its keys; unknown:
        everything."""
        position = _INDEX_ARG.get(run.spec.full_name)
        if position is not None:
            search = self.server.parts.search
            index = None
            if search is not None and len(run.argv) > position:
                db = run.client.dbs[run.db_index]
                index = search.resolve(db.id, run.argv[position].decode("utf-8", "replace"))
            if index is None:
                run.everything = True
            else:
                run.index = index
        else:
            run.keys = frozenset(run.argv[i] for i in run.spec.key_positions(run.argv) if i < len(run.argv))
            if not run.keys:
                run.everything = True

    def release(self, run: SlicedRun) -> None:
        """The Deferred a query returned answered: its read lock ends (``deferred.answer``)."""
        run.held = False
        self._end(run)

    def _recycle(self, run: SlicedRun) -> None:
        """The run's greenlet is free again: back to the idle workers (unless it died)."""
        worker = run.greenlet
        if _RUNS.get(worker) is run:
            del _RUNS[worker]
            if not worker.dead and len(self._workers) < _IDLE_WORKERS:
                self._workers.append(worker)

    def _end(self, run: SlicedRun) -> None:
        """The query ended (or its client left): thaw, and run what waited once none is left."""
        if _RUNS.get(run.greenlet) is run:
            del _RUNS[run.greenlet]  # stopped in mid-run: its greenlet died, not recycled
        if run not in self.active:
            return
        self.active.remove(run)
        search = self.server.parts.search
        if run.index is not None and search is not None:
            search.thaw(run.index)
        if not self.active:
            self._release()

    def reads(self, key: bytes) -> bool:
        """Does a query in flight read ``key``?"""
        return any(run.reads(key) for run in self.active)

    def holds(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> bool:
        """Must this command (not yet run) wait for the queries in flight? (``self.active`` is
        not empty: the dispatcher asks only then.)"""
        if client.conn is None or spec.name == "quit":
            return False
        if spec.sliced:  # a new query waits only behind a waiting command that writes what it reads
            return bool(self.parked) and client.multi is None and self._behind_parked(client, spec, argv)
        if spec.name == "exec":
            return bool(client.multi) and any(self.conflicts(queued, args) for queued, args in client.multi)
        if client.multi is not None:
            return False  # queued (or MULTI/WATCH/DISCARD): EXEC decides
        return self.conflicts(spec, argv)

    def _behind_parked(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> bool:
        """Does a waiting command write what this new query would read? Then the query waits
        behind it (in order: no writer starves behind a stream of overlapping queries)."""
        probe = SlicedRun(client, spec, argv)
        self._read_set(probe)
        for _, _, touched in self.parked.values():
            if touched is None or any(probe.reads(key) for key in touched):
                return True
        return False

    def _touches(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> frozenset[bytes] | None:
        """The keys a waiting command may write (None: any; a waiting query: none)."""
        if spec.sliced:
            return frozenset()
        if spec.name == "exec":
            keys: set[bytes] = set()
            for queued, args in client.multi or ():
                if queued.sliced or not ("write" in queued.flags or "may_replicate" in queued.flags):
                    continue
                touched = self._touches(client, queued, args)
                if touched is None:
                    return None
                keys |= touched
            return frozenset(keys)
        if spec.full_name in _ALWAYS_HELD or spec.group == "search":
            return None
        positions = spec.key_positions(argv)
        return frozenset(argv[i] for i in positions if i < len(argv)) if positions else None

    def conflicts(self, spec: CommandSpec, argv: list[bytes]) -> bool:
        """Could this command change what a query in flight reads?"""
        if spec.sliced:
            return False
        name = spec.full_name
        if name in _ALWAYS_HELD:
            return True
        if spec.group == "search":
            return not spec.is_read  # FT.CREATE/ALTER/DROPINDEX/SYN*/ALIAS*/DICT*/CONFIG SET ...
        flags = spec.flags
        if "write" not in flags and "may_replicate" not in flags:
            return False
        if "denyoom" in flags and self._memory_pressure():
            return True
        positions = spec.key_positions(argv)
        if not positions:
            return True
        return any(self.reads(argv[i]) for i in positions if i < len(argv))

    def _memory_pressure(self) -> bool:
        guard = self.server.parts.memory
        return guard is not None and self.server.settings.maxmemory_policy != "noeviction" and guard.over_limit()

    def park(self, client: Client, argv: list[bytes]) -> Any:
        """Park the client as blocked (no keys, no timeout) until no query is in flight."""
        from pion.server.blocking import BlockRequest
        from pion.server.dispatch import BLOCKED

        self.stats["commands_parked_by_queries"] += 1
        spec = self.server.dispatcher.lookup(argv)
        touched = None if isinstance(spec, ReplyError) else self._touches(client, spec, argv)
        self.server.blocking.block(client, BlockRequest([], 0, _never_ready, argv=argv))
        self.parked[client.id] = (client, argv, touched)
        return BLOCKED

    def holds_retry(self, db_id: int, key: bytes, argv: list[bytes]) -> bool:
        """A blocked client's retry (BLMOVE, ...) that would write a read key waits too."""
        spec = self.server.dispatcher.lookup(argv) if argv else None
        if spec is None or isinstance(spec, ReplyError) or not self.conflicts(spec, argv):
            return False
        self.held_ready.append((db_id, key))
        return True

    async def idle(self) -> None:
        """Wait until no query is in flight (a replica's stream apply)."""
        while self.active:
            if self._idle is None:
                self._idle = asyncio.Event()
            self._idle.clear()
            await self._idle.wait()

    def _release(self) -> None:
        """No query left: run the parked commands in order, then what the freeze held back."""
        from pion.server.dispatch import BLOCKED

        server = self.server
        if self._idle is not None:
            self._idle.set()
        parked, self.parked = self.parked, OrderedDict()
        for client, argv, _ in parked.values():
            if client.closing or client.conn is None or client.blocked is None:
                continue
            server.blocking.disconnect(client)  # forget the parking request, no reply
            reply = server.dispatcher.execute(client, argv)
            if reply is not BLOCKED and client.conn is not None:
                client.conn.resume_with(reply)
        if self.held_ready and not self.active:
            server.blocking.ready.extend(self.held_ready)
            self.held_ready = []
            server.dispatcher.finish_command(None)


def _specs(table: CommandTable) -> list[CommandSpec]:
    out = []
    for spec in table:
        out.append(spec)
        out.extend(spec.subcommands.values())
    return out


def _work(run: SlicedRun) -> None:
    """A worker greenlet: run each query it is switched to, hand its outcome to the loop (its
    parent), wait there for the next."""
    while True:
        run = greenlet.getcurrent().parent.switch(_body(run))


def _body(run: SlicedRun) -> tuple[str, Any]:
    """The greenlet's body: the handler, its outcome as (kind, value) for ``_conclude``."""
    ctx = run.client.ctx
    try:
        if run.job is not None:
            return "ok", run.job(ctx)
        return "ok", run.spec.handler(ctx, run.argv)  # type: ignore[misc]
    except ReplyError as exc:
        return "error", exc
    except Exception as exc:  # the dispatcher's error boundary answers it
        return "crash", exc


def _never_ready(ctx: Any) -> Any:
    from pion.server.blocking import NOT_READY

    return NOT_READY
