"""Generic key commands: DEL UNLINK EXISTS TYPE RENAME RENAMENX COPY MOVE TOUCH KEYS SCAN
RANDOMKEY. TTL commands live in ``expiry``, OBJECT/DUMP/RESTORE in ``objects``, SORT in
``sort``, whole-database commands in ``databases``.

Reads that Redis does with LOOKUP_NOTOUCH (EXISTS, TYPE, SCAN TYPE) use ``Database.peek`` so
OBJECT IDLETIME stays right; everything else goes through ``get`` (lazy expiry included).
"""

from __future__ import annotations

import copy
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.args import ArgCursor, parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.glob import glob_match
from pion.storage.keyspace import Database, type_name
from pion.storage.scan import parse_cursor

SAME_OBJECT = "ERR source and destination objects are the same"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def notify_in(ctx: Ctx, db_index: int, event: str, key: bytes) -> None:
    """A generic keyspace event in a database other than the client's (MOVE, COPY DB)."""
    if ctx.server.notify_flags:
        ctx.server.pubsub.notify_keyspace_event("g", event, key, ctx.client.dbs[db_index].id)  # tenant-aware


def parse_db(ctx: Ctx, raw: bytes) -> Database:
    """A DB index argument as MOVE/COPY read it: an int32, then a range check."""
    index = parse_int(raw)
    if not INT32_MIN <= index <= INT32_MAX:
        raise ReplyError(errors.NOT_INTEGER)
    if not 0 <= index < len(ctx.client.dbs):
        raise ReplyError(errors.DB_INDEX_RANGE)
    return ctx.client.dbs[index]


def duplicate(value: Any) -> Any:
    """An independent copy of a stored value (COPY). Strings are immutable; a container
    class may offer ``dup()``; otherwise a deep copy."""
    if value.__class__ is bytes:
        return value
    dup = getattr(value, "dup", None)
    return dup() if dup is not None else copy.deepcopy(value)


# -- deleting and testing ---------------------------------------------------------------


@command("DEL", -2, "write", keys=(1, -1, 1), categories="@keyspace @write @slow")
def del_(ctx: Ctx, argv: list[bytes]):
    """DEL key [key ...]"""
    return _delete_keys(ctx, argv)


@command("UNLINK", -2, "write fast", keys=(1, -1, 1), categories="@keyspace @write @fast", since="4.0.0")
def unlink(ctx: Ctx, argv: list[bytes]):
    """UNLINK key [key ...]

    Frees in the foreground: Python releases memory by reference counting anyway."""
    return _delete_keys(ctx, argv)


def _delete_keys(ctx: Ctx, argv: list[bytes]) -> int:
    db = ctx.db
    removed = 0
    for key in argv[1:]:
        if db.delete(key):
            removed += 1
            ctx.dirty()
            ctx.notify("g", "del", key)
    return removed


@command("EXISTS", -2, "readonly fast", keys=(1, -1, 1), categories="@keyspace @read @fast")
def exists(ctx: Ctx, argv: list[bytes]):
    """EXISTS key [key ...]

    Counts a key as often as it is named, as Redis does."""
    db = ctx.db
    return sum(1 for key in argv[1:] if db.peek(key) is not None)


@command("TOUCH", -2, "readonly fast", keys=(1, -1, 1), categories="@keyspace @read @fast", since="3.2.1")
def touch(ctx: Ctx, argv: list[bytes]):
    """TOUCH key [key ...]"""
    db = ctx.db
    return sum(1 for key in argv[1:] if db.get(key) is not None)


@command("TYPE", 2, "readonly fast", keys=(1, 1, 1), categories="@keyspace @read @fast")
def type_(ctx: Ctx, argv: list[bytes]):
    """TYPE key"""
    return Status(type_name(ctx.db.peek(argv[1])))


# -- renaming, copying, moving ------------------------------------------------------------


@command("RENAME", 3, "write", keys=(1, 2, 1), categories="@keyspace @write @slow")
def rename(ctx: Ctx, argv: list[bytes]):
    """RENAME key newkey"""
    return OK if _rename(ctx, argv[1], argv[2], nx=False) else 0


@command("RENAMENX", 3, "write fast", keys=(1, 2, 1), categories="@keyspace @write @fast")
def renamenx(ctx: Ctx, argv: list[bytes]):
    """RENAMENX key newkey"""
    return 1 if _rename(ctx, argv[1], argv[2], nx=True) else 0


