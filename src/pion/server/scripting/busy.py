"""Running a script atomically on the event loop while the server stays able to say -BUSY, and
SCRIPT/FUNCTION KILL.

Lua runs on the loop thread, inside a greenlet of its own: a ``redis.call`` is a direct call into
the dispatcher (about a microsecond of Lua-to-Python crossing, no thread hand-off), and the
keyspace is only ever touched by the loop thread. The prelude's count hook (every 100k Lua
instructions) calls ``Bridge.killed``, which is where the time limit is kept. Two phases:

1. Until ``busy-reply-threshold`` the EVAL/FCALL handler runs the script to its end like any
   command: nothing else runs meanwhile, and the effects are logged as one record when the
   handler returns.
2. Past the threshold the hook switches out of the script's greenlet and the handler *detaches*:
   it parks the calling client (a key-less ``BlockRequest``) and returns, so the loop serves
   other clients again. While detached the dispatcher refuses everything but ``allow_busy``
   commands with Redis's -BUSY text, the cron is held (no expiry, no save rules), and the script
   goes on in slices of 100k instructions, one per loop turn (Redis's processEventsWhileBlocked
   in its hook), its calls' effects and woken keys kept aside. When it ends, its effects are
   logged as one record, blocked clients are served, and the caller gets its reply.

A script that has not called a write command can be stopped by SCRIPT KILL / FUNCTION KILL: the
hook sees the flag and raises Redis's error. It does not detach inside MULTI/EXEC, from a nested
call, or while a snapshot is being written (the snapshot's consistent point must not fall in the
middle of a script); then it runs to its end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import greenlet

from pion.protocol.errors import CountedError, ReplyError
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.dispatch import BLOCKED

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.context import Ctx
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec

log = logging.getLogger("pion.script")

BUSY_EVAL = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
BUSY_FUNCTION = "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
UNKILLABLE = (
    "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either "
    "wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."
)
NOTBUSY = "NOTBUSY No scripts in execution right now."
UNKNOWN = "ERR Unknown Redis command called from script"
ARITY = "ERR Wrong number of args calling Redis command from script"
NOSCRIPT = "ERR This Redis command is not allowed from script"
READONLY = "ERR Write commands are not allowed from read-only scripts."


class ScriptRun:
    """One running script or function: what redis.call, BUSY, KILL and FUNCTION STATS need."""

    def __init__(self, kind: str, name: str, argv: list[bytes], client: Client, read_only: bool, allow_oom: bool,
                 keys: list[bytes] | None = None) -> None:
        self.kind = kind  # "eval" | "function"
        self.name = name  # the sha or the function name, for error replies
        self.argv = argv
        #: the declared keys (KEYS); client-side caching remembers them once the script reads
        self.keys = keys or []
        self.read = False
        self.client = client
        self.read_only = read_only
        self.allow_oom = allow_oom
        self.resp = 2
        self.started = time.monotonic()
        self.wrote = False
        self.killed = False
        self.detached = False
        #: past the threshold but unable to detach (MULTI, nested, snapshot): run to the end
        self.stay = False
        self.effects: list[tuple[int, list[bytes]]] = []
        self.ready: list[tuple[int, bytes]] = []
        #: whether no refusal but -MISCONF can apply to its calls (``FastLane.script_admits``),
        #: asked at its first ``redis.call``
        self.plain: bool | None = None
        self.db_index = client.db_index
        #: flagged allow-cross-slot-keys: on a cluster node it counts on no slot (CLUSTER SLOT-STATS)
        self.cross_slot = False
        self.runner: Runner | None = None
        #: the greenlet running the script; ``done`` once its reply is known
        self.greenlet: Any = None
        self.done = False

    def request(self, argv: list[bytes]) -> Any:
        """redis.call from the script (on the loop thread): run ``argv``; returns its reply."""
        runner = self.runner
        assert runner is not None
        if self.detached:
            return runner.serve_detached(self, argv)
        try:  # safe_call, inline: the common path of every redis.call
            return runner.call(self, argv)
        except Exception as exc:
            return _failed_call(argv, exc)

    def checkpoint(self) -> bool:
        """The count hook: True when the script must stop (KILL, shutdown). Past the threshold
        it yields to the loop: once to detach, then once per hook call while detached."""
        runner = self.runner
        if runner is not None and not self.killed and not self.stay:
            if self.detached or time.monotonic() - self.started >= runner.threshold() > 0:
                self.greenlet.parent.switch(_YIELDED)
        return self.killed


class Runner:
    """The two-phase protocol described in the module docstring."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.current: ScriptRun | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        #: one greenlet runs script after script: making a greenlet costs ~40 us, a switch ~1 us
        self._worker: Any = None

    # -- the loop thread ----------------------------------------------------------------------

    def execute(self, ctx: Ctx, run: ScriptRun, job: Callable[[], Any]) -> Any:
        """Run ``job`` (the Lua call) for ``run``; the reply, or a BlockRequest once detached."""
        run.runner = self
        outer, self.current = self.current, run
        if not (self.threshold() > 0 and self._can_detach(ctx)):
            # it can never detach (busy-reply-threshold 0, MULTI, nested, no connection, a
            # snapshot being written; none of these changes while it runs): it runs here, to
            # its end, without the switch into the worker greenlet and back
            run.stay = True
            try:
                reply = job()
            except Exception as exc:  # as ``_work``: a failing engine still answers its caller
                log.exception("script failed")
                reply = ReplyError(f"ERR Error running script: {exc}")
            run.done = True
            self.current = outer
            run.client.db_index = run.db_index
            return reply
        run.greenlet = self._worker_for(outer)
        reply = run.greenlet.switch(job)
        if reply is _YIELDED:
            if self._can_detach(ctx):
                return self._detach(run)
            run.stay = True
            while reply is _YIELDED:
                reply = run.greenlet.switch()
        run.done = True
        self.current = outer
        run.client.db_index = run.db_index
        return reply

    def _worker_for(self, outer: ScriptRun | None) -> Any:
        """The greenlet to run a script in: the idle worker, or a new one when the worker is in
        use (a script inside another run) or belongs to another greenlet (another loop)."""
        here = greenlet.getcurrent()
        worker = self._worker
        if worker is None or worker.dead or worker.parent is not here or (outer is not None and outer.greenlet is worker):
            worker = greenlet.greenlet(_work, parent=here)
            if self._worker is None or self._worker.dead or outer is None:
                self._worker = worker
        return worker

    def threshold(self) -> float:
        """busy-reply-threshold (alias lua-time-limit) in seconds; 0 means never BUSY."""
        return self.server.settings.busy_reply_threshold / 1000

    def _can_detach(self, ctx: Ctx) -> bool:
        client = ctx.client
        if client.conn is None or client.multi is not None or client.executing:
            return False
        if self.server.dispatcher.depth != 1:
            return False
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        persistence = self.server.parts.persistence
        return getattr(persistence, "job", None) is None

    def _detach(self, run: ScriptRun) -> BlockRequest:
        dispatcher = self.server.dispatcher
        blocking = self.server.blocking
        run.effects, dispatcher.pending = dispatcher.pending, []
        run.ready, blocking.ready = blocking.ready, []
        run.detached = True
        dispatcher.busy = self.refusal
        log.warning("script %s is still running after %.0f ms: answering -BUSY", run.name, self.threshold() * 1000)
        self.loop.call_soon(self._slice, run)  # type: ignore[union-attr]
        return BlockRequest(keys=[], timeout=0, retry=lambda ctx: NOT_READY, on_timeout=None)

    def _slice(self, run: ScriptRun) -> None:
        """One loop turn of a detached script: up to its next hook call, or its end."""
        if run.done:
            return
        reply = run.greenlet.switch()
        if reply is not _YIELDED:
            run.done = True
            self.finish_detached(run, reply)
        elif self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon(self._slice, run)

    def serve_detached(self, run: ScriptRun, argv: list[bytes]) -> Any:
        """A call from a detached script: run it with the script's effects and woken keys."""
        dispatcher = self.server.dispatcher
        blocking = self.server.blocking
        saved = dispatcher.pending, blocking.ready
        dispatcher.pending, blocking.ready = run.effects, run.ready
        dispatcher.depth += 1
        try:
            return self.safe_call(run, argv)
        finally:
            dispatcher.depth -= 1
            run.effects, run.ready = dispatcher.pending, blocking.ready
            dispatcher.pending, blocking.ready = saved

    def finish_detached(self, run: ScriptRun, reply: Any) -> None:
        """The detached script ended: log its effects as one record, answer its caller."""
        dispatcher = self.server.dispatcher
        self.current = None
        dispatcher.busy = None
        client = run.client
        client.db_index = run.db_index
        dispatcher.pending.extend(run.effects)
        self.server.blocking.ready.extend(run.ready)
        dispatcher.finish_command(client)
        self.server.blocking.unblock(client, reply)

    def safe_call(self, run: ScriptRun, argv: list[bytes]) -> Any:
        """``call``, turning a failing handler into an error reply: the script must get an answer."""
        try:
            return self.call(run, argv)
        except Exception as exc:
            return _failed_call(argv, exc)

    def call(self, run: ScriptRun, argv: list[bytes]) -> Any:
        """redis.call: the dispatcher's lookup, the script refusals, admission, then the command.

        As Redis's scriptCall: a refusal (unknown command, arity, noscript, a read-only script's
        write, the ACL, OOM, MISCONF, NOREPLICAS) is counted in the error stats and as a rejected
        call of the command, and every error the script gets back (refusal or the command's own
        reply) is a CountedError, so the script's own error reply does not count it again."""
        server = self.server
        dispatcher = server.dispatcher
        spec = dispatcher.lookup(argv)
        if spec.__class__ is ReplyError:
            arity = spec.message.startswith("ERR wrong number")  # type: ignore[union-attr]
            if arity:
                dispatcher._count_rejected(argv)
            return _rejected(dispatcher, None, ARITY if arity else UNKNOWN)
        flags = spec.flags  # type: ignore[union-attr]
        if "noscript" in flags:
            return _rejected(dispatcher, spec, NOSCRIPT)
        if run.read_only and ("write" in flags or "may_replicate" in flags):
            return _rejected(dispatcher, spec, READONLY)
        client = run.client
        client.in_script = True  # ACL refusals, the ACL LOG and the command itself: it came from a script
        try:
            if run.plain is None:  # asked once per run: nothing a script may call changes the answer
                run.plain = server.lane.script_admits(client)
            if run.plain:  # only -MISCONF can refuse (the log's state may change meanwhile)
                durability = server.admission.durability
                refusal = durability.write_refusal(spec.name, flags) if durability is not None else None  # type: ignore[union-attr]
            else:
                refusal = server.admission.command_refusal(client, spec, argv)  # type: ignore[arg-type]
            if refusal is not None and not (refusal.message.startswith("OOM") and (run.allow_oom or run.wrote)):
                return _rejected(dispatcher, spec, refusal.message)
            if spec.is_write:  # type: ignore[union-attr]
                run.wrote = True
            if dispatcher.slot_stats is not None:  # the script's slot (Redis's scriptVerifyClusterState)
                from pion.server.cluster.slot_stats import script_call

                script_call(client, spec, argv, run.cross_slot)  # type: ignore[arg-type]
            proto = client.proto
            client.proto = run.resp
            try:
                reply = dispatcher.call(client, spec, argv)  # type: ignore[arg-type]
            finally:
                client.proto = proto
        finally:
            client.in_script = False
        if not run.read and "readonly" in flags and client.tracking is not None:
            run.read = True  # a script that reads is tracked on its declared keys (Redis 7.0)
            server.tracking.remember(client, run.keys)
        if server.monitors:
            server.feed_monitors(_LuaClient(client), argv)
        if reply is BLOCKED:
            return None
        if reply.__class__ is ReplyError:  # dispatcher.call counted it
            return CountedError(reply.message)
        return reply

    # -- BUSY and KILL (loop thread, while detached) --------------------------------------------

    def refusal(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> ReplyError | None:
        run = self.current
        if run is None:
            return None
        busy = ReplyError(BUSY_EVAL if run.kind == "eval" else BUSY_FUNCTION)
        if "allow_busy" in spec.flags:
            if spec.name == "shutdown" and not any(arg.lower() == b"nosave" for arg in argv[1:]):
                return busy
            return None
        return busy

    def kill(self, is_eval: bool) -> None:
        """SCRIPT KILL (is_eval) / FUNCTION KILL; raises the refusal Redis gives."""
        run = self.current
        if run is None or not run.detached:
            raise ReplyError(NOTBUSY)
        if run.wrote:
            raise ReplyError(UNKILLABLE)
        if is_eval and run.kind != "eval":
            raise ReplyError(BUSY_FUNCTION)
        if not is_eval and run.kind == "eval":
            raise ReplyError(BUSY_EVAL)
        run.killed = True

    def shutdown(self, server: Server) -> None:
        """Server stop: a detached script (even one that wrote) is stopped at its next hook."""
        run = self.current
        if run is not None:
            run.killed = True
            if run.detached and not run.done:
                run.greenlet.switch()  # the hook sees ``killed``: the script raises and ends
                run.done = True


def _rejected(dispatcher: Any, spec: Any, message: str) -> CountedError:
    """A refused redis.call: a rejected call of ``spec`` (when known) and one error reply."""
    if spec is not None:
        dispatcher._count(spec.full_name, 0, rejected=True)
    error = CountedError(message)
    dispatcher.count_error(error)
    return error


def _failed_call(argv: list[bytes], exc: Exception) -> ReplyError:
    """A handler failed under redis.call: the script still gets an answer."""
    log.exception("command from a script failed: %r", argv[:1])
    return ReplyError(f"ERR {exc}")


#: what the count hook hands the loop when the script yields (a reply is anything else)
_YIELDED = object()


def _work(job: Callable[[], Any]) -> None:
    """A script greenlet's body: run each job it is switched to, hand its reply back to the
    loop (its parent) and wait there for the next. A failing engine still answers its caller."""
    while True:
        try:
            reply = job()
        except Exception as exc:
            log.exception("script failed")
            reply = ReplyError(f"ERR Error running script: {exc}")
        job = greenlet.getcurrent().parent.switch(reply)


class _LuaClient:
    """What MONITOR shows for a script's command: ``[db lua]``."""

    def __init__(self, client: Client) -> None:
        self.db_index = client.db_index
        self.addr = ""
