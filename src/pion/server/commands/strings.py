"""String commands: GET, the SET family (SET SETNX SETEX PSETEX GETSET MSET MSETNX MSETEX), GETDEL,
GETEX, MGET, APPEND and STRLEN. Counters live in ``string_counters``, ranges and LCS in
``string_ranges``.

Strings are stored as plain ``bytes``. A write whose arguments are relative or not
deterministic (a TTL in seconds from now, ``SET ... GET``, ``GETDEL``) logs its deterministic
effect through ``ctx.rewrite`` so replaying the log never depends on the clock.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.args import INT64_MAX, parse_int
from pion.server.commands import string_compare
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.keyspace import now_ms

# Option flags of SET and GETEX, as Redis's OBJ_* flags (IFEQ ... IFDNE: Redis 8.4's compare-and-set).
NX, XX, EX, PX, KEEPTTL, GET, EXAT, PXAT, PERSIST, IFEQ, IFNE, IFDEQ, IFDNE = (1 << i for i in range(13))
_TTL = EX | PX | EXAT | PXAT
_TTL_OPTIONS = {b"EX": EX, b"PX": PX, b"EXAT": EXAT, b"PXAT": PXAT}
_COMPARE = IFEQ | IFNE | IFDEQ | IFDNE
_COMPARE_OPTIONS = {b"IFEQ": IFEQ, b"IFNE": IFNE, b"IFDEQ": IFDEQ, b"IFDNE": IFDNE}


def string_too_long(ctx: Ctx, size: int) -> None:
    """Refuse a string that would grow past ``proto-max-bulk-len``, as Redis's checkStringLength."""
    if size > ctx.server.settings.proto_max_bulk_len:
        raise ReplyError("ERR string exceeds maximum allowed size (proto-max-bulk-len)")


def parse_extended(argv: list[bytes], for_set: bool, start: int | None = None,
                   multi: bool = False) -> tuple[int, bytes | None, bytes | None]:
    """SET's, GETEX's and MSETEX's options, accepted and refused in exactly Redis's combinations.

    A repeated option is allowed (``GET GET``, ``EX 1 EX 2``: the last one wins); conflicting
    ones (``NX XX``, ``EX .. PX ..``, ``KEEPTTL EX ..``, NX/XX with one of Redis 8.4's IFEQ IFNE
    IFDEQ IFDNE or two of those) and an option without its value are a syntax error. MSETEX
    (``multi``, options from ``start``) takes NX, XX, KEEPTTL and the TTLs but not GET or the
    comparisons, as Redis 8.4's shared parser allows per command. Returns the flags, the raw
    TTL argument and the value (or digest) a comparison option names.
    """
    flags, expire, match = 0, None, None
    keyed = for_set or multi
    j, argc = (start if start is not None else 3 if for_set else 2), len(argv)
    while j < argc:
        opt = argv[j].upper()
        ttl = _TTL_OPTIONS.get(opt)
        compare = _COMPARE_OPTIONS.get(opt) if for_set else None
        if keyed and opt == b"NX" and not flags & (XX | _COMPARE):
            flags |= NX
        elif keyed and opt == b"XX" and not flags & (NX | _COMPARE):
            flags |= XX
        elif compare and j + 1 < argc and not flags & (NX | XX | (_COMPARE & ~compare)):
            flags |= compare
            match = argv[j + 1]
            j += 1
        elif for_set and opt == b"GET":
            flags |= GET
        elif keyed and opt == b"KEEPTTL" and not flags & (_TTL | PERSIST):
            flags |= KEEPTTL
        elif not keyed and opt == b"PERSIST" and not flags & (_TTL | KEEPTTL):
            flags |= PERSIST
        elif ttl and j + 1 < argc and not flags & (KEEPTTL | PERSIST | (_TTL & ~ttl)):
            flags |= ttl
            expire = argv[j + 1]
            j += 1
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1
    return flags, expire, match


def flags_name(flags: int) -> bytes:
    """The comparison option among ``flags`` (IFEQ, IFNE, IFDEQ or IFDNE)."""
    return next(name for name, bit in _COMPARE_OPTIONS.items() if flags & bit)