def _rename(ctx: Ctx, src: bytes, dst: bytes, nx: bool) -> bool:
    """Move the value with its TTL and access data; the old ``dst`` is dropped."""
    db = ctx.db
    if db.get(src) is None:
        raise ReplyError(errors.NO_SUCH_KEY)
    if src == dst:
        return not nx
    if nx and db.peek(dst) is not None:
        return False
    db.put(dst, db.take(src))
    ctx.notify("g", "rename_from", src)
    ctx.notify("g", "rename_to", dst)
    ctx.dirty()
    return True


@command("COPY", -3, "write denyoom", keys=(1, 2, 1), categories="@keyspace @write @slow", since="6.2.0")
def copy_(ctx: Ctx, argv: list[bytes]):
    """COPY source destination [DB destination-db] [REPLACE]"""
    src_db, dst_db, replace = ctx.db, ctx.db, False
    args = ArgCursor(argv, 3)
    while not args.done():
        option = args.next_option()
        if option == b"REPLACE":
            replace = True
        elif option == b"DB" and args.remaining() >= 1:
            dst_db = parse_db(ctx, args.next())
        else:
            raise ReplyError(errors.SYNTAX)
    key, newkey = argv[1], argv[2]
    if src_db is dst_db and key == newkey:
        raise ReplyError(SAME_OBJECT)
    value = src_db.get(key)
    if value is None:
        return 0
    if dst_db.peek(newkey) is not None and not replace:
        return 0
    when = src_db.ttl_ms(key)
    dst_db.set(newkey, duplicate(value))
    if when is not None:
        dst_db.set_expire(newkey, when)
    notify_in(ctx, dst_db.index, "copy_to", newkey)
    ctx.dirty()
    return 1


@command("MOVE", 3, "write fast", keys=(1, 1, 1), categories="@keyspace @write @fast")
def move(ctx: Ctx, argv: list[bytes]):
    """MOVE key db"""
    src_db = ctx.db
    dst_db = parse_db(ctx, argv[2])
    if dst_db is src_db:
        raise ReplyError(SAME_OBJECT)
    key = argv[1]
    if src_db.get(key) is None or dst_db.peek(key) is not None:
        return 0
    dst_db.put(key, src_db.take(key))
    notify_in(ctx, src_db.index, "move_from", key)
    notify_in(ctx, dst_db.index, "move_to", key)
    ctx.dirty()
    return 1


# -- listing ------------------------------------------------------------------------------


@command("KEYS", 2, "readonly", categories="@keyspace @read @slow @dangerous")
def keys(ctx: Ctx, argv: list[bytes]):
    """KEYS pattern

    Expired keys are left out but not removed (Redis does the same)."""
    pattern = argv[1]
    live = ctx.db.keys()
    if pattern == b"*":
        return list(live)
    return [key for key in live if glob_match(pattern, key)]


@command("RANDOMKEY", 1, "readonly", categories="@keyspace @read @slow")
def randomkey(ctx: Ctx, argv: list[bytes]):
    """RANDOMKEY"""
    return ctx.db.random_key()


@command("SCAN", -2, "readonly", categories="@keyspace @read @slow", since="2.8.0")
def scan(ctx: Ctx, argv: list[bytes]):
    """SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]

    Walks ``Database.key_table()``: every key present for the whole iteration is returned
    at least once, whatever is added or removed between calls."""
    cursor = parse_cursor(argv[1])
    pattern, count, wanted = _scan_options(argv)
    db = ctx.db
    cursor, found = db.key_table().scan(cursor, count)
    if pattern is not None:
        found = [key for key in found if glob_match(pattern, key)]
    out = []
    for key in found:
        value = db.peek(key)  # also drops expired keys, as Redis's SCAN does
        if value is not None and (wanted is None or type_name(value) == wanted):
            out.append(key)
    return [str(cursor).encode(), out]


def _scan_options(argv: list[bytes]) -> tuple[bytes | None, int, str | None]:
    pattern: bytes | None = None
    count, wanted = 10, None
    args = ArgCursor(argv, 2)
    while not args.done():
        option = args.next_option()
        if args.done():
            raise ReplyError(errors.SYNTAX)
        if option == b"COUNT":
            count = args.next_int()
            if count < 1:
                raise ReplyError(errors.SYNTAX)
        elif option == b"MATCH":
            pattern = args.next()
            pattern = None if pattern == b"*" else pattern
        elif option == b"TYPE":
            wanted = args.next().decode("latin-1").lower()
        else:
            raise ReplyError(errors.SYNTAX)
    return pattern, count, wanted
