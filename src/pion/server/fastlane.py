"""The fast lane: the hottest commands of a plain client, with the checks done once per batch.

Why: a pipelined GET or SET spent most of its CPU in the generic path's questions (admission's
eight checks, the dispatcher's MULTI/MONITOR/tracking/blocking branches), asked again for
every command although for a plain client they cannot change between two commands of the same
read. ``FastLane.admits(client)`` answers them once for the batch; each command of the batch
whose name is in ``HOT`` then runs through ``FastLane.execute``: the arity, the per-command
refusals that can change meanwhile (memory, MISCONF), the handler, and the same bookkeeping
``Dispatcher.call`` does (commandstats, errorstats, the latency histogram and events, keyspace
hits, the slow log, effects to the journal, clients woken on keys), in one function.

What keeps it exact: a ``HOT`` command cannot change any answer of ``admits`` (it does not
authenticate, select, subscribe, enter MULTI, turn tracking or MONITOR on, change a user or a
setting, block or defer); any other command goes through ``Dispatcher.execute`` and the
connection asks ``admits`` again after it. Nothing else runs on the loop between two commands
of one batch. A client the lane does not admit (not authenticated, in MULTI, tracking, in
RESP2 subscribed mode, an ACL-restricted user or a tenant, a paused server, MONITOR on, a
busy script, loading, a cluster node, ``maxmemory`` or ``min-replicas-to-write`` set, a
read-only replica) runs everything through the dispatcher, as before.

The same source is compiled by Cython at install when a compiler is there
(``pion.server._fastlane``, setup.py); ``PION_PURE=1`` or a missing build runs this module
as it is (``implementation()`` says which, the server logs it at start).
"""

from __future__ import annotations

import os
import time
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import CountedError, ReplyError

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec

#: the commands the lane runs: neither of them changes what ``admits`` answers (module doc),
#: none blocks or defers to the worker pool
HOT = frozenset({
    "get", "set", "setnx", "setex", "psetex", "getset", "getdel", "append", "strlen", "mget", "mset",
    "incr", "decr", "incrby", "decrby", "incrbyfloat", "exists", "del", "unlink", "type", "ttl", "pttl",
    "expire", "pexpire", "persist",
    "hset", "hget", "hmget", "hmset", "hdel", "hlen", "hexists", "hgetall", "hincrby", "hsetnx",
    "lpush", "rpush", "lpop", "rpop", "llen", "lrange", "lindex",
    "sadd", "srem", "smembers", "sismember", "scard",
    "zadd", "zrem", "zscore", "zcard", "zincrby", "zrange", "zrank",
    "ping", "echo",
})

#: set in the environment: the compiled lane is not used (the same one as the vector-set kernel's)
PURE_ENV = "PION_PURE"


