"""Set commands: SADD SREM SCARD SISMEMBER SMISMEMBER SMEMBERS SRANDMEMBER SPOP SMOVE
SINTER SINTERSTORE SINTERCARD SUNION SUNIONSTORE SDIFF SDIFFSTORE SSCAN.

Values are ``SetValue`` (pion.storage.set_value). Replies that Redis sends as a RESP3 set
(SMEMBERS, SINTER, SPOP with a count, ...) are Python sets; SRANDMEMBER with a count is an
array, as in Redis, because it may repeat members. SPOP is logged as the SREM of what it popped.
Also here: the SCAN-family cursor and option parsing that HSCAN shares.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.streamed import STREAM_MIN, sampled
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.deferred import can_defer
from pion.server.registry import command
from pion.storage.glob import glob_match
from pion.storage.scan import parse_cursor
from pion.storage.set_value import SetValue, set_limits

_SREM_BATCH = 1024
OUT_OF_RANGE_POSITIVE = "ERR value is out of range, must be positive"
COUNT_RANGE = "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"


# -- SCAN family helpers (shared with HSCAN) -------------------------------------------------


def parse_scan_options(argv: list[bytes], start: int, is_hash: bool) -> tuple[bytes | None, int, bool]:
    """MATCH / COUNT / NOVALUES after the cursor: (pattern or None, count, novalues)."""
    pattern, count, novalues = None, 10, False
    i = start
    while i < len(argv):
        option, more = argv[i].lower(), len(argv) - i
        if option == b"count" and more >= 2:
            count = parse_int(argv[i + 1])
            if count < 1:
                raise ReplyError(errors.SYNTAX)
            i += 2
        elif option == b"match" and more >= 2:
            pattern = None if argv[i + 1] == b"*" else argv[i + 1]
            i += 2
        elif option == b"novalues":
            if not is_hash:
                raise ReplyError("ERR NOVALUES option can only be used in HSCAN")
            novalues = True
            i += 1
        else:
            raise ReplyError(errors.SYNTAX)
    return pattern, count, novalues


def filter_matches(items: list[bytes], pattern: bytes | None) -> list[bytes]:
    return items if pattern is None else [item for item in items if glob_match(pattern, item)]


# -- helpers -----------------------------------------------------------------------------------


def _after_removal(ctx: Ctx, key: bytes, value: SetValue, event: str) -> None:
    """Notify a removal; delete the key if the set is now empty, else signal the change."""
    ctx.notify("s", event, key)
    if value.members:
        ctx.db.signal(key)
    else:
        ctx.db.delete(key)
        ctx.notify("g", "del", key)


def _sets(ctx: Ctx, keys: list[bytes]) -> list[SetValue | None]:
    """Every key's set (None when missing); WRONGTYPE if any key holds something else."""
    db = ctx.db
    return [db.get_typed(key, SetValue) for key in keys]


def _store(ctx: Ctx, dest: bytes, members: set[bytes], event: str) -> int:
    """Write a *STORE result: replaces the destination (and its TTL); empty deletes it."""
    db = ctx.db
    if members:
        db.set(dest, SetValue.from_members(members, set_limits(ctx.server.settings)))
        ctx.notify("s", event, dest)
        ctx.dirty()
    elif db.delete(dest):
        ctx.notify("g", "del", dest)
        ctx.dirty()
    return len(members)


# -- single-key commands -------------------------------------------------------------------------


@command("SADD", -3, "write denyoom fast", keys=(1, 1, 1), categories="@write @set @fast", group="set")
def sadd(ctx: Ctx, argv: list[bytes]):
    """SADD key member [member ...]"""
    db, key, items = ctx.db, argv[1], argv[2:]
    limits = set_limits(ctx.server.settings)
    value = db.get_typed(key, SetValue)
    if value is None:
        value = SetValue.create(items[0], len(items), limits)
        added = value.add_many(items, limits)
        db.set(key, value)
    else:
        value.reserve(len(items), limits)
        added = value.add_many(items, limits)
        if added:
            db.signal(key)
    if added:
        ctx.dirty(added)
        ctx.notify("s", "sadd", key)
    return added


@command("SREM", -3, "write fast", keys=(1, 1, 1), categories="@write @set @fast", group="set")
def srem(ctx: Ctx, argv: list[bytes]):
    """SREM key member [member ...]"""
    value = ctx.db.get_typed(argv[1], SetValue)
    if value is None:
        return 0
    removed = value.remove_many(argv[2:])
    if removed:
        ctx.dirty(removed)
        _after_removal(ctx, argv[1], value, "srem")
    return removed


