"""The dispatcher: one place that turns an argv into a reply.

It looks the command up, checks arity, asks admission (``pion.server.admission``: auth, ACL,
memory, durability, loading, busy, in Redis's order), queues under MULTI, runs the handler, counts stats, parks blocking commands
and deferred ones (``pion.server.deferred``: work in the thread pool, finished later on the loop),
and hands the write's effects to the journal as one record per top-level command.
"""

from __future__ import annotations

import logging
import time
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from pion.protocol import errors
from pion.protocol.errors import CountedError, ReplyError
from pion.protocol.resp import QUEUED
from pion.server import deferred
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.registry import CommandSpec, CommandTable
from pion.storage.faults import DiskWriteError

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client

#: returned to the connection when the client is now blocked; it must stop reading commands.
BLOCKED = object()

log = logging.getLogger("pion.dispatch")

#: distinct (command, exception type) pairs whose traceback was logged; later ones only count
_LOGGED_LIMIT = 1000

#: spellings of command names kept by ``lookup`` (a client inventing names cannot grow it further)
_NAMES_LIMIT = 4096

_MULTI_PASS = {b"multi", b"exec", b"discard", b"watch", b"quit", b"reset"}
#: shown to MONITOR before they run, so the commands a script runs follow it (Redis's evalCommand)
_MONITOR_FIRST = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})


