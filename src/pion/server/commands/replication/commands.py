"""Replication's commands: ROLE, REPLICAOF/SLAVEOF, WAIT, WAITAOF, SYNC, PSYNC, REPLCONF.

The state behind them is ``pion.server.replication.Replication`` (``server.parts.replication``,
docs/replication.md). A bare server without it (unit tests) answers as a
master that has no replicas: ROLE at offset 0, WAIT counting 0. WAITAOF reports the local fsync
of the caller's last write (the log's group commit, ``pion.server.durability.wal_journal``) and the
replicas that acknowledged it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.args import parse_int
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.context import Ctx
from pion.server.registry import command

_ADMIN_CATS = "@admin @slow @dangerous"
#: how often a WAITAOF that waits for an fsync looks again (the writer fsyncs every second under everysec)
WAITAOF_POLL = 0.005


def _timeout_ms(raw: bytes) -> int:
    """Redis's getTimeoutFromObjectOrReply in milliseconds."""
    ms = parse_int(raw, errors.NOT_INT_TIMEOUT)
    if ms < 0:
        raise ReplyError(errors.NEGATIVE_TIMEOUT)
    return ms


def _never(ctx: Ctx) -> Any:
    return NOT_READY


def _repl(ctx: Ctx) -> Any:
    return ctx.server.parts.replication


@command("ROLE", 1, "noscript loading stale fast", categories="@admin @fast @dangerous", group="server", since="2.8.12")
def role(ctx: Ctx, argv: list[bytes]):
    """ROLE

    ``master offset [[ip, port, acked offset] ...]`` or ``slave host port state offset``.
    """
    repl = _repl(ctx)
    return repl.role() if repl is not None else [b"master", 0, []]


@command("REPLICAOF", 3, "admin noscript stale no_async_loading", categories=_ADMIN_CATS, group="server", since="5.0.0")
def replicaof(ctx: Ctx, argv: list[bytes]):
    """REPLICAOF host port | NO ONE

    Follow a primary (a full or partial resync, then its stream), or stop following and serve
    writes with the data as it is (a promotion).
    """
    if ctx.server.admission.cluster is not None:  # Redis's first check: a cluster node's replicas come from the bus
        raise ReplyError("ERR REPLICAOF not allowed in cluster mode.")
    repl = _repl(ctx)
    if argv[1].upper() == b"NO" and argv[2].upper() == b"ONE":
        if repl is not None and repl.is_replica:
            repl.promote()
        return OK
    if repl is None:
        raise ReplyError(f"ERR {argv[0].decode(errors='replace').upper()} needs a server with persistence")
    port = parse_int(argv[2])
    if not 0 < port <= 65535:
        raise ReplyError("ERR Invalid master port")
    host = argv[1].decode("utf-8", "replace")
    side = repl.side
    if side is not None and side.host == host and side.port == port:
        return Status("OK Already connected to specified master")
    server = ctx.server
    if host in ("127.0.0.1", "localhost", "::1") and port == server.bound_port:
        raise ReplyError("ERR a server cannot replicate itself")
    repl.follow(host, port)
    return OK


@command("SLAVEOF", 3, "admin noscript stale no_async_loading", categories=_ADMIN_CATS, group="server", since="1.0.0")
def slaveof(ctx: Ctx, argv: list[bytes]):
    """SLAVEOF host port | NO ONE

    The old name of REPLICAOF.
    """
    return replicaof(ctx, argv)


@command("WAIT", 3, "noscript", categories="@slow @connection", group="generic", since="3.0.0")
def wait(ctx: Ctx, argv: list[bytes]):
    """WAIT numreplicas timeout

    The number of replicas that acknowledged (durable on their disk) every write logged before
    this WAIT: at once when that is enough (or inside MULTI), else when enough have or the
    timeout (milliseconds, 0 = forever) expires.
    """
    wanted = parse_int(argv[1])
    ms = _timeout_ms(argv[2])
    repl = _repl(ctx)
    if repl is not None and repl.is_replica:
        raise ReplyError("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if "
                         "a replica is configured to be writable (which is not the default) writes to replicas are "
                         "just local and are not propagated.")
    primary = repl.primary if repl is not None else None
    target = primary.offset if primary is not None else 0
    count = primary.count_acked(target) if primary is not None else 0
    if count >= wanted or not ctx.can_block:
        return count
    request = BlockRequest(keys=[], timeout=ms / 1000.0, retry=_never, on_timeout=count)
    if primary is not None and primary.links:
        primary.wait(ctx.client, request, wanted, target)
    return request


@command("WAITAOF", 4, "noscript", categories="@slow @connection", group="generic", since="7.2.0",
         summary="Blocks until all of the preceding write commands sent by the connection are written to the "
                 "append-only file of the primary and/or replicas.")
