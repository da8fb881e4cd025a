"""Commands about one stored value: OBJECT (ENCODING REFCOUNT IDLETIME FREQ HELP), DUMP, RESTORE.

DUMP payloads are Pion's own (``pion.storage.serialize``: type id, body, format version,
CRC32C: lossless for everything Pion stores). RESTORE also reads redis-server's payloads
(``pion.storage.rdb_payload``: RDB type, value, RDB version, CRC64), which MIGRATE sends.
"""

from __future__ import annotations

from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.args import ArgCursor, parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.encodings import encoding_of
from pion.storage.keyspace import now_ms
from pion.storage.rdb_payload import is_redis_payload, load_redis
from pion.storage.serialize import PayloadError, dump_value, load_value, verify_payload
from pion.storage.stream_value import Stream

_SWITCH_NOTE = (
    "Please note that when switching between policies at runtime LRU and LFU data will take "
    "some time to adjust."
)
NOT_LFU = f"ERR An LFU maxmemory policy is not selected, access frequency not tracked. {_SWITCH_NOTE}"
IS_LFU = f"ERR An LFU maxmemory policy is selected, idle time not tracked. {_SWITCH_NOTE}"
BUSYKEY = "BUSYKEY Target key name already exists."
BAD_PAYLOAD = "ERR DUMP payload version or checksum are wrong"
BAD_FORMAT = "ERR Bad data format"
#: Redis's OBJ_SHARED_REFCOUNT: what REFCOUNT answers for its shared integers 0..9999
SHARED_REFCOUNT = 2**31 - 1
_NO_SHARED_INTEGER_POLICIES = ("allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-lfu")

OBJECT_HELP = [
    b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"ENCODING <key>",
    b"    Return the kind of internal representation used in order to store the value",
    b"    associated with a <key>.",
    b"FREQ <key>",
    b"    Return the access frequency index of the <key>. The returned integer is",
    b"    proportional to the logarithm of the recent access frequency of the key.",
    b"IDLETIME <key>",
    b"    Return the idle time of the <key>, that is the approximated number of",
    b"    seconds elapsed since the last access to the key.",
    b"REFCOUNT <key>",
    b"    Return the number of references of the value associated with the specified",
    b"    <key>.",
    b"HELP",
    b"    Prints this help.",
]


def _is_lfu(ctx: Ctx) -> bool:
    return "lfu" in ctx.server.settings.maxmemory_policy


@command("OBJECT|ENCODING", 3, "readonly", keys=(2, 2, 1), categories="@keyspace @read @slow", since="2.2.3")
def object_encoding(ctx: Ctx, argv: list[bytes]):
    """OBJECT ENCODING key"""
    value = ctx.db.peek(argv[2])
    return None if value is None else encoding_of(value, ctx.server.settings).encode()


@command("OBJECT|REFCOUNT", 3, "readonly", keys=(2, 2, 1), categories="@keyspace @read @slow", since="2.2.3")
def object_refcount(ctx: Ctx, argv: list[bytes]):
    """OBJECT REFCOUNT key

    Values are never shared in Pion (1), except that Redis's shared integers 0..9999 answer
    as Redis answers them, unless maxmemory with an LRU/LFU policy turns sharing off."""
    value = ctx.db.peek(argv[2])
    if value is None:
        return None
    settings = ctx.server.settings
    shares = not (settings.maxmemory and settings.maxmemory_policy in _NO_SHARED_INTEGER_POLICIES)
    if shares and value.__class__ is bytes and encoding_of(value, settings) == "int" and 0 <= int(value) < 10000:
        return SHARED_REFCOUNT
    return 1


@command("OBJECT|IDLETIME", 3, "readonly", keys=(2, 2, 1), categories="@keyspace @read @slow", since="2.2.3")
def object_idletime(ctx: Ctx, argv: list[bytes]):
    """OBJECT IDLETIME key"""
    db = ctx.db
    if db.peek(argv[2]) is None:
        return None
    if _is_lfu(ctx):
        raise ReplyError(IS_LFU)
    return db.idle_ms(argv[2]) // 1000


