"""Whole-database commands: DBSIZE FLUSHDB FLUSHALL SWAPDB.

They replace a database's contents in one step, so besides ``Database.flush`` /
``swap_contents`` (which signal WATCHed keys) they signal the keys clients are blocked on,
as Redis rescans its blocking keys after a flush or a swap.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.keyspace import Database

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _signal_blocked(ctx: Ctx, db: Database) -> None:
    """Wake clients blocked on keys of ``db`` (XREADGROUP must see its stream vanish)."""
    for db_id, key in list(ctx.server.blocking.waiting):
        if db_id == db.id:
            db.signal(key)


def _check_flush_args(argv: list[bytes]) -> None:
    """FLUSHDB/FLUSHALL [ASYNC | SYNC]: both free at once here (Python has no lazy free)."""
    if len(argv) > 2 or (len(argv) == 2 and argv[1].upper() not in (b"ASYNC", b"SYNC")):
        raise ReplyError(errors.SYNTAX)


@command("DBSIZE", 1, "readonly fast", categories="@keyspace @read @fast", group="server")
def dbsize(ctx: Ctx, argv: list[bytes]):
    """DBSIZE

    Counts keys whose TTL passed but that were not removed yet, as Redis does."""
    return len(ctx.db.data)


@command("FLUSHDB", -1, "write", categories="@keyspace @write @slow @dangerous", group="server")
def flushdb(ctx: Ctx, argv: list[bytes]):
    """FLUSHDB [ASYNC | SYNC]"""
    _check_flush_args(argv)
    db = ctx.db
    removed = len(db.data)
    db.flush()
    _signal_blocked(ctx, db)
    ctx.server.tracking.flushed(ctx.client)
    ctx.dirty(removed)
    ctx.rewrite(list(argv))  # logged even when the database was already empty, as Redis
    return OK


@command("FLUSHALL", -1, "write", categories="@keyspace @write @slow @dangerous", group="server")
def flushall(ctx: Ctx, argv: list[bytes]):
    """FLUSHALL [ASYNC | SYNC]"""
    _check_flush_args(argv)
    removed = 0
    for db in ctx.client.dbs:
        removed += len(db.data)
        db.flush()
        _signal_blocked(ctx, db)
    ctx.server.tracking.flushed(ctx.client)
    ctx.dirty(removed + 1)
    ctx.rewrite(list(argv))
    return OK


def _db_index(ctx: Ctx, raw: bytes, which: str) -> int:
    try:
        index = parse_int(raw)
    except ReplyError:
        raise ReplyError(f"ERR invalid {which} DB index") from None
    if not INT32_MIN <= index <= INT32_MAX:
        raise ReplyError(f"ERR invalid {which} DB index")
    return index


@command("SWAPDB", 3, "write fast", categories="@keyspace @write @fast @dangerous", group="server", since="4.0.0")
def swapdb(ctx: Ctx, argv: list[bytes]):
    """SWAPDB index1 index2

    Clients stay on their database index and see the other contents at once."""
    first = _db_index(ctx, argv[1], "first")
    second = _db_index(ctx, argv[2], "second")
    dbs = ctx.client.dbs
    if not (0 <= first < len(dbs) and 0 <= second < len(dbs)):
        raise ReplyError(errors.DB_INDEX_RANGE)
    if first != second:
        dbs[first].swap_contents(dbs[second])
        _signal_blocked(ctx, dbs[first])
        _signal_blocked(ctx, dbs[second])
    ctx.dirty()
    return OK
