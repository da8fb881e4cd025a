"""Redis 8.0's hash commands that read or write fields together with their TTLs: HGETDEL, HGETEX,
HSETEX (Redis's t_hash.c: the same argument checks, error texts, events and propagation).

Registered through ``hashes`` (which imports the handlers). Every command reads through
``hash_fields.load`` (lazy field expiry, logged as HDEL). What is logged never depends on the
clock: HGETDEL as HDEL of the fields it removed; HGETEX as HPEXPIREAT (absolute ms) or HPERSIST
of the fields it changed, or HDEL when the new time is already past; HSETEX with EX/PX/EXAT
rewritten to PXAT, or as HDEL when the fields were set with a time already past.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.commands.core.hash_fields import clock, load, log, parse_expire, schedule
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.hash_value import HashValue, hash_limits

_FIELDS_MISSING = "ERR Mandatory argument FIELDS is missing or not at the right position"
_NUMFIELDS_POSITIVE = "ERR Number of fields must be a positive integer"
_NUMFIELDS_MISMATCH = "ERR The `numfields` parameter must match the number of arguments"
_LONG_MAX = (1 << 63) - 1
_INT_MAX = (1 << 31) - 1
#: expiration option -> (in seconds, relative to now)
_EXPIRES = {b"EX": (True, True), b"PX": (False, True), b"EXAT": (True, False), b"PXAT": (False, False)}


def _counted_fields(argv: list[bytes], at: int) -> list[bytes]:
    """``FIELDS numfields field ...`` with FIELDS at ``at``, checked as HGETDEL and HGETEX do."""
    if at >= len(argv) or argv[at].upper() != b"FIELDS":
        raise ReplyError(_FIELDS_MISSING)
    count = parse_int(argv[at + 1], _NUMFIELDS_POSITIVE) if at + 1 < len(argv) else 0
    if not 1 <= count <= _LONG_MAX:
        raise ReplyError(_NUMFIELDS_POSITIVE)
    if count != len(argv) - at - 2:
        raise ReplyError(_NUMFIELDS_MISMATCH)
    return argv[at + 2 :]


def _finish(ctx: Ctx, key: bytes, value: HashValue, created: bool = False) -> None:
    """The hash was changed: delete it when emptied (``del`` event), else store or signal it."""
    if not value.fields:
        if created:
            ctx.db.signal(key)  # made and emptied by the same command: a reader's cache still goes
        else:
            ctx.db.delete(key)
        ctx.notify("g", "del", key)
    elif created:
        ctx.db.set(key, value)
    else:
        ctx.db.signal(key)


@command("HGETDEL", -5, "write fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash",
         since="8.0.0")
def hgetdel(ctx: Ctx, argv: list[bytes]):
    """HGETDEL key FIELDS numfields field [field ...]

    The fields' values (nil for a missing one), each field then removed; the key goes with its
    last field. Logged as HDEL of the removed fields.
    """
    key = argv[1]
    value = load(ctx, key)
    fields = _counted_fields(argv, 2)
    if value is None:
        return [None] * len(fields)
    replies, deleted = [], []
    for field in fields:
        got = value.fields.get(field)
        replies.append(got)
        if got is not None:
            value.remove(field)
            deleted.append(field)
    if deleted:
        ctx.dirty(len(deleted))
        ctx.notify("h", "hdel", key)
        log(ctx, [b"HDEL", key, *deleted])
        _finish(ctx, key, value)
    return replies


@command("HGETEX", -5, "write fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash",
         since="8.0.0")
def hgetex(ctx: Ctx, argv: list[bytes]):
    """HGETEX key [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | PERSIST] FIELDS numfields field [field ...]

    The fields' values, as HMGET; with an option, each existing field also gets the new TTL (a
    time already past removes it) or, with PERSIST, loses its TTL.
    """
    key = argv[1]
    value = load(ctx, key)
    option = argv[2].upper()
    when, at = None, 2
    if option in _EXPIRES:
        seconds, relative = _EXPIRES[option]
        when, at = parse_expire(argv[3], "hgetex", seconds, relative), 4
    elif option == b"PERSIST":
        at = 3
    fields = _counted_fields(argv, at)
    if value is None:
        return [None] * len(fields)
    get = value.fields.get
    replies = [get(field) for field in fields]
    if at == 2:
        return replies
    present = [field for field, got in zip(fields, replies, strict=True) if got is not None]
    if when is None:  # PERSIST: the fields that had a TTL
        changed = [field for field in dict.fromkeys(present) if value.clear_ttl(field)]
        if changed:
            ctx.dirty(len(changed))
            ctx.db.signal(key)
            ctx.notify("h", "hpersist", key)
            log(ctx, [b"HPERSIST", key, b"FIELDS", str(len(changed)).encode(), *changed])
        return replies
    present = list(dict.fromkeys(present))
    if not present:
        return replies
    value.allow_ttls()
    ctx.dirty(len(present))
    if when <= clock(ctx):
        for field in present:
            value.remove(field)
        log(ctx, [b"HDEL", key, *present])
        ctx.notify("h", "hdel", key)
        _finish(ctx, key, value)
        return replies
    for field in present:
        value.set_ttl(field, when)
    if value.next_expire < value.scheduled:
        schedule(ctx, key, value)
    log(ctx, [b"HPEXPIREAT", key, str(when).encode(), b"FIELDS", str(len(present)).encode(), *present])
    ctx.db.signal(key)
    ctx.notify("h", "hexpire", key)
    return replies


def _hsetex_args(argv: list[bytes]) -> tuple[bytes | None, bytes | None, int | None, int, int]:
    """Redis's hsetexParseArgs: (FNX/FXX, expiration option, absolute ms, its position, first
    field's position), with its error texts, in its order (parsed before the key is read)."""
    condition = expiry = when = None
    when_at = -1
    i, argc = 2, len(argv)
    while i < argc:
        word = argv[i].upper()
        if word == b"FIELDS":
            if i >= argc - 3:
                raise ReplyError(errors.wrong_arity("hsetex"))
            count = parse_int(argv[i + 1], "ERR invalid number of fields")
            if not 1 <= count <= _INT_MAX:
                raise ReplyError("ERR invalid number of fields")
            remaining = argc - i - 2
            if remaining % 2 or count != remaining // 2:
                raise ReplyError(errors.wrong_arity("hsetex"))
            return condition, expiry, when, when_at, i + 2
        if word in _EXPIRES or word == b"KEEPTTL":
            if expiry is not None:
                raise ReplyError("ERR Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified")
            expiry = word
            if word != b"KEEPTTL":
                if i >= argc - 1:
                    raise ReplyError("ERR missing expire time")
                i += 1
                when, when_at = parse_expire(argv[i], "hsetex", *_EXPIRES[word]), i
        elif word in (b"FXX", b"FNX"):
            if condition is not None:
                raise ReplyError("ERR Only one of FXX or FNX arguments can be specified")
            condition = word
        else:
            raise ReplyError(f"ERR unknown argument: {argv[i].decode('utf-8', 'replace')}")
        i += 1
    raise ReplyError(_FIELDS_MISSING)


