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

try:  # Cython's pure-Python mode: the compiler reads the types below; without Cython, a stand-in
    import cython
except ImportError:  # pragma: no cover - Cython is in the dev extra
    from pion.server import _cython_shim as cython  # type: ignore[no-redef]

from pion.protocol.errors import CountedError, ReplyError
from pion.protocol.resp import Pairs, Streamed, encode_vectored
from pion.protocol.streamed import STREAM_MIN
from pion.server.blocking import BlockRequest
from pion.server.dispatch import BLOCKED

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec

#: the commands the lane runs: neither of them changes what ``admits`` answers (module doc; a
#: script's ``redis.call`` may run none of the commands that would: they are ``noscript``), none
#: defers to the worker pool, and only a script blocks (detached past busy-reply-threshold)
HOT = frozenset({
    "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro",
    "get", "set", "setnx", "setex", "psetex", "getset", "getdel", "append", "strlen", "mget", "mset",
    "incr", "decr", "incrby", "decrby", "incrbyfloat", "exists", "del", "unlink", "type", "ttl", "pttl",
    "expire", "pexpire", "persist",
    "hset", "hget", "hmget", "hmset", "hdel", "hlen", "hexists", "hgetall", "hincrby", "hsetnx",
    "lpush", "rpush", "lpop", "rpop", "llen", "lrange", "lindex",
    "sadd", "srem", "smembers", "sismember", "scard",
    "zadd", "zrem", "zscore", "zcard", "zincrby", "zrange", "zrank",
    "ping", "echo",
})

#: a long batch (``redis-cli --pipe``: thousands of commands per read) hands its records over
#: every this many: holding them all kept thousands of small lists alive past the collector's
#: young generation, which cost more than the calls saved
HAND_OFF_EVERY = 32

#: the latency histograms' clamp (``pion.server.admin.latency.MAX_NS``; the lane fills their buckets)
MAX_NS = 1_000_000_000

#: set in the environment: the compiled lane is not used (the same one as the vector-set kernel's)
PURE_ENV = "PION_PURE"

#: ``FastLane.run``'s answers besides an argv: the reply in ``lane.reply`` is the connection's to
#: deliver (it may be streamed); the output passed the high-water mark (the connection flushes)
if cython.compiled:  # one pair for both builds: the connection compares with the pure module's
    from pion.server.fastlane import FULL, REPLY
else:
    REPLY = object()
    FULL = object()


@cython.cclass
class Hot:
    """One hot command's spec with the lane's questions answered once (a C struct when compiled)."""

    arity: cython.Py_ssize_t
    misconf: cython.bint  # a write, or PING: asks durability for -MISCONF
    is_write: cython.bint
    stages: cython.bint
    is_read: cython.bint
    event: str  # the latency-monitor event's name
    skip_slowlog: cython.bint
    full_name: str
    name: str
    flags: frozenset
    spec: object

    def __init__(self, spec: CommandSpec) -> None:
        self.spec = spec
        self.arity = spec.arity
        self.is_write = spec.is_write
        self.misconf = spec.is_write or spec.name == "ping"
        self.stages = spec.stages
        self.is_read = spec.is_read
        self.event = "fast-command" if "fast" in spec.flags else "command"
        self.skip_slowlog = "skip_slowlog" in spec.flags
        self.full_name = spec.full_name
        self.name = spec.name
        self.flags = spec.flags