@command("SCARD", 2, "readonly fast", keys=(1, 1, 1), categories="@read @set @fast", group="set")
def scard(ctx: Ctx, argv: list[bytes]):
    """SCARD key"""
    value = ctx.db.get_typed(argv[1], SetValue)
    return len(value.members) if value is not None else 0


@command("SISMEMBER", 3, "readonly fast", keys=(1, 1, 1), categories="@read @set @fast", group="set")
def sismember(ctx: Ctx, argv: list[bytes]):
    """SISMEMBER key member"""
    value = ctx.db.get_typed(argv[1], SetValue)
    return int(value is not None and argv[2] in value.members)


@command("SMISMEMBER", -3, "readonly fast", keys=(1, 1, 1), categories="@read @set @fast", group="set", since="6.2.0")
def smismember(ctx: Ctx, argv: list[bytes]):
    """SMISMEMBER key member [member ...]"""
    value = ctx.db.get_typed(argv[1], SetValue)
    members = value.members if value is not None else ()
    return [int(item in members) for item in argv[2:]]


@command("SMEMBERS", 2, "readonly", keys=(1, 1, 1), categories="@read @set @slow", group="set")
def smembers(ctx: Ctx, argv: list[bytes]):
    """SMEMBERS key"""
    value = ctx.db.get_typed(argv[1], SetValue)
    return set(value.members) if value is not None else set()


@command("SRANDMEMBER", -2, "readonly", keys=(1, 1, 1), categories="@read @set @slow", group="set")
def srandmember(ctx: Ctx, argv: list[bytes]):
    """SRANDMEMBER key [count]"""
    if len(argv) > 3:
        raise ReplyError(errors.SYNTAX)
    if len(argv) == 3:
        count = parse_int(argv[2])
        if count == -(2**63):
            raise ReplyError(COUNT_RANGE)
        value = ctx.db.get_typed(argv[1], SetValue)
        if value is None or count == 0:
            return []
        if count < 0:
            if -count >= STREAM_MIN and can_defer(ctx):  # a large reply: made in pieces, off the loop's back
                return sampled(list(value.members), -count)
            return value.random_repeats(-count)
        if count >= len(value.members):
            return list(value.members)
        return value.random_distinct(count)
    value = ctx.db.get_typed(argv[1], SetValue)
    return value.random_member() if value is not None else None


@command("SPOP", -2, "write fast", keys=(1, 1, 1), categories="@write @set @fast", group="set")
def spop(ctx: Ctx, argv: list[bytes]):
    """SPOP key [count]"""
    if len(argv) > 3:
        raise ReplyError(errors.SYNTAX)
    count = 1
    if len(argv) == 3:
        count = parse_int(argv[2], OUT_OF_RANGE_POSITIVE)
        if count < 0:
            raise ReplyError(OUT_OF_RANGE_POSITIVE)
    key = argv[1]
    value = ctx.db.get_typed(key, SetValue)
    if value is None or count == 0:
        return None if len(argv) == 2 else set()
    popped = value.pop_random(count)
    ctx.dirty(len(popped))
    ctx.rewrite(*([b"SREM", key, *popped[i : i + _SREM_BATCH]] for i in range(0, len(popped), _SREM_BATCH)))
    _after_removal(ctx, key, value, "spop")
    return popped[0] if len(argv) == 2 else set(popped)


@command("SMOVE", 4, "write fast", keys=(1, 2, 1), categories="@write @set @fast", group="set")
def smove(ctx: Ctx, argv: list[bytes]):
    """SMOVE source destination member"""
    db, source, dest, member = ctx.db, argv[1], argv[2], argv[3]
    src, dst = db.get(source), db.get(dest)
    if src is None:
        return 0
    if src.__class__ is not SetValue or (dst is not None and dst.__class__ is not SetValue):
        raise ReplyError(errors.WRONGTYPE)
    if src is dst:
        return int(member in src.members)
    if not src.remove_many((member,)):
        return 0
    _after_removal(ctx, source, src, "srem")
    limits = set_limits(ctx.server.settings)
    if dst is None:
        dst = SetValue.create(member, 1, limits)
        db.set(dest, dst)
    ctx.dirty()
    if dst.add_many((member,), limits):
        ctx.dirty()
        db.signal(dest)
        ctx.notify("s", "sadd", dest)
    return 1


# -- multi-key algebra -----------------------------------------------------------------------------


def _intersection(values: list[SetValue | None]) -> set[bytes]:
    if any(value is None for value in values):
        return set()
    ordered = sorted((value.members for value in values), key=len)  # type: ignore[union-attr]
    return ordered[0].intersection(*ordered[1:])