class Dispatcher:
    def __init__(self, server: Server, table: CommandTable) -> None:
        self.server = server
        self.table = table
        #: command names as clients spell them (``SET``, ``set``) -> the spec: one dict hit
        #: instead of a miss, a ``lower()`` and a second lookup (bounded: names seen are few)
        self._names: dict[bytes, CommandSpec] = {}
        self.depth = 0
        #: effects of the running top-level command: (db index, argv)
        self.pending: list[tuple[int, list[bytes]]] = []
        #: below this a command cannot be slow-logged whatever the threshold (cheap pre-check;
        #: a negative threshold disables the slowlog, which SlowLog.observe itself checks)
        self.slow_usec = 0
        #: CLUSTER SLOT-STATS's per-slot counters while ``cluster-slot-stats-enabled`` is on on a
        #: cluster node, else None: each hook is this one test when it is off
        #: (pion.server.cluster.slot_stats)
        self.slot_stats: Any = None
        self.apply_settings(server.settings)
        #: full command name -> [calls, usec, rejected_calls, failed_calls]
        self.stats: dict[str, list[int]] = {}
        #: set while a script runs past busy-reply-threshold: refuses all but allow_busy commands
        #: with -BUSY (pion.server.scripting.busy); None otherwise
        self.busy: Any = None
        #: unexpected exceptions turned into error replies (INFO stats ``pion_internal_errors``)
        self.internal_errors = 0
        self._logged: set[tuple[str, str]] = set()

    def internal_error(self, name: str, exc: BaseException) -> ReplyError:
        """The error boundary: an exception a command did not expect (a bug, a recursion limit,
        a failed allocation) becomes ``-ERR`` with a short reason, never a dropped connection.
        The traceback is logged once per command and exception type; later ones are counted."""
        if isinstance(exc, DiskWriteError):  # a blob arena write failed: as a failed log write
            self.server.journal.note_disk_error(exc)
            return ReplyError(errors.MISCONF)
        self.internal_errors += 1
        kind = exc.__class__.__name__
        if (name, kind) not in self._logged and len(self._logged) < _LOGGED_LIMIT:
            self._logged.add((name, kind))
            log.error("internal error in '%s' (%s): answered -ERR; further ones are only counted",
                      name, kind, exc_info=exc)
        text = " ".join(str(exc).split())[:120]
        if isinstance(exc, MemoryError):
            return ReplyError(f"OOM command '{name}' could not allocate memory")
        return ReplyError(f"ERR internal error in '{name}': {kind}" + (f": {text}" if text else ""))

    def apply_settings(self, settings: Any) -> None:
        threshold = settings.slowlog_log_slower_than
        self.slow_usec = threshold if threshold >= 0 else 2**62
        #: LATENCY HISTOGRAM / INFO latencystats on (``latency-tracking``)
        self.latency_tracking = settings.latency_tracking
        #: ms at which a command or expire pass is a latency event (0: monitoring off)
        self.latency_threshold = settings.latency_monitor_threshold
        cluster = self.server.parts.cluster if hasattr(self.server, "parts") else None
        self.slot_stats = cluster.counters if cluster is not None and settings.cluster_slot_stats_enabled else None

    def latency_sample(self, event: str, seconds: float) -> None:
        """A latency-monitor sample when it reaches ``latency-monitor-threshold``."""
        ms = int(seconds * 1000)
        if self.latency_threshold and ms >= self.latency_threshold:
            self.server.latency.add_sample(event, ms)

    def record_latency(self, spec: CommandSpec, seconds: float) -> None:
        """A finished command's duration: its histogram and, past the threshold, an event."""
        if self.latency_tracking:
            self.server.latency.record_command(spec.full_name, int(seconds * 1e9))
        if self.latency_threshold:
            self.latency_sample("fast-command" if "fast" in spec.flags else "command", seconds)

    # -- lookup ------------------------------------------------------------------------

    def lookup(self, argv: list[bytes]) -> CommandSpec | ReplyError:
        """The spec for argv, or the error Redis gives for an unknown name, subcommand or arity."""
        name = argv[0]
        spec = self._names.get(name)
        if spec is None:
            spec = self.table.by_name.get(name) or self.table.by_name.get(name.lower())
            if spec is None:
                return ReplyError(errors.unknown_command(name, argv[1:]))
            if len(self._names) < _NAMES_LIMIT and name.__class__ is bytes:
                self._names[name] = spec
        if spec.subcommands and not (len(argv) == 1 and spec.handler is not None):  # bare COMMAND runs itself
            if len(argv) < 2:
                return ReplyError(errors.wrong_arity(spec.name))
            sub = spec.subcommands.get(argv[1].lower())
            if sub is None:
                return ReplyError(errors.unknown_subcommand(argv[1], spec.name))
            spec = sub
        arity = spec.arity
        if (arity > 0 and len(argv) != arity) or len(argv) < -arity:
            full = spec.full_name
            # RediSearch registers its commands upper-case (`FT.SEARCH`), and Redis names a module
            # command as registered; RedisJSON's are lower-case already
            return ReplyError(errors.wrong_arity(full.upper() if full.startswith("ft.") else full))
        return spec

    # -- entry point -------------------------------------------------------------------

    def execute(self, client: Client, argv: list[bytes]) -> Any:
        """Run one command a client sent; returns the reply, or BLOCKED."""
        server = self.server
        spec = self.lookup(argv)
        client.last_interaction = time.time()
        if spec.__class__ is ReplyError:
            client.slot = -1  # a refused command counts on no slot (CLUSTER SLOT-STATS)
            if client.multi is not None:
                client.multi_error = True
            self._count_rejected(argv)
            self.count_error(spec)
            return spec
        refusal = server.admission.refusal(client, spec, argv)  # Redis's order, in one place
        if refusal is not None:
            client.slot = -1
            if client.multi is not None:
                if spec.name == "exec":
                    refusal = self._abort_exec(client, refusal)
                else:
                    client.multi_error = True
            self._count(spec.full_name, 0, rejected=True)
            self.count_error(refusal)
            return refusal
        if server.paused_until and server.pause.holds(client, spec, argv):
            return server.pause.postpone(client, argv)
        if server.slices.active and server.slices.holds(client, spec, argv):
            return server.slices.park(client, argv)  # it could change what a query in flight reads
        if client.multi is not None and argv[0].lower() not in _MULTI_PASS:
            client.multi.append((spec, argv))
            if self.slot_stats is not None:  # its request is counted now, its QUEUED is not
                self.slot_stats.add_in(client, argv)
            client.slot = -1
            return QUEUED
        tracking = server.tracking
        tracking.current = client
        try:
            if not server.monitors:
                reply = self.call(client, spec, argv)
            elif spec.name in _MONITOR_FIRST:
                server.feed_monitors(client, argv)
                reply = self.call(client, spec, argv)
            else:
                reply = self.call(client, spec, argv)
                self.monitor(client, spec, argv)
        finally:
            tracking.current = None
        if client.tracking is not None:
            tracking.command_done(client, spec)
        if self.slot_stats is not None and client.blocked is None:  # a blocked one: when it ends
            self.slot_stats.add_in(client, argv, spec.name == "exec")
        return reply

    def _abort_exec(self, client: Client, refusal: ReplyError) -> ReplyError:
        """EXEC refused (BUSY script, OOM, ...) discards the transaction, as Redis's
        execCommandAbort: no half-run transaction, and the client leaves MULTI."""
        client.multi = None
        client.multi_error = False
        self.server.drop_watches(client)
        if getattr(refusal, "discards_bare", False):  # a cluster redirect is answered as it is
            return refusal
        return ReplyError(f"EXECABORT Transaction discarded because of: {refusal.message}")

    def monitor(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> None:
        """MONITOR sees a command once it ran (so EXEC follows the commands it ran), never an
        admin command (CONFIG, DEBUG, ...), as in Redis 7."""
        if self.server.monitors and "admin" not in spec.flags:
            self.server.feed_monitors(client, argv)

    # -- running -----------------------------------------------------------------------

    def call(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> Any:
        """Run a handler (also used by EXEC and scripts, nested); logs effects at depth 0.

        The hot path of every command: the per-command questions are answered once per spec
        (``CommandSpec.is_write``, ``stages``, ``is_read``, ``full_name``), the time is one pair
        of ``perf_counter_ns`` reads, the bookkeeping is ``account`` (shared with a query run in
        slices) and the effect capture is inline."""
        server = self.server
        if spec.sliced and self.depth == 0 and server.slices.can_slice(client):
            return server.slices.run(client, spec, argv)  # a query in slices (pion.server.slices)
        ctx = client.ctx
        outer_effects, outer_rewritten = ctx.effects, ctx.rewritten  # a nested call (EXEC, scripts) must not clobber them
        ctx.effects = None
        ctx.rewritten = False
        if spec.stages and self.depth == 0:
            refusal = self._stage(client, spec, argv)
            if refusal is not None:
                ctx.effects, ctx.rewritten = outer_effects, outer_rewritten
                return refusal
        dirty_before = server.dirty
        db = client.dbs[client.db_index]
        db_index = db.id
        # a read-only command's lookups count as keyspace hits/misses (INFO stats), as in Redis
        counted = spec.is_read and db.read_stats is None
        if counted:
            db.read_stats = server
        self.depth += 1
        start = perf_counter_ns()
        failed = crashed = False
        try:
            reply = spec.handler(ctx, argv)  # type: ignore[misc]
        except ReplyError as exc:
            reply = exc
            failed = True
        except Exception as exc:  # the error boundary: see internal_error
            reply = self.internal_error(spec.full_name, exc)
            failed = crashed = True
        finally:
            self.depth -= 1
            if counted:
                db.read_stats = None
        elapsed_ns = perf_counter_ns() - start
        cls = reply.__class__
        usec = self.account(client, spec, argv, reply, failed, elapsed_ns,
                            "fast-command" if "fast" in spec.flags else "command", cls is not BlockRequest)
        if self.slot_stats is not None and self.depth == 0 and cls is not BlockRequest:
            self.slot_stats.add_cpu(client, usec)  # a top-level command's, its nested ones included
        if not crashed:  # a crash's own argv would crash the replay the same way: not logged (docs/durability.md)
            # the one effect capture: the command's rewrites, else its argv when it made the server dirty
            if ctx.rewritten:
                self.pending.extend((db_index, effect) for effect in ctx.effects or ())
            elif spec.is_write and server.dirty != dirty_before:
                self.pending.append((db_index, argv))
        ctx.effects, ctx.rewritten = outer_effects, outer_rewritten
        if cls is BlockRequest:
            reply.argv = argv
            reply.usec = usec  # logged to the slowlog when it ends (BlockingManager.unblock)
            server.blocking.block(client, reply)
            reply = BLOCKED
        elif cls is deferred.Deferred:
            reply.argv = argv
            deferred.start(server, client, reply)
            reply = BLOCKED
        elif usec >= self.slow_usec and server.slowlog is not None and "skip_slowlog" not in spec.flags:
            server.slowlog.observe(client, argv, usec)  # before the clients it wakes log theirs
        if self.depth == 0 and (self.pending or server.blocking.ready):
            self.finish_command(client)
        return reply

    def account(self, client: Client, spec: CommandSpec, argv: list[bytes], reply: Any, failed: bool,
                elapsed_ns: int, event: str, timed: bool) -> int:
        """A finished command's bookkeeping, shared by ``call`` and ``finish_sliced`` (the fast
        lane keeps its own copy inline): INFO commandstats and stats, the latency histogram and
        the latency event ``event`` (unless not ``timed``: a blocked command is recorded when it
        ends), errorstats, the client's counters, tracking. Returns the duration in usec."""
        server = self.server
        usec = elapsed_ns // 1000
        name = spec.full_name
        cls = reply.__class__
        # an error reply, raised or returned, is a failed call (Redis: any error reply it made)
        error_reply = failed or cls is ReplyError or cls is CountedError
        entry = self.stats.get(name)  # INFO commandstats: [calls, usec, rejected, failed]
        if entry is None:
            entry = self.stats[name] = [0, 0, 0, 0]
        entry[0] += 1
        entry[1] += usec
        if error_reply:
            entry[3] += 1
            server.stat_failed += 1
        server.stat_numcommands += 1
        if timed:
            if self.latency_tracking:
                histogram = server.latency.histograms.get(name)
                if histogram is None:
                    server.latency.record_command(name, elapsed_ns)
                else:
                    histogram.record(elapsed_ns)
            if self.latency_threshold:
                self.latency_sample(event, elapsed_ns / 1e9)
        if error_reply and cls is not CountedError:  # a script's counted error is not counted again
            self.count_error(reply)
        client.commands_processed += 1
        client.last_cmd = name
        if client.tracking is not None and not failed:
            server.tracking.after_command(client, spec, argv)
        return usec

    def finish_sliced(self, client: Client, spec: CommandSpec, argv: list[bytes], reply: Any, failed: bool,
                      crashed: bool, elapsed_ns: int, db_index: int, counted: bool = True) -> Any:
        """``call``'s bookkeeping for a query run in slices (``pion.server.slices``), once its
        handler ended: stats, latency, error counts, tracking, effects, the slow log, a Deferred
        it returned. ``elapsed_ns`` is the time its slices held the loop. A deferred finish
        (``counted`` False) was counted when its handler returned: only its effects are logged."""
        server = self.server
        ctx = client.ctx
        if not counted:
            if not crashed and ctx.rewritten:
                self.pending.extend((client.dbs[db_index].id, effect) for effect in ctx.effects or ())
            ctx.effects, ctx.rewritten = None, False
            self.finish_command(client)
            return reply
        usec = self.account(client, spec, argv, reply, failed, elapsed_ns, "command", True)
        if self.slot_stats is not None:
            self.slot_stats.add_cpu(client, usec)
        cls = reply.__class__
        if not crashed and ctx.rewritten:
            self.pending.extend((client.dbs[db_index].id, effect) for effect in ctx.effects or ())
        ctx.effects, ctx.rewritten = None, False
        if cls is deferred.Deferred:
            reply.argv = argv
            deferred.start(server, client, reply)
            reply = BLOCKED
        elif usec >= self.slow_usec and server.slowlog is not None and "skip_slowlog" not in spec.flags:
            server.slowlog.observe(client, argv, usec)
        if self.depth == 0 and (self.pending or server.blocking.ready):
            self.finish_command(client)
        return reply

    def _stage(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> ReplyError | None:
        """Admission of a write's large arguments: they go to an arena before it runs (the
        journal's ``stage``), so a full disk answers -MISCONF with nothing changed (an EXEC is
        discarded whole, as a refused EXEC is)."""
        journal = self.server.journal
        try:
            if spec.name != "exec":
                journal.stage(argv)
            elif client.multi:
                for queued, args in client.multi:
                    if "write" in queued.flags and "zero_copy" not in queued.flags:
                        journal.stage(args)
        except DiskWriteError as exc:
            journal.note_disk_error(exc)
            refusal = ReplyError(errors.MISCONF)
            if spec.name == "exec":
                refusal = self._abort_exec(client, refusal)
            self._count(spec.full_name, 0, rejected=True)
            self.count_error(refusal)
            return refusal
        return None

    def finish_command(self, client: Client | None) -> None:
        """Log what the command changed, then wake clients blocked on keys it touched."""
        if self.pending:
            effects, self.pending = self.pending, []
            seq = self.server.journal.append(effects)
            if client is not None and client.conn is not None:
                client.conn.pending_seq = seq
                self.server.journal.note_reply(client, seq)
        if self.server.blocking.ready:
            self.server.blocking.serve_ready()

    def _collect(self, ctx: Any, db_id: int, argv: list[bytes], dirty_before: int, is_write: bool = True) -> None:
        """The one effect capture: what a command changed becomes log records (its rewrites, else
        its own argv when it made the server dirty), queued for ``finish_command``."""
        if ctx.rewritten:
            self.pending.extend((db_id, effect) for effect in ctx.effects or ())
        elif is_write and self.server.dirty != dirty_before:
            self.pending.append((db_id, argv))

    def run_retry(self, client: Client, request: BlockRequest) -> Any:
        """Retry a blocked client's command in its own context; effects are logged for it."""
        ctx = client.ctx
        ctx.effects = None
        ctx.rewritten = False
        saved_db = client.db_index
        client.db_index = request.db_index
        db_id = client.dbs[request.db_index].id
        dirty_before = self.server.dirty
        self.depth += 1
        start = time.perf_counter()
        try:
            reply = request.retry(ctx)
        except ReplyError as exc:
            reply = exc
        except Exception as exc:  # the error boundary (internal_error)
            reply = self.internal_error(request.argv[0].decode("latin-1").lower() if request.argv else "?", exc)
            ctx.effects, ctx.rewritten, dirty_before = None, False, self.server.dirty
        finally:
            self.depth -= 1
            client.db_index = saved_db
            request.usec += int((time.perf_counter() - start) * 1_000_000)
        if reply is NOT_READY:
            return reply
        self._collect(ctx, db_id, request.argv, dirty_before)
        if self.pending:
            effects, self.pending = self.pending, []
            seq = self.server.journal.append(effects)
            if client.conn is not None:
                client.conn.pending_seq = max(client.conn.pending_seq, seq)
                self.server.journal.note_reply(client, seq)
        return reply

    def run_deferred(self, client: Client, request: deferred.Deferred, results: list,
                     answer: Any = None) -> Any:
        """Finish a deferred command on the loop, in its client's context: its effects are
        logged now as its own record, then clients blocked on keys it touched are served.

        A query's finish (the part after its KNN in the pool) runs in slices like its handler
        (``pion.server.slices``): then this returns ``deferred.SLICED`` and ``answer(reply)``
        is called when it ends."""
        if answer is not None and request.argv and self.depth == 0:
            spec = self.lookup(request.argv)
            if spec.__class__ is CommandSpec and spec.sliced and self.server.slices.can_slice(client):
                reply = self.server.slices.run(client, spec, request.argv,  # type: ignore[arg-type]
                                               job=lambda ctx: request.finish(ctx, results), answer=answer)
                return deferred.SLICED if reply is BLOCKED else reply
        ctx = client.ctx
        ctx.effects = None
        ctx.rewritten = False
        dirty_before = self.server.dirty
        self.depth += 1
        try:
            reply = request.finish(ctx, results)
        except ReplyError as exc:
            reply = exc
        except Exception as exc:  # the error boundary (internal_error)
            reply = self.internal_error(request.argv[0].decode("latin-1").lower() if request.argv else "?", exc)
            ctx.effects, ctx.rewritten, dirty_before = None, False, self.server.dirty
        finally:
            self.depth -= 1
        self._collect(ctx, client.dbs[client.db_index].id, request.argv, dirty_before)
        self.finish_command(client)
        return reply

    def replay(self, client: Client, argv: list[bytes]) -> Any:
        """Apply a logged command during recovery: no checks, no logging, no stats."""
        spec = self.lookup(argv)
        if spec.__class__ is ReplyError:
            raise spec  # type: ignore[misc]
        ctx = client.ctx
        ctx.effects = None
        ctx.rewritten = False
        self.depth += 1
        try:
            return spec.handler(ctx, argv)  # type: ignore[union-attr]
        finally:
            self.depth -= 1
            self.pending.clear()

    # -- stats -------------------------------------------------------------------------

    def _count(self, name: str, usec: int, failed: bool = False, rejected: bool = False) -> None:
        entry = self.stats.get(name)
        if entry is None:
            entry = self.stats[name] = [0, 0, 0, 0]
        if rejected:
            entry[2] += 1
            self.server.stat_rejected += 1
            return
        entry[0] += 1
        entry[1] += usec
        if failed:
            entry[3] += 1
            self.server.stat_failed += 1
        self.server.stat_numcommands += 1

    def _count_rejected(self, argv: list[bytes]) -> None:
        """Redis's rejectCommand: a call refused by the lookup counts as a rejected call of the
        command it names when there is one (a wrong arity), in commandstats."""
        table = self.table.by_name
        spec = table.get(argv[0]) or table.get(argv[0].lower())
        if spec is not None and spec.subcommands and len(argv) > 1:
            spec = spec.subcommands.get(argv[1].lower())
        if spec is None:
            self.server.stat_rejected += 1
        else:
            self._count(spec.full_name, 0, rejected=True)

    def count_unblocked_error(self, argv: list[bytes] | None, error: ReplyError) -> None:
        """A blocked command that ends in an error (its group destroyed, CLIENT UNBLOCK ERROR):
        a failed call and an error reply in the stats, as Redis's updateStatsOnUnblock does."""
        self.count_error(error)
        spec = self.lookup(argv) if argv else None
        entry = self.stats.get(spec.full_name) if isinstance(spec, CommandSpec) else None
        if entry is not None:
            entry[3] += 1
            self.server.stat_failed += 1

    def count_error(self, error: ReplyError) -> None:
        """INFO errorstats: error replies by their prefix (the first word, as Redis)."""
        prefix = error.message.split(" ", 1)[0]
        stats = self.server.error_stats
        if prefix in stats or len(stats) < 128:  # Redis stops adding prefixes past 128
            stats[prefix] = stats.get(prefix, 0) + 1
