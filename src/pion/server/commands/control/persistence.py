"""Persistence commands: SAVE BGSAVE BGREWRITEAOF.

A Pion snapshot is also the base of its log (the log segments it covers are deleted), so
BGSAVE and BGREWRITEAOF do the same work; they keep Redis's replies and their own INFO flags.
LASTSAVE lives in ``server_admin`` and reads ``Persistence.lastsave``.
"""

from __future__ import annotations

from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.context import Ctx
from pion.server.registry import command

_CATS = "@admin @slow @dangerous"
NOT_ENABLED = "ERR persistence is not available on this server (no data directory)"


def _engine(ctx: Ctx) -> Any:
    engine = ctx.server.parts.persistence
    if engine is None:
        raise ReplyError(NOT_ENABLED)
    return engine


@command("SAVE", 1, "admin noscript no_async_loading no_multi", categories=_CATS, group="server")
def save(ctx: Ctx, argv: list[bytes]):
    """SAVE

    A blocking snapshot: the loop serves nobody until it is on disk (use BGSAVE instead).
    """
    engine = _engine(ctx)
    job = engine.job
    if job is not None and job.kind == "bgsave":
        raise ReplyError("ERR Background save already in progress")
    if job is not None:  # a rewrite in the background: it does the same work; finish it first
        raise ReplyError("ERR Background append only file rewriting in progress, retry SAVE when it is done")
    engine.save()
    return OK


@command("BGSAVE", -1, "admin noscript no_async_loading", categories=_CATS, group="server")
def bgsave(ctx: Ctx, argv: list[bytes]):
    """BGSAVE [SCHEDULE]

    Starts a snapshot that is written between other clients' commands; the loop keeps serving.
    """
    schedule = False
    if len(argv) > 1:
        if len(argv) > 2 or argv[1].lower() != b"schedule":
            raise ReplyError(errors.SYNTAX)
        schedule = True
    engine = _engine(ctx)
    job = engine.job
    if job is not None and job.kind == "bgsave":
        raise ReplyError("ERR Background save already in progress")
    if job is not None:
        if not schedule:
            raise ReplyError(
                "ERR Another child process is active (AOF?): can't BGSAVE right now. "
                "Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible."
            )
        engine.scheduled = engine.scheduled or "bgsave"
        return Status("Background saving scheduled")
    engine.start_background("bgsave")
    return Status("Background saving started")


@command("BGREWRITEAOF", 1, "admin noscript no_async_loading", categories=_CATS, group="server")
def bgrewriteaof(ctx: Ctx, argv: list[bytes]):
    """BGREWRITEAOF

    Compacts the log: a snapshot is written in the background and the log it covers is dropped.
    """
    engine = _engine(ctx)
    job = engine.job
    if job is not None and job.kind == "rewrite":
        raise ReplyError("ERR Background append only file rewriting already in progress")
    if job is not None:
        engine.scheduled = "rewrite"
        return Status("Background append only file rewriting scheduled")
    engine.start_background("rewrite")
    return Status("Background append only file rewriting started")