def _union(values: list[SetValue | None]) -> set[bytes]:
    return set().union(*(value.members for value in values if value is not None))


def _difference(values: list[SetValue | None]) -> set[bytes]:
    if values[0] is None:
        return set()
    return values[0].members.difference(*(value.members for value in values[1:] if value is not None))


@command("SINTER", -2, "readonly", keys=(1, -1, 1), categories="@read @set @slow", group="set")
def sinter(ctx: Ctx, argv: list[bytes]):
    """SINTER key [key ...]"""
    return _intersection(_sets(ctx, argv[1:]))


@command("SUNION", -2, "readonly", keys=(1, -1, 1), categories="@read @set @slow", group="set")
def sunion(ctx: Ctx, argv: list[bytes]):
    """SUNION key [key ...]"""
    return _union(_sets(ctx, argv[1:]))


@command("SDIFF", -2, "readonly", keys=(1, -1, 1), categories="@read @set @slow", group="set")
def sdiff(ctx: Ctx, argv: list[bytes]):
    """SDIFF key [key ...]"""
    return _difference(_sets(ctx, argv[1:]))


@command("SINTERSTORE", -3, "write denyoom", keys=(1, -1, 1), categories="@write @set @slow", group="set")
def sinterstore(ctx: Ctx, argv: list[bytes]):
    """SINTERSTORE destination key [key ...]"""
    return _store(ctx, argv[1], _intersection(_sets(ctx, argv[2:])), "sinterstore")


@command("SUNIONSTORE", -3, "write denyoom", keys=(1, -1, 1), categories="@write @set @slow", group="set")
def sunionstore(ctx: Ctx, argv: list[bytes]):
    """SUNIONSTORE destination key [key ...]"""
    return _store(ctx, argv[1], _union(_sets(ctx, argv[2:])), "sunionstore")


@command("SDIFFSTORE", -3, "write denyoom", keys=(1, -1, 1), categories="@write @set @slow", group="set")
def sdiffstore(ctx: Ctx, argv: list[bytes]):
    """SDIFFSTORE destination key [key ...]"""
    return _store(ctx, argv[1], _difference(_sets(ctx, argv[2:])), "sdiffstore")


def _numkeys_keys(argv: list[bytes]) -> list[int]:
    """Key positions of ``CMD numkeys key ...`` (for COMMAND GETKEYS and ACLs)."""
    try:
        numkeys = int(argv[1])
    except (ValueError, IndexError):
        return []
    return list(range(2, 2 + max(0, min(numkeys, len(argv) - 2))))


@command("SINTERCARD", -3, "readonly", categories="@read @set @slow", group="set", since="7.0.0",
         key_finder=_numkeys_keys)
def sintercard(ctx: Ctx, argv: list[bytes]):
    """SINTERCARD numkeys key [key ...] [LIMIT limit]"""
    numkeys = parse_int(argv[1], "ERR numkeys should be greater than 0")
    if numkeys < 1:
        raise ReplyError("ERR numkeys should be greater than 0")
    if numkeys > len(argv) - 2:
        raise ReplyError("ERR Number of keys can't be greater than number of args")
    limit, i = 0, 2 + numkeys
    while i < len(argv):
        if argv[i].lower() == b"limit" and i + 1 < len(argv):
            limit = parse_int(argv[i + 1], "ERR LIMIT can't be negative")
            if limit < 0:
                raise ReplyError("ERR LIMIT can't be negative")
            i += 2
        else:
            raise ReplyError(errors.SYNTAX)
    values = _sets(ctx, argv[2 : 2 + numkeys])
    if not limit or any(value is None for value in values):
        return len(_intersection(values))
    ordered = sorted((value.members for value in values), key=len)  # type: ignore[union-attr]
    found = 0
    for member in ordered[0]:
        if all(member in other for other in ordered[1:]):
            found += 1
            if found >= limit:
                break
    return found


@command("SSCAN", -3, "readonly", keys=(1, 1, 1), categories="@read @set @slow", group="set", since="2.8.0")
def sscan(ctx: Ctx, argv: list[bytes]):
    """SSCAN key cursor [MATCH pattern] [COUNT count]"""
    cursor = parse_cursor(argv[2])
    value = ctx.db.get_typed(argv[1], SetValue)
    if value is None:
        return [b"0", []]
    pattern, count, _ = parse_scan_options(argv, 3, is_hash=False)
    next_cursor, members = value.scan(cursor, count)
    return [str(next_cursor).encode(), filter_matches(members, pattern)]
