"""Running a script atomically while the server stays able to say -BUSY, and SCRIPT/FUNCTION KILL.

Lua runs on one worker thread (lupa releases the GIL while Lua code runs); every ``redis.call`` is
handed back to the loop thread, which runs it through the normal dispatcher, so the keyspace is
only ever touched by the loop thread. Two phases:

1. Until ``busy-reply-threshold`` the EVAL/FCALL handler itself waits for the worker on the loop
   thread, serving its calls: nothing else runs, other clients' commands simply wait in their
   sockets, and the effects are logged as one record when the handler returns (as any command).
2. Past the threshold the handler *detaches*: it parks the calling client (a key-less
   ``BlockRequest``) and returns, so the loop serves other clients again. While detached the
   dispatcher refuses everything but ``allow_busy`` commands with Redis's -BUSY text, the cron
   is held (no expiry, no save rules), and the script's calls keep being served on the loop
   thread between events, their effects and woken keys kept aside. When the script ends, its
   effects are logged as one record, blocked clients are served, and the caller gets its reply.

A script that has not called a write command can be stopped by SCRIPT KILL / FUNCTION KILL: the
Lua count hook (every 100k instructions) sees the flag and raises Redis's error. It does not
detach inside MULTI/EXEC, from a nested call, or while a snapshot is being written (the snapshot's
consistent point must not fall in the middle of a script); then the loop waits for the script.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ReplyError
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.dispatch import BLOCKED

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.client import Client
    from pion.server.context import Ctx
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

    def __init__(self, kind: str, name: str, argv: list[bytes], client: Client, read_only: bool, allow_oom: bool) -> None:
        self.kind = kind  # "eval" | "function"
        self.name = name  # the sha or the function name, for error replies
        self.argv = argv
        self.client = client
        self.read_only = read_only
        self.allow_oom = allow_oom
        self.resp = 2
        self.started = time.monotonic()
        self.wrote = False
        self.killed = False
        self.detached = False
        self.lock = threading.Lock()
        self.replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.effects: list[tuple[int, list[bytes]]] = []
        self.ready: list[tuple[int, bytes]] = []
        self.db_index = client.db_index
        self.runner: Runner | None = None

    def request(self, argv: list[bytes]) -> Any:
        """On the worker: have the loop thread run ``argv``; returns its reply."""
        runner = self.runner
        assert runner is not None
        with self.lock:
            if self.detached:
                try:
                    runner.loop.call_soon_threadsafe(runner.serve_detached, self, argv)  # type: ignore[union-attr]
                except RuntimeError:
                    return ReplyError("ERR server is shutting down")
            else:
                runner.inbox.put(("call", argv))
        return self.replies.get()


class Runner:
    """The worker thread and the two-phase protocol described in the module docstring."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.current: ScriptRun | None = None
        self.thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._threshold_source: Any = None
        self._threshold = 5.0

    # -- the loop thread ----------------------------------------------------------------------

    def execute(self, ctx: Ctx, run: ScriptRun, job: Callable[[], Any]) -> Any:
        """Run ``job`` (the Lua call) for ``run``; the reply, or a BlockRequest once detached."""
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        run.runner = self
        self.current = run
        if self.thread is None:
            self.thread = threading.Thread(target=self._work, name="pion-lua", daemon=True)
            self.thread.start()
        self.jobs.put((run, job))
        limit = self.threshold()
        while True:
            timeout = None if limit <= 0 else run.started + limit - time.monotonic()
            if timeout is not None and timeout <= 0:
                with run.lock:
                    try:
                        kind, payload = self.inbox.get_nowait()
                    except queue.Empty:
                        if self._can_detach(ctx):
                            return self._detach(run)
                        limit = 0
                        continue
            else:
                try:
                    kind, payload = self.inbox.get(timeout=timeout) if timeout is not None else self.inbox.get()
                except queue.Empty:
                    continue
            if kind == "call":
                run.replies.put(self.safe_call(run, payload))
                continue
            self.current = None
            run.client.db_index = run.db_index
            return payload

    def threshold(self) -> float:
        """busy-reply-threshold (alias lua-time-limit) in seconds; 0 means never BUSY."""
        settings = self.server.settings
        if self._threshold_source is not settings.extra:
            self._threshold_source = settings.extra
            raw = dict(settings.extra).get("busy-reply-threshold") or dict(settings.extra).get("lua-time-limit")
            try:
                self._threshold = int(raw) / 1000 if raw is not None else 5.0
            except ValueError:
                self._threshold = 5.0
        return self._threshold

    def _can_detach(self, ctx: Ctx) -> bool:
        client = ctx.client
        if self.loop is None or client.conn is None or client.multi is not None or client.executing:
            return False
        if self.server.dispatcher.depth != 1:
            return False
        persistence = self.server.engines.get("persistence")
        return getattr(persistence, "job", None) is None

    def _detach(self, run: ScriptRun) -> BlockRequest:
        dispatcher = self.server.dispatcher
        blocking = self.server.blocking
        run.effects, dispatcher.pending = dispatcher.pending, []
        run.ready, blocking.ready = blocking.ready, []
        run.detached = True
        dispatcher.busy = self.refusal
        log.warning("script %s is still running after %.0f ms: answering -BUSY", run.name, self.threshold() * 1000)
        return BlockRequest(keys=[], timeout=0, retry=lambda ctx: NOT_READY, on_timeout=None)

    def serve_detached(self, run: ScriptRun, argv: list[bytes]) -> None:
        """A call from a detached script: run it with the script's effects and woken keys."""
        dispatcher = self.server.dispatcher
        blocking = self.server.blocking
        saved = dispatcher.pending, blocking.ready
        dispatcher.pending, blocking.ready = run.effects, run.ready
        dispatcher.depth += 1
        try:
            reply = self.safe_call(run, argv)
        finally:
            dispatcher.depth -= 1
            run.effects, run.ready = dispatcher.pending, blocking.ready
            dispatcher.pending, blocking.ready = saved
        run.replies.put(reply)

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
        """``call``, turning a failing handler into an error reply: the worker must get an answer."""
        try:
            return self.call(run, argv)
        except Exception as exc:
            log.exception("command from a script failed: %r", argv[:1])
            return ReplyError(f"ERR {exc}")

    def call(self, run: ScriptRun, argv: list[bytes]) -> Any:
        """redis.call: the dispatcher's lookup, the script refusals, admission, then the command."""
        server = self.server
        dispatcher = server.dispatcher
        spec = dispatcher.lookup(argv)
        if spec.__class__ is ReplyError:
            return ReplyError(ARITY if spec.message.startswith("ERR wrong number") else UNKNOWN)  # type: ignore[union-attr]
        flags = spec.flags  # type: ignore[union-attr]
        if "noscript" in flags:
            return ReplyError(NOSCRIPT)
        if run.read_only and ("write" in flags or "may_replicate" in flags):
            return ReplyError(READONLY)
        client = run.client
        client.in_script = True  # ACL refusals and the ACL LOG say it came from a script
        try:
            refusal = server.admission.command_refusal(client, spec, argv)  # type: ignore[arg-type]
        finally:
            client.in_script = False
        if refusal is not None and not (refusal.message.startswith("OOM") and (run.allow_oom or run.wrote)):
            return refusal
        if "write" in flags:
            run.wrote = True
        proto = client.proto
        client.in_script = True
        client.proto = run.resp
        try:
            reply = dispatcher.call(client, spec, argv)  # type: ignore[arg-type]
        finally:
            client.in_script = False
            client.proto = proto
        if server.monitors:
            server.feed_monitors(_LuaClient(client), argv)
        return None if reply is BLOCKED else reply

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
        """Server stop: stop a running script (even one that wrote) and the worker."""
        run = self.current
        if run is not None:
            run.killed = True
            run.replies.put(ReplyError("ERR server is shutting down"))
        if self.thread is not None:
            self.jobs.put(None)

    # -- the worker thread ----------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self.jobs.get()
            if item is None:
                self.thread = None
                return
            run, job = item
            try:
                reply = job()
            except Exception as exc:
                log.exception("script failed")
                reply = ReplyError(f"ERR Error running script: {exc}")
            with run.lock:
                if not run.detached:
                    self.inbox.put(("done", reply))
                    continue
            try:
                self.loop.call_soon_threadsafe(self.finish_detached, run, reply)  # type: ignore[union-attr]
            except RuntimeError:
                pass  # the loop is gone (shutdown)


class _LuaClient:
    """What MONITOR shows for a script's command: ``[db lua]``."""

    def __init__(self, client: Client) -> None:
        self.db_index = client.db_index
        self.addr = ""