@command("OBJECT|FREQ", 3, "readonly", keys=(2, 2, 1), categories="@keyspace @read @slow", since="4.0.0")
def object_freq(ctx: Ctx, argv: list[bytes]):
    """OBJECT FREQ key"""
    db = ctx.db
    if db.peek(argv[2]) is None:
        return None
    if not _is_lfu(ctx):
        raise ReplyError(NOT_LFU)
    return db.lfu_counter(argv[2])


@command("OBJECT|HELP", 2, "loading stale", categories="@keyspace @slow", since="6.2.0")
def object_help(ctx: Ctx, argv: list[bytes]):
    """OBJECT HELP"""
    return list(OBJECT_HELP)


# -- DUMP / RESTORE -----------------------------------------------------------------------


@command("DUMP", 2, "readonly", keys=(1, 1, 1), categories="@keyspace @read @slow", since="2.6.0")
def dump(ctx: Ctx, argv: list[bytes]):
    """DUMP key"""
    value = ctx.db.get(argv[1])
    if value is None:
        return None
    try:
        return dump_value(value)
    except PayloadError as exc:
        raise ReplyError(f"ERR DUMP is not supported for this value: {exc}") from None


@command("RESTORE", -4, "write denyoom", keys=(1, 1, 1), categories="@keyspace @write @slow @dangerous", since="2.6.0")
def restore(ctx: Ctx, argv: list[bytes]):
    """RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]"""
    replace, absttl, idle, freq = _restore_options(argv)
    db, key = ctx.db, argv[1]
    if not replace and db.get(key) is not None:
        raise ReplyError(BUSYKEY)
    ttl = parse_int(argv[2])
    if ttl < 0:
        raise ReplyError("ERR Invalid TTL value, must be >= 0")
    value = _load(argv[3], ctx.server.settings)
    deleted = replace and db.delete(key)
    if ttl and not absttl:
        ttl += now_ms()
    if ttl and ttl <= now_ms() and not ctx.server.loading:
        if deleted:  # the old value is gone and the new one is born expired: log a DEL
            ctx.rewrite([b"DEL", key])
            ctx.notify("g", "del", key)
            ctx.dirty()
        return OK
    db.set(key, value)
    if ttl:
        db.set_expire(key, ttl)
        if not absttl:
            ctx.rewrite([*argv[:2], b"%d" % ttl, *argv[3:], b"ABSTTL"])
    db.set_access(key, None if idle is None else idle * 1000, freq)
    ctx.notify("g", "restore", key)
    ctx.dirty()
    return OK


def _restore_options(argv: list[bytes]) -> tuple[bool, bool, int | None, int | None]:
    replace = absttl = False
    idle: int | None = None
    freq: int | None = None
    args = ArgCursor(argv, 4)
    while not args.done():
        option = args.next_option()
        if option == b"REPLACE":
            replace = True
        elif option == b"ABSTTL":
            absttl = True
        elif option == b"IDLETIME" and args.remaining() >= 1 and freq is None:
            idle = args.next_int()
            if idle < 0:
                raise ReplyError("ERR Invalid IDLETIME value, must be >= 0")
        elif option == b"FREQ" and args.remaining() >= 1 and idle is None:
            freq = args.next_int()
            if not 0 <= freq <= 255:
                raise ReplyError("ERR Invalid FREQ value, must be >= 0 and <= 255")
        else:
            raise ReplyError(errors.SYNTAX)
    return replace, absttl, idle, freq


def _load(payload: bytes, settings: object) -> Any:
    pion = verify_payload(payload)
    if not pion and not is_redis_payload(payload):
        raise ReplyError(BAD_PAYLOAD)
    try:
        value = load_value(payload) if pion else load_redis(payload, settings)
    except Exception:  # any decoding failure of a payload whose checksum matched
        raise ReplyError(BAD_FORMAT) from None
    if value.__class__ not in (bytes, Stream) and hasattr(value, "__len__") and len(value) == 0:
        raise ReplyError(BAD_FORMAT)  # Redis refuses empty containers (an empty stream is a value)
    return value