def waitaof(ctx: Ctx, argv: list[bytes]):
    """WAITAOF numlocal numreplicas timeout

    ``[local, replicas]``: local is 1 once this connection's last write is fsynced to the log
    (with ``appendfsync always`` that is true before the write was answered; with ``everysec``
    it waits up to a second; with ``no`` Pion never fsyncs by itself, so it waits for the
    timeout); replicas counts those whose acknowledged offset covers every write logged before
    (a replica acknowledges what is durable under its own appendfsync).
    """
    numlocal = parse_int(argv[1])
    if not 0 <= numlocal <= 1:
        raise ReplyError("ERR value is out of range, value must between 0 and 1")
    numreplicas = parse_int(argv[2])
    if numreplicas < 0:
        raise ReplyError("ERR value is out of range, must be positive")
    ms = _timeout_ms(argv[3])
    server = ctx.server
    repl = _repl(ctx)
    if repl is not None and repl.is_replica:
        raise ReplyError("ERR WAITAOF cannot be used with replica instances. Please also note that writes to "
                         "replicas are just local and are not propagated.")
    if numlocal and not server.settings.appendonly:
        raise ReplyError("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
    conn = ctx.client.conn
    target = conn.pending_seq if conn is not None else 0
    primary = repl.primary if repl is not None else None
    offset = primary.offset if primary is not None else 0

    def counts() -> list[int]:
        return [_synced(server, target), primary.count_acked(offset) if primary is not None else 0]

    now = counts()
    if (now[0] >= numlocal and now[1] >= numreplicas) or not ctx.can_block:
        return now
    request = BlockRequest(keys=[], timeout=ms / 1000.0, retry=_never, on_timeout=now)
    if numreplicas and primary is not None and primary.links:
        primary.append_command(b"REPLCONF", b"GETACK", b"*")
    _poll(server, ctx.client, request, counts, numlocal, numreplicas)
    return request


def _synced(server: Any, seq: int) -> int:
    """1 when the log record ``seq`` is on disk (fsynced), else 0."""
    journal = server.journal
    return int(getattr(journal, "synced_seq", journal.durable_seq) >= seq) if server.settings.appendonly else 0


def _poll(server: Any, client: Any, request: BlockRequest, counts: Any, numlocal: int, numreplicas: int) -> None:
    """Watch the local fsync and the replicas' acknowledgements: answer once both are enough;
    until then the timeout answers the latest counts."""
    loop = asyncio.get_running_loop()

    def check() -> None:
        if client.blocked is not request:
            return  # timed out, unblocked or gone
        now = counts()
        if now[0] >= numlocal and now[1] >= numreplicas:
            server.blocking.unblock(client, now)
            return
        request.on_timeout = now
        loop.call_later(WAITAOF_POLL, check)

    loop.call_later(WAITAOF_POLL, check)


@command("SYNC", 1, "admin noscript no_async_loading no_multi", categories=_ADMIN_CATS, group="server", since="1.0.0")
def sync(ctx: Ctx, argv: list[bytes]):
    """SYNC

    The old full synchronisation: Pion's full-sync payload, then the stream (no +FULLRESYNC).
    """
    return _attach(ctx, b"?", -1, legacy=True)


@command("PSYNC", -3, "admin noscript no_async_loading no_multi", categories=_ADMIN_CATS, group="server", since="2.8.0")
def psync(ctx: Ctx, argv: list[bytes]):
    """PSYNC replicationid offset

    ``+CONTINUE`` and the stream from ``offset`` when the backlog still holds it, else
    ``+FULLRESYNC id offset`` and Pion's own full-sync payload (docs/replication.md).
    """
    return _attach(ctx, argv[1], parse_int(argv[2]), legacy=False)


def _attach(ctx: Ctx, replid: bytes, wanted: int, legacy: bool) -> Any:
    repl = _repl(ctx)
    client = ctx.client
    if repl is None or client.conn is None or ctx.server.parts.persistence is None:
        raise ReplyError("ERR this server cannot serve replicas: it runs without a data directory")
    repl.primary.attach(client, replid, wanted, repl.ports.pop(client.id, 0), legacy=legacy)
    client.reply_mode = "skip"  # the attach writes its own reply and then the stream
    return OK


@command("REPLCONF", -1, "admin noscript loading stale allow_busy", categories=_ADMIN_CATS, group="server", since="3.0.0")
def replconf(ctx: Ctx, argv: list[bytes]):
    """REPLCONF option value [option value ...]

    ``listening-port``, ``ip-address``, ``capa`` (the handshake), ``ACK offset [FACK offset]``
    (a replica's durable offset; no reply), ``GETACK`` (answered through the stream).
    """
    repl = _repl(ctx)
    if len(argv) % 2 == 0:
        raise ReplyError(errors.SYNTAX)
    option = argv[1].lower() if len(argv) > 1 else b""
    if option == b"ack":
        if repl is not None:
            repl.primary.acked(ctx.client, parse_int(argv[2]))
        ctx.client.reply_mode = "skip"
        return OK
    if option == b"pion-offset":  # logged by a replica with each record it applied
        if not ctx.server.loading:
            raise ReplyError("ERR REPLCONF PION-OFFSET is only read back from a replica's own log")
        if repl is not None and len(argv) >= 5:
            repl.restore(argv[2], argv[3], argv[4])
        return OK
    for i in range(1, len(argv), 2):
        name = argv[i].lower()
        if name == b"listening-port":
            port = parse_int(argv[i + 1])
            if repl is not None:
                repl.ports[ctx.client.id] = port
        elif name not in (b"ip-address", b"capa", b"getack", b"rdb-only", b"rdb-filter-only", b"rdb-channel"):
            raise ReplyError(f"ERR Unrecognized REPLCONF option: {argv[i].decode('utf-8', 'replace')}")
    return OK
