"""Hash commands: HSET HSETNX HGET HMGET HMSET HGETALL HKEYS HVALS HLEN HDEL HEXISTS HINCRBY
HINCRBYFLOAT HSTRLEN HRANDFIELD HSCAN, plus the Redis 7.4 field-expiry commands (HEXPIRE ...),
which live in ``hash_fields``, and Redis 8.0's HGETDEL HGETEX HSETEX (``hash_ex``), registered by
being imported here.

Values are ``HashValue`` (pion.storage.hash_value). Every command reads through ``load``, which
first drops (and logs as HDEL) the fields whose time has come, so none is ever returned.
"""

from __future__ import annotations

import random

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Pairs
from pion.protocol.streamed import STREAM_MIN, sampled
from pion.server.args import INT64_MAX, INT64_MIN, is_int, parse_int
from pion.server.commands.core.hash_ex import hgetdel, hgetex, hsetex  # noqa: F401 - importing registers them
from pion.server.commands.core.hash_fields import (  # noqa: F401 - importing registers them
    hexpire,
    hexpireat,
    hexpiretime,
    hpersist,
    hpexpire,
    hpexpireat,
    hpexpiretime,
    hpttl,
    httl,
    load,
    log,
)
from pion.server.commands.core.sets import COUNT_RANGE, filter_matches, parse_scan_options
from pion.server.context import Ctx
from pion.server.deferred import can_defer
from pion.server.registry import command
from pion.storage.hash_value import (
    HASHTABLE,
    INF,
    HashValue,
    format_long_double,
    hash_limits,
    parse_long_double,
    round_long_double,
)
from pion.storage.scan import parse_cursor


def _store(ctx: Ctx, key: bytes, value: HashValue, created: bool) -> None:
    if created:
        ctx.db.set(key, value)
    else:
        ctx.db.signal(key)


def _for_write(ctx: Ctx, key: bytes) -> tuple[HashValue, bool]:
    value = load(ctx, key)
    return (value, False) if value is not None else (HashValue(), True)


