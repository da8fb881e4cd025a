"""Key expiry commands: EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL EXPIRETIME PEXPIRETIME PERSIST.

Every TTL is stored as an absolute Unix time in ms. A successful EXPIRE family command is
logged as ``PEXPIREAT key <ms>`` so replay does not depend on when it runs; one whose time
has already passed deletes the key and is logged as ``DEL key`` (Redis's checkAlreadyExpired).
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.keyspace import now_ms

INT64_MAX = 2**63 - 1
#: C's LLONG_MAX / 1000 (truncating division, symmetric for LLONG_MIN)
SECONDS_LIMIT = INT64_MAX // 1000
NX, XX, GT, LT = 1, 2, 4, 8
_FLAGS = {b"NX": NX, b"XX": XX, b"GT": GT, b"LT": LT}


def _parse_flags(argv: list[bytes]) -> int:
    flags = 0
    for raw in argv[3:]:
        flag = _FLAGS.get(raw.upper())
        if flag is None:
            raise ReplyError(f"ERR Unsupported option {raw.decode('utf-8', 'replace')}")
        flags |= flag
    if flags & NX and flags & (XX | GT | LT):
        raise ReplyError("ERR NX and XX, GT or LT options at the same time are not compatible")
    if flags & GT and flags & LT:
        raise ReplyError("ERR GT and LT options at the same time are not compatible")
    return flags


def _deadline(argv: list[bytes], base_ms: int, seconds: bool) -> int:
    """The absolute expiry in ms, refusing what would overflow a 64-bit integer in Redis."""
    when = parse_int(argv[2])
    name = argv[0].decode("latin-1").lower()
    if seconds:
        if not -SECONDS_LIMIT <= when <= SECONDS_LIMIT:
            raise ReplyError(errors.INVALID_EXPIRE.format(name))
        when *= 1000
    if when > INT64_MAX - base_ms:
        raise ReplyError(errors.INVALID_EXPIRE.format(name))
    return when + base_ms


def _passes(flags: int, current: int | None, when: int) -> bool:
    """NX/XX/GT/LT against the current TTL; no TTL counts as infinite for GT and LT."""
    if flags & NX and current is not None:
        return False
    if flags & XX and current is None:
        return False
    if flags & GT and (current is None or when <= current):
        return False
    return not (flags & LT and current is not None and when >= current)


def expire_generic(ctx: Ctx, argv: list[bytes], relative: bool, seconds: bool) -> int:
    flags = _parse_flags(argv)
    when = _deadline(argv, now_ms() if relative else 0, seconds)
    db, key = ctx.db, argv[1]
    if db.get(key) is None:
        return 0
    if flags and not _passes(flags, db.ttl_ms(key), when):
        return 0
    ctx.dirty()
    if when <= now_ms() and not ctx.server.loading:
        db.delete(key)
        ctx.rewrite([b"DEL", key])
        ctx.notify("g", "del", key)
        return 1
    db.set_expire(key, when)
    ctx.rewrite([b"PEXPIREAT", key, b"%d" % when])
    ctx.notify("g", "expire", key)
    return 1


@command("EXPIRE", -3, "write fast", keys=(1, 1, 1), categories="@keyspace @write @fast")
def expire(ctx: Ctx, argv: list[bytes]):
    """EXPIRE key seconds [NX | XX | GT | LT]"""
    return expire_generic(ctx, argv, relative=True, seconds=True)


@command("PEXPIRE", -3, "write fast", keys=(1, 1, 1), categories="@keyspace @write @fast", since="2.6.0")
def pexpire(ctx: Ctx, argv: list[bytes]):
    """PEXPIRE key milliseconds [NX | XX | GT | LT]"""
    return expire_generic(ctx, argv, relative=True, seconds=False)


@command("EXPIREAT", -3, "write fast", keys=(1, 1, 1), categories="@keyspace @write @fast", since="1.2.0")
def expireat(ctx: Ctx, argv: list[bytes]):
    """EXPIREAT key unix-time-seconds [NX | XX | GT | LT]"""
    return expire_generic(ctx, argv, relative=False, seconds=True)


@command("PEXPIREAT", -3, "write fast", keys=(1, 1, 1), categories="@keyspace @write @fast", since="2.6.0")
def pexpireat(ctx: Ctx, argv: list[bytes]):
    """PEXPIREAT key unix-time-milliseconds [NX | XX | GT | LT]"""
    return expire_generic(ctx, argv, relative=False, seconds=False)


def ttl_generic(ctx: Ctx, key: bytes, in_ms: bool, absolute: bool) -> int:
    """-2 for a missing key, -1 without TTL; seconds round to nearest as Redis's (t+500)/1000."""
    db = ctx.db
    if db.peek(key) is None:
        return -2
    when = db.ttl_ms(key)
    if when is None:
        return -1
    value = max(when if absolute else when - now_ms(), 0)
    return value if in_ms else (value + 500) // 1000


@command("TTL", 2, "readonly fast", keys=(1, 1, 1), categories="@keyspace @read @fast")
def ttl(ctx: Ctx, argv: list[bytes]):
    """TTL key"""
    return ttl_generic(ctx, argv[1], in_ms=False, absolute=False)


@command("PTTL", 2, "readonly fast", keys=(1, 1, 1), categories="@keyspace @read @fast", since="2.6.0")
def pttl(ctx: Ctx, argv: list[bytes]):
    """PTTL key"""
    return ttl_generic(ctx, argv[1], in_ms=True, absolute=False)


@command("EXPIRETIME", 2, "readonly fast", keys=(1, 1, 1), categories="@keyspace @read @fast", since="7.0.0")
def expiretime(ctx: Ctx, argv: list[bytes]):
    """EXPIRETIME key"""
    return ttl_generic(ctx, argv[1], in_ms=False, absolute=True)


@command("PEXPIRETIME", 2, "readonly fast", keys=(1, 1, 1), categories="@keyspace @read @fast", since="7.0.0")
def pexpiretime(ctx: Ctx, argv: list[bytes]):
    """PEXPIRETIME key"""
    return ttl_generic(ctx, argv[1], in_ms=True, absolute=True)


@command("PERSIST", 2, "write fast", keys=(1, 1, 1), categories="@keyspace @write @fast", since="2.2.0")
def persist(ctx: Ctx, argv: list[bytes]):
    """PERSIST key"""
    db, key = ctx.db, argv[1]
    if db.get(key) is None or not db.persist(key):
        return 0
    ctx.notify("g", "persist", key)
    ctx.dirty()
    return 1