class FastLane:
    """The hot commands' path for one server (``server.lane``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        #: command names as clients spell them (lower and upper case) -> the spec, as ``Hot``
        self.specs: dict[bytes, Hot] = {}
        #: the reply ``run`` hands to the connection with ``REPLY`` (``BLOCKED`` included)
        self.reply: Any = None
        for name in HOT:
            spec = server.table.by_name.get(name.encode())
            if spec is None or spec.handler is None or spec.subcommands or "blocking" in spec.flags:
                continue
            self.specs[name.encode()] = self.specs[name.upper().encode()] = Hot(spec)

    def run(self, conn: Any, client: Client, reader: Any, high_water: int) -> Any:
        """The hot commands at the head of the connection's buffer, their replies encoded onto
        ``conn.out``; returns what the connection does next: the first argv that is not hot (for
        ``Dispatcher.execute``), None (no complete command left), an empty argv, ``REPLY`` or
        ``FULL``. Asked only while ``admits(client)`` holds; the reader's own errors
        (``ProtocolError``) go up to the connection as from its own loop.

        Each command: the arity, -MISCONF for a write (the log's state can change between two
        commands), large arguments staged, the handler, then ``Dispatcher.call``'s bookkeeping
        inline (commandstats, errorstats, the latency histogram and events, keyspace hits, the
        slow log, the effect capture and clients woken on keys). The plain writes' records are
        handed to the journal together (``hand_off``) when the batch ends, before a command whose
        effects are a script's or rewritten or that wakes blocked clients, and on any exit (an
        error of the reader included): each is still one record per command, in the same
        order, and every reply still waits for its record to be durable (the connection
        flushes after ``run`` returns)."""
        records: list = []  # the batch's write records not handed to the journal yet
        marks: list = []  # where each one's reply goes in ``out``
        try:
            return self._run(conn, client, reader, high_water, records, marks)
        finally:
            if records:  # before the replies leave (they wait for these records to be durable)
                self.hand_off(conn, client, records, marks)

    def hand_off(self, conn: Any, client: Client, records: list, marks: list) -> None:
        """The batch's write records to the journal in one call, in order, as ``finish_command``
        would have handed each: the connection's replies wait for the last one to be durable,
        and each reply's place is noted (a failed log write answers it -MISCONF)."""
        journal = self.server.journal
        last: cython.Py_ssize_t = journal.append_many(records)
        first: cython.Py_ssize_t = last - len(records) + 1
        i: cython.Py_ssize_t
        if last > conn.pending_seq:
            conn.pending_seq = last
        for i in range(len(marks)):
            journal.note_reply(client, first + i, marks[i])
        records.clear()
        marks.clear()

    def _run(self, conn: Any, client: Client, reader: Any, high_water: int, records: list, marks: list) -> Any:
        """``run``'s loop; the write records it leaves in ``records`` are handed off by ``run``."""
        specs: dict = self.specs
        out: list = conn.out
        stats: dict = self.dispatcher.stats
        histograms: dict = self.server.latency.histograms
        counts: list
        hot: Hot
        nargs: cython.Py_ssize_t
        arity: cython.Py_ssize_t
        start: cython.longlong
        elapsed_ns: cython.longlong
        usec: cython.longlong
        slow_usec: cython.longlong = self.dispatcher.slow_usec
        server = self.server
        dispatcher = self.dispatcher
        journal = server.journal
        tracking = server.tracking
        durability = server.admission.durability
        proto = client.proto
        ctx = client.ctx
        latency_tracking = dispatcher.latency_tracking
        latency_threshold = dispatcher.latency_threshold
        touched: cython.bint = False
        while True:
            argv = reader.next_command()
            if not argv:
                return argv
            found = specs.get(argv[0])
            if found is None:
                return argv
            hot = found
            if not touched:  # a complete command: the idle clock (timeouts, CLIENT LIST), once a batch
                client.last_interaction = time.time()
                touched = True
            arity = hot.arity
            nargs = len(argv)
            if (arity > 0 and nargs != arity) or nargs < -arity:
                reply = dispatcher.execute(client, argv)  # the error, counted as the dispatcher does
            elif durability is not None and hot.misconf \
                    and (refusal := durability.write_refusal(hot.name, hot.flags)) is not None:
                dispatcher._count(hot.full_name, 0, rejected=True)
                dispatcher.count_error(refusal)
                reply = refusal
            elif hot.stages and (refusal := dispatcher._stage(client, hot.spec, argv)) is not None:
                reply = refusal
            else:
                tracking.current = client
                try:
                    ctx.effects = None
                    ctx.rewritten = False
                    dirty_before = server.dirty
                    db = client.dbs[client.db_index]
                    counted = hot.is_read and db.read_stats is None
                    if counted:
                        db.read_stats = server
                    dispatcher.depth = 1
                    start = perf_counter_ns()
                    failed = crashed = False
                    try:
                        reply = hot.spec.handler(ctx, argv)  # type: ignore[attr-defined]  # read live: it may be replaced
                    except ReplyError as exc:
                        reply = exc
                        failed = True
                    except Exception as exc:  # the error boundary (Dispatcher.internal_error)
                        reply = dispatcher.internal_error(hot.full_name, exc)
                        failed = crashed = True
                    finally:
                        dispatcher.depth = 0
                        if counted:
                            db.read_stats = None
                    elapsed_ns = perf_counter_ns() - start
                    usec = elapsed_ns // 1000
                    name = hot.full_name
                    cls = reply.__class__
                    entry = stats.get(name)  # INFO commandstats: [calls, usec, rejected, failed]
                    if entry is None:
                        entry = stats[name] = [0, 0, 0, 0]
                    entry[0] += 1
                    entry[1] += usec
                    if failed or cls is ReplyError or cls is CountedError:
                        entry[3] += 1
                        server.stat_failed += 1
                        if cls is not CountedError:
                            dispatcher.count_error(reply)
                    server.stat_numcommands += 1
                    blocked = cls is BlockRequest  # a detached script: recorded when it ends
                    if latency_tracking and not blocked:
                        histogram = histograms.get(name)
                        if histogram is None:
                            server.latency.record_command(name, elapsed_ns)
                        else:
                            histogram.sum_ns += elapsed_ns
                            counts = histogram.counts
                            counts[bucket(elapsed_ns)] += 1
                            histogram.total += 1
                    if latency_threshold and not blocked:
                        dispatcher.latency_sample(hot.event, elapsed_ns / 1e9)
                    client.commands_processed += 1
                    client.last_cmd = name
                    rewritten = ctx.rewritten
                    if not crashed:  # the one effect capture (Dispatcher.call)
                        if rewritten:
                            db_id = db.id
                            dispatcher.pending.extend((db_id, effect) for effect in ctx.effects or ())
                        elif hot.is_write and server.dirty != dirty_before:
                            dispatcher.pending.append((db.id, argv))
                    ctx.effects = None
                    ctx.rewritten = False
                    if blocked:  # as Dispatcher.call: the slow log has it when it ends
                        reply.argv = argv
                        reply.usec = usec
                        server.blocking.block(client, reply)
                        reply = BLOCKED
                    elif usec >= slow_usec and server.slowlog is not None and not hot.skip_slowlog:
                        server.slowlog.observe(client, argv, usec)
                    if dispatcher.pending:
                        # batched: a plain write's own argv, whose large arguments were staged
                        # before it ran (its record needs no arena write that could fail and
                        # refuse the next writes); a script's effects, a rewrite or a command that
                        # woke blocked clients is handed off now, after the batch's records
                        if rewritten or blocked or not hot.is_write or server.blocking.ready:
                            if records:
                                self.hand_off(conn, client, records, marks)
                            dispatcher.finish_command(client)
                        else:  # one record, handed to the journal with the batch's others
                            records.append(dispatcher.pending)
                            dispatcher.pending = []
                            marks.append(len(out))  # where its reply goes (a failed log write: -MISCONF)
                            if len(records) >= HAND_OFF_EVERY:
                                self.hand_off(conn, client, records, marks)
                    elif server.blocking.ready:
                        if records:
                            self.hand_off(conn, client, records, marks)
                        dispatcher.finish_command(client)
                finally:
                    tracking.current = None
            seq = journal.seq
            if seq > conn.pending_seq:  # a reply may show writes not durable yet: it waits for them
                conn.pending_seq = seq
            cls = reply.__class__
            if reply is BLOCKED or cls is Streamed or ((cls is list or cls is Pairs) and len(reply) >= STREAM_MIN):
                self.reply = reply
                return REPLY
            data = encode_vectored(reply, proto)
            out.append(data)
            conn.out_size += len(data) if data.__class__ is bytes else data.nbytes
            if conn.out_size > high_water:
                return FULL

    def script_admits(self, client: Client) -> bool:
        """Whether a script's ``redis.call``s may skip admission's checks but -MISCONF: no ACL or
        tenant limit, no ``maxmemory``, no ``min-replicas-to-write`` (``Admission.command_refusal``
        would answer None for each). A script cannot change these (ACL, CONFIG are ``noscript``;
        while it is detached other clients get -BUSY), so it is asked once per run."""
        server = self.server
        security = server.admission.security
        if server.settings.maxmemory or server.settings.min_replicas_to_write:
            return False
        return security is None or security.admits_all(client)

    def admits(self, client: Client) -> bool:
        """Whether the client's next commands may take the lane: every answer of admission and
        of the dispatcher's branches that a ``HOT`` command cannot change is the plain one."""
        server = self.server
        if (client.multi is not None or not client.authenticated or client.tracking is not None
                or client.reply_mode != "on" or client.in_script or client.executing or server.monitors or server.paused_until
                or server.loading or self.dispatcher.busy is not None or self.dispatcher.depth):
            return False
        slices = server.slices
        if slices.active or slices.parked:  # a query in slices holds a read lock: the dispatcher parks writers
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


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def bucket(ns: cython.longlong) -> cython.Py_ssize_t:
    """The latency histogram's bucket of ``ns`` nanoseconds: ``Histogram.record``'s (admin.latency;
    tests/unit/test_fastlane.py checks them equal), in C arithmetic when compiled."""
    bits: cython.int
    v: cython.longlong
    if ns < 1:
        ns = 1
    elif ns > MAX_NS:
        ns = MAX_NS
    if cython.compiled:
        bits = 0
        v = ns
        while v:
            v >>= 1
            bits += 1
    else:
        bits = ns.bit_length()
    if bits <= 4:
        return ns
    return (bits << 4) | ((ns >> (bits - 5)) & 15)


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