def _hset(ctx: Ctx, argv: list[bytes]) -> int:
    if len(argv) % 2:
        raise ReplyError(errors.wrong_arity(argv[0].decode("latin-1").lower()))
    key = argv[1]
    value, created = _for_write(ctx, key)
    limits = hash_limits(ctx.server.settings)
    value.prepare(argv[2:], limits)
    added = 0
    for i in range(2, len(argv), 2):
        added += value.put(argv[i], argv[i + 1], limits)
    _store(ctx, key, value, created)
    ctx.dirty((len(argv) - 2) // 2)
    ctx.notify("h", "hset", key)
    log(ctx, argv)
    return added


@command("HSET", -4, "write denyoom fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash")
def hset(ctx: Ctx, argv: list[bytes]):
    """HSET key field value [field value ...]"""
    return _hset(ctx, argv)


@command("HMSET", -4, "write denyoom fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash", since="2.0.0")
def hmset(ctx: Ctx, argv: list[bytes]):
    """HMSET key field value [field value ...]"""
    _hset(ctx, argv)
    return OK


@command("HSETNX", 4, "write denyoom fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash", since="2.0.0")
def hsetnx(ctx: Ctx, argv: list[bytes]):
    """HSETNX key field value"""
    key, field = argv[1], argv[2]
    value, created = _for_write(ctx, key)
    if field in value.fields:
        return 0
    limits = hash_limits(ctx.server.settings)
    value.prepare(argv[2:4], limits)
    value.put(field, argv[3], limits)
    _store(ctx, key, value, created)
    ctx.dirty()
    ctx.notify("h", "hset", key)
    log(ctx, argv)
    return 1


@command("HGET", 3, "readonly fast", keys=(1, 1, 1), categories="@read @hash @fast", group="hash", since="2.0.0")
def hget(ctx: Ctx, argv: list[bytes]):
    """HGET key field"""
    value = load(ctx, argv[1])
    return value.fields.get(argv[2]) if value is not None else None


@command("HMGET", -3, "readonly fast", keys=(1, 1, 1), categories="@read @hash @fast", group="hash", since="2.0.0")
def hmget(ctx: Ctx, argv: list[bytes]):
    """HMGET key field [field ...]"""
    value = load(ctx, argv[1])
    if value is None:
        return [None] * (len(argv) - 2)
    get = value.fields.get
    return [get(field) for field in argv[2:]]


@command("HGETALL", 2, "readonly", keys=(1, 1, 1), categories="@read @hash @slow", group="hash", since="2.0.0")
def hgetall(ctx: Ctx, argv: list[bytes]):
    """HGETALL key"""
    value = load(ctx, argv[1])
    return dict(value.fields) if value is not None else {}


@command("HKEYS", 2, "readonly", keys=(1, 1, 1), categories="@read @hash @slow", group="hash", since="2.0.0")
def hkeys(ctx: Ctx, argv: list[bytes]):
    """HKEYS key"""
    value = load(ctx, argv[1])
    return list(value.fields) if value is not None else []


@command("HVALS", 2, "readonly", keys=(1, 1, 1), categories="@read @hash @slow", group="hash", since="2.0.0")
def hvals(ctx: Ctx, argv: list[bytes]):
    """HVALS key"""
    value = load(ctx, argv[1])
    return list(value.fields.values()) if value is not None else []


@command("HLEN", 2, "readonly fast", keys=(1, 1, 1), categories="@read @hash @fast", group="hash", since="2.0.0")
def hlen(ctx: Ctx, argv: list[bytes]):
    """HLEN key"""
    value = load(ctx, argv[1])
    return len(value.fields) if value is not None else 0


@command("HSTRLEN", 3, "readonly fast", keys=(1, 1, 1), categories="@read @hash @fast", group="hash", since="3.2.0")
def hstrlen(ctx: Ctx, argv: list[bytes]):
    """HSTRLEN key field"""
    value = load(ctx, argv[1])
    return len(value.fields.get(argv[2], b"")) if value is not None else 0


@command("HEXISTS", 3, "readonly fast", keys=(1, 1, 1), categories="@read @hash @fast", group="hash", since="2.0.0")
def hexists(ctx: Ctx, argv: list[bytes]):
    """HEXISTS key field"""
    value = load(ctx, argv[1])
    return int(value is not None and argv[2] in value.fields)


@command("HDEL", -3, "write fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash", since="2.0.0")
def hdel(ctx: Ctx, argv: list[bytes]):
    """HDEL key field [field ...]"""
    key = argv[1]
    value = load(ctx, key)
    if value is None:
        return 0
    deleted = sum(value.remove(field) for field in argv[2:])
    if deleted:
        ctx.dirty(deleted)
        ctx.notify("h", "hdel", key)
        if value.fields:
            ctx.db.signal(key)
        else:
            ctx.db.delete(key)
            ctx.notify("g", "del", key)
        log(ctx, argv)
    return deleted


@command("HINCRBY", 4, "write denyoom fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash", since="2.0.0")
def hincrby(ctx: Ctx, argv: list[bytes]):
    """HINCRBY key field increment"""
    key, field = argv[1], argv[2]
    incr = parse_int(argv[3])
    value, created = _for_write(ctx, key)
    current = value.fields.get(field, b"0")
    if not is_int(current):
        raise ReplyError("ERR hash value is not an integer")
    result = int(current) + incr
    if not INT64_MIN <= result <= INT64_MAX:
        raise ReplyError(errors.OVERFLOW)
    value.put(field, str(result).encode(), hash_limits(ctx.server.settings), keep_ttl=True)
    _store(ctx, key, value, created)
    ctx.dirty()
    ctx.notify("h", "hincrby", key)
    log(ctx, argv)
    return result


@command("HINCRBYFLOAT", 4, "write denyoom fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash", since="2.6.0")
def hincrbyfloat(ctx: Ctx, argv: list[bytes]):
    """HINCRBYFLOAT key field increment"""
    key, field = argv[1], argv[2]
    incr = parse_long_double(argv[3])
    if incr is None:
        raise ReplyError(errors.NOT_FLOAT)
    if isinstance(incr, str):
        raise ReplyError("ERR value is NaN or Infinity")
    value, created = _for_write(ctx, key)
    current = parse_long_double(value.fields.get(field, b"0"))
    if current is None:
        raise ReplyError("ERR hash value is not a float")
    total = INF if isinstance(current, str) else round_long_double(current + incr)
    if isinstance(total, str):
        raise ReplyError("ERR increment would produce NaN or Infinity")
    text = format_long_double(total)
    value.put(field, text, hash_limits(ctx.server.settings), keep_ttl=True)
    _store(ctx, key, value, created)
    ctx.dirty()
    ctx.notify("h", "hincrbyfloat", key)
    log(ctx, [b"HSET", key, field, text])
    when = value.ttls.get(field)
    if when is not None:  # HSET drops a field's TTL: put it back on replay
        log(ctx, [b"HPEXPIREAT", key, str(when).encode(), b"FIELDS", b"1", field])
    return text


@command("HRANDFIELD", -2, "readonly", keys=(1, 1, 1), categories="@read @hash @slow", group="hash", since="6.2.0")
def hrandfield(ctx: Ctx, argv: list[bytes]):
    """HRANDFIELD key [count [WITHVALUES]]"""
    if len(argv) == 2:
        value = load(ctx, argv[1])
        return random.choice(list(value.fields)) if value is not None else None
    count = parse_int(argv[2])
    if count == INT64_MIN:
        raise ReplyError(COUNT_RANGE)
    if len(argv) > 4 or (len(argv) == 4 and argv[3].lower() != b"withvalues"):
        raise ReplyError(errors.SYNTAX)
    withvalues = len(argv) == 4
    if withvalues and not -(INT64_MAX // 2) <= count <= INT64_MAX // 2:
        raise ReplyError("ERR value is out of range")
    value = load(ctx, argv[1])
    if value is None or count == 0:
        return []
    if -count >= STREAM_MIN and can_defer(ctx):  # a large reply: made in pieces (pion.protocol.streamed)
        return sampled(list(value.fields.items()) if withvalues else list(value.fields), -count, pairs=withvalues)
    picked = _random_fields(value, count)
    if withvalues:
        fields = value.fields
        return Pairs([(field, fields[field]) for field in picked])
    return picked


def _random_fields(value: HashValue, count: int) -> list[bytes]:
    """Negative: with repetition; at least the size: all; else distinct (in order if compact)."""
    names = list(value.fields)
    if count < 0:
        return random.choices(names, k=-count)
    if count >= len(names):
        return names
    if value.encoding == HASHTABLE:
        return random.sample(names, count)
    return [names[i] for i in sorted(random.sample(range(len(names)), count))]


@command("HSCAN", -3, "readonly", keys=(1, 1, 1), categories="@read @hash @slow", group="hash", since="2.8.0")
def hscan(ctx: Ctx, argv: list[bytes]):
    """HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]"""
    cursor = parse_cursor(argv[2])
    value = load(ctx, argv[1])
    if value is None:
        return [b"0", []]
    pattern, count, novalues = parse_scan_options(argv, 3, is_hash=True)
    next_cursor, fields = value.scan(cursor, count)
    fields = filter_matches(fields, pattern)
    if novalues:
        items = fields
    else:
        items = []
        for field in fields:
            items += (field, value.fields[field])
    return [str(next_cursor).encode(), items]