class FastLane:
    """The hot commands' path for one server (``server.lane``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        #: command names as clients spell them (lower and upper case) -> the spec
        self.specs: dict[bytes, CommandSpec] = {}
        for name in HOT:
            spec = server.table.by_name.get(name.encode())
            if spec is None or spec.handler is None or spec.subcommands or "blocking" in spec.flags:
                continue
            self.specs[name.encode()] = spec
            self.specs[name.upper().encode()] = spec

    def admits(self, client: Client) -> bool:
        """Whether the client's next commands may take the lane: every answer of admission and
        of the dispatcher's branches that a ``HOT`` command cannot change is the plain one."""
        server = self.server
        if (client.multi is not None or not client.authenticated or client.tracking is not None
                or client.in_script or client.executing or server.monitors or server.paused_until
                or server.loading or self.dispatcher.busy is not None or self.dispatcher.depth):
            return False
        if client.proto == 2 and client.subscription_count:
            return False
        admission = server.admission
        if admission.cluster is not None or server.settings.maxmemory:
            return False
        security = admission.security
        if security is not None and not security.admits_all(client):
            return False
        replication = admission.replication
        if replication is not None and (replication.side is not None or server.settings.min_replicas_to_write):
            return False
        return True

    def execute(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> Any:
        """Run one admitted hot command: ``Dispatcher.execute`` and ``call`` for this case."""
        server = self.server
        dispatcher = self.dispatcher
        client.last_interaction = time.time()
        arity = spec.arity
        nargs = len(argv)
        if (arity > 0 and nargs != arity) or nargs < -arity:
            return dispatcher.execute(client, argv)  # the error, counted as the dispatcher does
        if spec.is_write or spec.name == "ping":
            durability = server.admission.durability
            if durability is not None:  # -MISCONF: the log's state can change between two commands
                refusal = durability.write_refusal(spec.name, spec.flags)
                if refusal is not None:
                    dispatcher._count(spec.full_name, 0, rejected=True)
                    dispatcher.count_error(refusal)
                    return refusal
        if spec.stages:
            refusal = dispatcher._stage(client, spec, argv)
            if refusal is not None:
                return refusal
        tracking = server.tracking
        tracking.current = client
        try:
            return self._call(client, spec, argv)
        finally:
            tracking.current = None

    def _call(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> Any:
        """The handler and ``Dispatcher.call``'s bookkeeping, at depth 0 with ``tracking.current`` set."""
        server = self.server
        dispatcher = self.dispatcher
        ctx = client.ctx
        ctx.effects = None
        ctx.rewritten = False
        dirty_before = server.dirty
        db = client.dbs[client.db_index]
        counted = spec.is_read and db.read_stats is None
        if counted:
            db.read_stats = server
        dispatcher.depth = 1
        start = perf_counter_ns()
        failed = crashed = False
        try:
            reply = spec.handler(ctx, argv)  # type: ignore[misc]
        except ReplyError as exc:
            reply = exc
            failed = True
        except Exception as exc:  # the error boundary (Dispatcher.internal_error)
            reply = dispatcher.internal_error(spec.full_name, exc)
            failed = crashed = True
        finally:
            dispatcher.depth = 0
            if counted:
                db.read_stats = None
        elapsed_ns = perf_counter_ns() - start
        usec = elapsed_ns // 1000
        name = spec.full_name
        cls = reply.__class__
        error_reply = failed or cls is ReplyError or cls is CountedError
        stats = dispatcher.stats
        entry = stats.get(name)
        if entry is None:
            entry = stats[name] = [0, 0, 0, 0]
        entry[0] += 1
        entry[1] += usec
        if error_reply:
            entry[3] += 1
            server.stat_failed += 1
            dispatcher.count_error(reply)
        server.stat_numcommands += 1
        if dispatcher.latency_tracking:
            histogram = server.latency.histograms.get(name)
            if histogram is None:
                server.latency.record_command(name, elapsed_ns)
            else:
                histogram.record(elapsed_ns)
        if dispatcher.latency_threshold:
            dispatcher.latency_sample("fast-command" if "fast" in spec.flags else "command", elapsed_ns / 1e9)
        client.commands_processed += 1
        client.last_cmd = name
        if not crashed:
            if ctx.rewritten:
                db_index = db.id
                dispatcher.pending.extend((db_index, effect) for effect in ctx.effects or ())
            elif spec.is_write and server.dirty != dirty_before:
                dispatcher.pending.append((db.id, argv))
        ctx.effects = None
        ctx.rewritten = False
        if usec >= dispatcher.slow_usec and server.slowlog is not None and "skip_slowlog" not in spec.flags:
            server.slowlog.observe(client, argv, usec)
        if dispatcher.pending or server.blocking.ready:
            dispatcher.finish_command(client)
        return reply


def _compiled() -> type[FastLane] | None:
    if os.environ.get(PURE_ENV):
        return None
    try:
        from pion.server import _fastlane  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _fastlane.FastLane  # type: ignore[no-any-return]


def lane_class() -> type[FastLane]:
    """The compiled lane when it was built and ``PION_PURE`` is not set, else this module's."""
    return _compiled() or FastLane


def implementation() -> str:
    """What the server logs at start: which request path runs."""
    if lane_class() is FastLane:
        why = "PION_PURE=1" if os.environ.get(PURE_ENV) else "the compiled lane is not built"
        return f"request fast lane: pure Python ({why})"
    return "request fast lane: compiled (Cython)"
