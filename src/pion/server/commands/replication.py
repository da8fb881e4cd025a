"""Replication's client-facing surface on a single node: ROLE, REPLICAOF/SLAVEOF, WAIT, WAITAOF,
and SYNC/PSYNC/REPLCONF refused with the reason.

Pion is a master that has no replicas and cannot serve any, so every answer here is what Redis
gives in that state: ROLE is ``master`` at offset 0 (Redis creates its backlog, and starts
counting, only when a first replica attaches), WAIT counts 0 replicas and blocks until its
timeout when asked for more, and WAITAOF reports the local fsync of the caller's last write (the
log's group commit, ``pion.server.wal_journal``). SYNC, PSYNC and REPLCONF, which only replicas
and ``redis-cli --rdb`` send, answer an error saying why instead of an unknown-command error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.args import parse_int
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.context import Ctx
from pion.server.registry import command

_ADMIN_CATS = "@admin @slow @dangerous"
NO_REPLICATION = "is not supported by Pion: it is a single node without replication, so it cannot serve replicas"
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


@command("ROLE", 1, "noscript loading stale fast", categories="@admin @fast @dangerous", group="server", since="2.8.12")
def role(ctx: Ctx, argv: list[bytes]):
    """ROLE

    A master at replication offset 0 with no replicas, as INFO replication says.
    """
    return [b"master", 0, []]


@command("REPLICAOF", 3, "admin noscript stale no_async_loading", categories=_ADMIN_CATS, group="server", since="5.0.0")
def replicaof(ctx: Ctx, argv: list[bytes]):
    """REPLICAOF host port | NO ONE

    NO ONE is a no-op (Pion is already a master); following a master is refused with the reason.
    """
    if argv[1].upper() == b"NO" and argv[2].upper() == b"ONE":
        return OK
    raise ReplyError(f"ERR {argv[0].decode(errors='replace').upper()} is not supported by Pion: it has no replication")


@command("SLAVEOF", 3, "admin noscript stale no_async_loading", categories=_ADMIN_CATS, group="server", since="1.0.0")
def slaveof(ctx: Ctx, argv: list[bytes]):
    """SLAVEOF host port | NO ONE

    The old name of REPLICAOF.
    """
    return replicaof(ctx, argv)


@command("WAIT", 3, "noscript", categories="@slow @connection", group="generic", since="3.0.0")
def wait(ctx: Ctx, argv: list[bytes]):
    """WAIT numreplicas timeout

    0 replicas acknowledged: at once when that is enough (or inside MULTI), else when the timeout
    (milliseconds, 0 = forever) expires, as Redis with no replica attached.
    """
    wanted = parse_int(argv[1])
    ms = _timeout_ms(argv[2])
    if wanted <= 0 or not ctx.can_block:
        return 0
    return BlockRequest(keys=[], timeout=ms / 1000.0, retry=_never, on_timeout=0)


@command("WAITAOF", 4, "noscript", categories="@slow @connection", group="generic", since="7.2.0",
         summary="Blocks until all of the preceding write commands sent by the connection are written to the "
                 "append-only file of the primary and/or replicas.")
def waitaof(ctx: Ctx, argv: list[bytes]):
    """WAITAOF numlocal numreplicas timeout

    ``[local, 0]``: local is 1 once this connection's last write is fsynced to the log. With
    ``appendfsync always`` that is true before the write was answered; with ``everysec`` it waits
    up to a second; with ``no`` Pion never fsyncs by itself, so it waits for the timeout.
    """
    numlocal = parse_int(argv[1])
    if not 0 <= numlocal <= 1:
        raise ReplyError("ERR value is out of range, value must between 0 and 1")
    numreplicas = parse_int(argv[2])
    if numreplicas < 0:
        raise ReplyError("ERR value is out of range, must be positive")
    ms = _timeout_ms(argv[3])
    server = ctx.server
    if numlocal and not server.settings.appendonly:
        raise ReplyError("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
    conn = ctx.client.conn
    target = conn.pending_seq if conn is not None else 0
    synced = _synced(server, target)
    if (synced >= numlocal and numreplicas == 0) or not ctx.can_block:
        return [synced, 0]
    request = BlockRequest(keys=[], timeout=ms / 1000.0, retry=_never, on_timeout=[synced, 0])
    if not synced:
        _poll_fsync(server, ctx.client, request, target, finish=numreplicas == 0)
    return request


def _synced(server: Any, seq: int) -> int:
    """1 when the log record ``seq`` is on disk (fsynced), else 0."""
    journal = server.journal
    return int(getattr(journal, "synced_seq", journal.durable_seq) >= seq) if server.settings.appendonly else 0


def _poll_fsync(server: Any, client: Any, request: BlockRequest, seq: int, finish: bool) -> None:
    """Watch for the fsync that covers ``seq``: then answer ``[1, 0]`` (``finish``: nothing else
    is awaited) or make it what the timeout answers (replicas were asked for: none will come)."""
    loop = asyncio.get_running_loop()

    def check() -> None:
        if client.blocked is not request:
            return  # timed out, unblocked or gone
        if not _synced(server, seq):
            loop.call_later(WAITAOF_POLL, check)
        elif finish:
            server.blocking.unblock(client, [1, 0])
        else:
            request.on_timeout = [1, 0]

    loop.call_later(WAITAOF_POLL, check)


def _refuse(argv: list[bytes]) -> ReplyError:
    return ReplyError(f"ERR {argv[0].decode('utf-8', 'replace').upper()} {NO_REPLICATION}")


@command("SYNC", 1, "admin noscript no_async_loading no_multi", categories=_ADMIN_CATS, group="server", since="1.0.0")
def sync(ctx: Ctx, argv: list[bytes]):
    """SYNC (refused: Pion has no replication)"""
    raise _refuse(argv)


@command("PSYNC", -3, "admin noscript no_async_loading no_multi", categories=_ADMIN_CATS, group="server", since="2.8.0")
def psync(ctx: Ctx, argv: list[bytes]):
    """PSYNC replicationid offset (refused: Pion has no replication)"""
    raise _refuse(argv)


@command("REPLCONF", -1, "admin noscript loading stale allow_busy", categories=_ADMIN_CATS, group="server", since="3.0.0")
def replconf(ctx: Ctx, argv: list[bytes]):
    """REPLCONF option value [option value ...] (refused: Pion has no replication)"""
    raise _refuse(argv)