@command("HSETEX", -6, "write denyoom fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash",
         since="8.0.0")
def hsetex(ctx: Ctx, argv: list[bytes]):
    """HSETEX key [FNX | FXX] [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL] FIELDS numfields field value [field value ...]

    Sets the fields (1), or nothing when FNX finds one of them or FXX misses one (0). Without an
    expiration option a set field loses its TTL, with KEEPTTL it keeps it, with EX ... PXAT every
    field gets that TTL (a time already past removes them).
    """
    condition, expiry, when, when_at, first = _hsetex_args(argv)
    key = argv[1]
    value = load(ctx, key)
    pairs = argv[first:]
    names = pairs[::2]
    if condition is not None:
        have = value.fields if value is not None else {}
        found = sum(1 for field in names if field in have)
        if (condition == b"FXX" and found != len(names)) or (condition == b"FNX" and found):
            return 0
    created = value is None
    if value is None:
        value = HashValue()
    limits = hash_limits(ctx.server.settings)
    value.prepare(pairs, limits)
    for i in range(0, len(pairs), 2):
        value.put(pairs[i], pairs[i + 1], limits, keep_ttl=expiry is not None)
    ctx.dirty(len(names))
    ctx.notify("h", "hset", key)
    if when is None:
        log(ctx, argv)
        _finish(ctx, key, value, created)
        return 1
    value.allow_ttls()
    unique = list(dict.fromkeys(names))
    if when <= clock(ctx):
        for field in unique:
            value.remove(field)
        log(ctx, [b"HDEL", key, *unique])
        ctx.notify("h", "hdel", key)
        _finish(ctx, key, value, created)
        return 1
    for field in unique:
        value.set_ttl(field, when)
    _finish(ctx, key, value, created)
    if value.next_expire < value.scheduled:
        schedule(ctx, key, value)
    logged = list(argv)
    logged[when_at - 1], logged[when_at] = b"PXAT", str(when).encode()
    log(ctx, logged)
    ctx.notify("h", "hexpire", key)
    return 1