def expire_at_ms(raw: bytes, flags: int, name: str) -> int:
    """The absolute expiry time in ms for a TTL argument; refuses <= 0 and overflow like Redis."""
    value = parse_int(raw)
    seconds = flags & (EX | EXAT)
    if value <= 0 or (seconds and value > INT64_MAX // 1000):
        raise ReplyError(errors.INVALID_EXPIRE.format(name))
    if seconds:
        value *= 1000
    if flags & (EX | PX):
        value += now_ms()
    if value > INT64_MAX:
        raise ReplyError(errors.INVALID_EXPIRE.format(name))
    return value


def set_generic(ctx: Ctx, argv: list[bytes], flags: int, key: bytes, value: bytes,
                expire: bytes | None, ok_reply, abort_reply, match: bytes | None = None):
    """Redis's setGenericCommand: SET, SETNX, SETEX and PSETEX all end up here.

    Checks run in Redis's order: the TTL value, then GET's type check, then NX/XX (and IFEQ /
    IFDEQ on a missing key), then the comparison with the current string (WRONGTYPE for another
    type). A TTL is logged as an absolute PXAT; an absolute time already past deletes the key
    (logged as DEL); a SET whose comparison held is logged without it.
    """
    db = ctx.db
    when = expire_at_ms(expire, flags, argv[0].decode("latin-1").lower()) if expire is not None else None
    old = db.get_typed(key, bytes) if flags & GET else None
    found = db.get(key) is not None
    if (flags & NX and found) or (flags & (XX | IFEQ | IFDEQ) and not found) or (
            flags & _COMPARE and found and not string_compare.holds(flags_name(flags), db.get_typed(key, bytes), match)):
        ctx.no_propagate()
        return old if flags & GET else abort_reply
    if flags & _COMPARE and when is None:
        ctx.rewrite([b"SET", key, value, b"KEEPTTL"] if flags & KEEPTTL else [b"SET", key, value])
    if when is not None and when <= now_ms() and not ctx.server.loading:
        # while replaying the log nothing expires: a later PERSIST in the log may keep the key
        _delete_expired(ctx, key, found)
    else:
        db.set(key, value, keep_ttl=bool(flags & KEEPTTL))
        ctx.dirty()
        ctx.notify("$", "set", key)
        if when is not None:
            db.set_expire(key, when)
            ctx.rewrite([b"SET", key, value, b"PXAT", b"%d" % when])
            ctx.notify("g", "expire", key)
        elif flags & GET and not flags & _COMPARE:
            ctx.rewrite([arg for i, arg in enumerate(argv) if i < 3 or arg.upper() != b"GET"])
    return old if flags & GET else ok_reply


def _delete_expired(ctx: Ctx, key: bytes, found: bool) -> None:
    """A SET whose absolute expiry has already passed: the key is gone at once (logged as DEL),
    rather than stored and left for lazy expiry as Redis 7.0 does; a missing key stays missing."""
    if not found:
        ctx.no_propagate()
        return
    ctx.db.delete(key)
    ctx.dirty()
    ctx.rewrite([b"DEL", key])
    ctx.notify("g", "del", key)


@command("GET", 2, "readonly fast", keys=(1, 1, 1), categories="@read @string @fast", group="string")
def get(ctx: Ctx, argv: list[bytes]):
    """GET key"""
    return ctx.db.get_typed(argv[1], bytes)


@command("SET", -3, "write denyoom", keys=(1, 1, 1), categories="@write @string @slow", group="string")
def set_(ctx: Ctx, argv: list[bytes]):
    """SET key value [NX | XX | IFEQ ifeq-value | IFNE ifne-value | IFDEQ ifdeq-digest | IFDNE ifdne-digest] [GET] [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]

    ``NX GET`` is allowed (Redis 7.0): it answers the old value and sets only if there was none.
    """
    if len(argv) == 3:  # the hot path: no options to parse
        ctx.db.set(argv[1], argv[2])
        ctx.dirty()
        ctx.notify("$", "set", argv[1])
        return OK
    flags, expire, match = parse_extended(argv, for_set=True)
    return set_generic(ctx, argv, flags, argv[1], argv[2], expire, OK, None, match)


@command("SETNX", 3, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast", group="string")
def setnx(ctx: Ctx, argv: list[bytes]):
    """SETNX key value"""
    return set_generic(ctx, argv, NX, argv[1], argv[2], None, 1, 0)


@command("SETEX", 4, "write denyoom", keys=(1, 1, 1), categories="@write @string @slow", group="string",
         since="2.0.0")
def setex(ctx: Ctx, argv: list[bytes]):
    """SETEX key seconds value"""
    return set_generic(ctx, argv, EX, argv[1], argv[3], argv[2], OK, None)


@command("PSETEX", 4, "write denyoom", keys=(1, 1, 1), categories="@write @string @slow", group="string",
         since="2.6.0")
def psetex(ctx: Ctx, argv: list[bytes]):
    """PSETEX key milliseconds value"""
    return set_generic(ctx, argv, PX, argv[1], argv[3], argv[2], OK, None)


@command("GETSET", 3, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast", group="string")
def getset(ctx: Ctx, argv: list[bytes]):
    """GETSET key value

    Logged as a plain SET: the old value is only the reply.
    """
    key = argv[1]
    old = ctx.db.get_typed(key, bytes)
    ctx.db.set(key, argv[2])
    ctx.dirty()
    ctx.notify("$", "set", key)
    ctx.rewrite([b"SET", key, argv[2]])
    return old


@command("GETDEL", 2, "write fast", keys=(1, 1, 1), categories="@write @string @fast", group="string",
         since="6.2.0")
def getdel(ctx: Ctx, argv: list[bytes]):
    """GETDEL key

    Logged as DEL; a missing key changes nothing and logs nothing.
    """
    key = argv[1]
    value = ctx.db.get_typed(key, bytes)
    if value is None:
        ctx.no_propagate()
        return None
    ctx.db.delete(key)
    ctx.dirty()
    ctx.notify("g", "del", key)
    ctx.rewrite([b"DEL", key])
    return value


@command("GETEX", -2, "write fast", keys=(1, 1, 1), categories="@write @string @fast", group="string",
         since="6.2.0")
def getex(ctx: Ctx, argv: list[bytes]):
    """GETEX key [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | PERSIST]

    Never logged as sent: a TTL becomes PEXPIREAT, a past EXAT/PXAT a DEL, PERSIST a PERSIST.
    """
    flags, expire, _ = parse_extended(argv, for_set=False)
    key = argv[1]
    value = ctx.db.get_typed(key, bytes)
    if value is None:
        ctx.no_propagate()
        return None
    when = expire_at_ms(expire, flags, "getex") if expire is not None else None
    ctx.no_propagate()
    if when is not None and flags & (EXAT | PXAT) and when <= now_ms():
        ctx.db.delete(key)
        ctx.rewrite([b"DEL", key])
        ctx.notify("g", "del", key)
        ctx.dirty()
    elif when is not None:
        ctx.db.set_expire(key, when)
        ctx.rewrite([b"PEXPIREAT", key, b"%d" % when])
        ctx.notify("g", "expire", key)
        ctx.dirty()
    elif flags & PERSIST and ctx.db.persist(key):
        ctx.rewrite([b"PERSIST", key])
        ctx.notify("g", "persist", key)
        ctx.dirty()
    return value


@command("MGET", -2, "readonly fast", keys=(1, -1, 1), categories="@read @string @fast", group="string")
def mget(ctx: Ctx, argv: list[bytes]):
    """MGET key [key ...]

    A key holding another type answers nil, not WRONGTYPE.
    """
    get_value = ctx.db.get
    out = []
    for key in argv[1:]:
        value = get_value(key)
        out.append(value if value.__class__ is bytes else None)
    return out


@command("MSET", -3, "write denyoom", keys=(1, -1, 2), categories="@write @string @slow", group="string",
         since="1.0.1")
def mset(ctx: Ctx, argv: list[bytes]):
    """MSET key value [key value ...]"""
    return _mset(ctx, argv, nx=False)


@command("MSETNX", -3, "write denyoom", keys=(1, -1, 2), categories="@write @string @slow", group="string",
         since="1.0.1")
def msetnx(ctx: Ctx, argv: list[bytes]):
    """MSETNX key value [key value ...]

    Sets all of them or, if any key exists, none (answers 0).
    """
    return _mset(ctx, argv, nx=True)


def _mset(ctx: Ctx, argv: list[bytes], nx: bool):
    if len(argv) % 2 == 0:
        raise ReplyError(errors.wrong_arity(argv[0].decode("latin-1").lower()))
    db = ctx.db
    if nx and any(db.get(argv[j]) is not None for j in range(1, len(argv), 2)):
        ctx.no_propagate()
        return 0
    for j in range(1, len(argv), 2):
        db.set(argv[j], argv[j + 1])
        ctx.notify("$", "set", argv[j])
    ctx.dirty(len(argv) // 2)
    return 1 if nx else OK


def msetex_keys(argv: list[bytes]) -> list[int]:
    """Key positions of MSETEX: ``numkeys`` pairs from argv[2], every second one a key."""
    try:
        numkeys = parse_int(argv[1])
    except (ReplyError, IndexError):
        return []
    if not 1 <= numkeys <= _INT_MAX:
        return []
    return list(range(2, min(2 + 2 * numkeys, len(argv)), 2))


_INT_MAX = 2**31 - 1


@command("MSETEX", -4, "write denyoom movablekeys", categories="@write @string @slow", group="string",
         since="8.4.0", key_finder=msetex_keys)
def msetex(ctx: Ctx, argv: list[bytes]):
    """MSETEX numkeys key value [key value ...] [NX | XX] [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]

    Redis 8.4: all the pairs or none (NX: none of the keys exists; XX: all do), with one shared
    TTL; answers 1 when set, 0 when NX/XX refused. Checks in Redis's order: ``numkeys`` (1 to
    INT_MAX, else ``invalid numkeys value``), the pairs present (``wrong number of key-value
    pairs``), the options after them, the TTL's value, then NX/XX. Each key gets an ``expire``
    event then a ``set`` event (Redis 8.4's order); a TTL already past is stored and left to
    expiry, as Redis 8.4 does. Logged without NX/XX and with the TTL as an absolute PXAT, so
    replaying never depends on the clock or on keys that expired meanwhile.
    """
    try:
        numkeys = parse_int(argv[1])
    except ReplyError:
        raise ReplyError("ERR invalid numkeys value") from None
    if not 1 <= numkeys <= _INT_MAX:
        raise ReplyError("ERR invalid numkeys value")
    end = 2 + 2 * numkeys
    if end > len(argv):
        raise ReplyError("ERR wrong number of key-value pairs")
    flags, expire, _ = parse_extended(argv, for_set=False, start=end, multi=True)
    when = expire_at_ms(expire, flags, "msetex") if expire is not None else None
    db = ctx.db
    keys = argv[2:end:2]
    if (flags & NX and any(db.get(key) is not None for key in keys)) or (
            flags & XX and any(db.get(key) is None for key in keys)):
        ctx.no_propagate()
        return 0
    keep = bool(flags & KEEPTTL)
    for j in range(2, end, 2):
        key = argv[j]
        db.set(key, argv[j + 1], keep_ttl=keep)
        if when is not None:
            db.set_expire(key, when)
            ctx.notify("g", "expire", key)
        ctx.notify("$", "set", key)
    ctx.dirty(numkeys)
    tail = [b"KEEPTTL"] if keep else [b"PXAT", b"%d" % when] if when is not None else []
    ctx.rewrite([b"MSETEX", argv[1], *argv[2:end], *tail])
    return 1


@command("APPEND", 3, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast", group="string",
         since="2.0.0")
def append(ctx: Ctx, argv: list[bytes]):
    """APPEND key value

    Keeps the key's TTL (Redis appends in place). Appending nothing to an existing string
    changes nothing, so it is neither counted nor logged.
    """
    key, tail = argv[1], argv[2]
    old = ctx.db.get_typed(key, bytes)
    if old is None:
        ctx.db.set(key, tail)
        new = tail
    else:
        string_too_long(ctx, len(old) + len(tail))
        if not tail:
            return len(old)
        new = old + tail
        ctx.db.set(key, new, keep_ttl=True)
    ctx.dirty()
    ctx.notify("$", "append", key)
    return len(new)


@command("STRLEN", 2, "readonly fast", keys=(1, 1, 1), categories="@read @string @fast", group="string",
         since="2.2.0")
def strlen(ctx: Ctx, argv: list[bytes]):
    """STRLEN key"""
    value = ctx.db.get_typed(argv[1], bytes)
    return 0 if value is None else len(value)
