"""String counters: INCR DECR INCRBY DECRBY (64-bit integers) and INCRBYFLOAT.

INCRBYFLOAT computes in C ``long double`` (numpy.longdouble: x87 80-bit on x86-64 Linux, as
Redis) and formats like Redis's ``ld2string(..., LD_STR_HUMAN)``: ``%.17Lf`` with trailing
zeros and a bare point trimmed, so ``INCRBYFLOAT k 0.1`` then ``0.2`` gives ``0.3`` exactly as
Redis does. It is logged as ``SET key value KEEPTTL`` so replay never redoes float arithmetic.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import INT64_MAX, INT64_MIN, parse_int
from pion.server.context import Ctx
from pion.server.registry import command

#: strtold's longest accepted input in Redis (MAX_LONG_DOUBLE_CHARS).
_MAX_LONG_DOUBLE_CHARS = 5 * 1024
_NONZERO_DIGIT = re.compile(r"[1-9]")
_NONZERO_HEX_DIGIT = re.compile(r"[1-9a-fA-F]")


def parse_long_double(raw: bytes) -> np.longdouble:
    """Redis's string2ld: strtold must consume the whole argument (no NUL inside), refusing NaN,
    leading space, overflow to infinity and underflow to zero (an explicit ``inf`` is accepted)."""
    if not raw or len(raw) >= _MAX_LONG_DOUBLE_CHARS or raw[:1].isspace() or b"\x00" in raw:
        raise ReplyError(errors.NOT_FLOAT)
    text = raw.decode("latin-1")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = np.longdouble(text)
    except (ValueError, OverflowError):
        raise ReplyError(errors.NOT_FLOAT) from None
    if np.isnan(value) or (np.isinf(value) and not _spells_infinity(text)):
        raise ReplyError(errors.NOT_FLOAT)
    if value == 0 and _has_nonzero_mantissa(text):
        raise ReplyError(errors.NOT_FLOAT)
    return value


def _spells_infinity(text: str) -> bool:
    return text.lstrip("+-")[:3].lower() == "inf"


def _has_nonzero_mantissa(text: str) -> bool:
    body = text.lstrip("+-").lower()
    if body.startswith("0x"):
        return bool(_NONZERO_HEX_DIGIT.search(body[2:].split("p")[0]))
    return bool(_NONZERO_DIGIT.search(body.split("e")[0]))


def format_long_double(value: np.longdouble) -> bytes:
    """``%.17Lf`` with trailing zeros (and then the point) removed; ``-0`` becomes ``0``."""
    text = np.format_float_positional(value, precision=17, unique=False, fractional=True, trim="k")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if text == "-0":
        text = "0"
    return text.encode("ascii")


def incr_by(ctx: Ctx, key: bytes, incr: int):
    """Redis's incrDecrCommand: add to a 64-bit integer string; keeps the TTL."""
    db = ctx.db
    old = db.get_typed(key, bytes)
    value = 0 if old is None else parse_int(old)
    new = value + incr
    if not INT64_MIN <= new <= INT64_MAX:
        raise ReplyError(errors.OVERFLOW)
    if old is not None and incr == 0:
        return new  # nothing changes: not counted, not logged
    db.set(key, b"%d" % new, keep_ttl=True)
    ctx.dirty()
    ctx.notify("$", "incrby", key)
    return new


@command("INCR", 2, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast", group="string")
def incr(ctx: Ctx, argv: list[bytes]):
    """INCR key"""
    return incr_by(ctx, argv[1], 1)


@command("DECR", 2, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast", group="string")
def decr(ctx: Ctx, argv: list[bytes]):
    """DECR key"""
    return incr_by(ctx, argv[1], -1)


@command("INCRBY", 3, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast", group="string")
def incrby(ctx: Ctx, argv: list[bytes]):
    """INCRBY key increment"""
    return incr_by(ctx, argv[1], parse_int(argv[2]))


@command("DECRBY", 3, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast", group="string")
def decrby(ctx: Ctx, argv: list[bytes]):
    """DECRBY key decrement

    Negating INT64_MIN would overflow, so Redis refuses that decrement up front.
    """
    amount = parse_int(argv[2])
    if amount == INT64_MIN:
        raise ReplyError("ERR decrement would overflow")
    return incr_by(ctx, argv[1], -amount)


@command("INCRBYFLOAT", 3, "write denyoom fast", keys=(1, 1, 1), categories="@write @string @fast",
         group="string", since="2.6.0")
def incrbyfloat(ctx: Ctx, argv: list[bytes]):
    """INCRBYFLOAT key increment

    The stored value is parsed before the increment (Redis's order of errors); the result is
    logged as ``SET key value KEEPTTL``.
    """
    key = argv[1]
    db = ctx.db
    old = db.get_typed(key, bytes)
    value = np.longdouble(0) if old is None else parse_long_double(old)
    incr = parse_long_double(argv[2])
    with np.errstate(all="ignore"):
        total = value + incr
    if np.isnan(total) or np.isinf(total):
        raise ReplyError("ERR increment would produce NaN or Infinity")
    new = format_long_double(total)
    if new == old:
        return new  # nothing changes: not counted, not logged
    db.set(key, new, keep_ttl=True)
    ctx.dirty()
    ctx.notify("$", "incrbyfloat", key)
    ctx.rewrite([b"SET", key, new, b"KEEPTTL"])
    return new
