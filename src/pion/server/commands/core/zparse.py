"""Number and range parsing for the list, sorted-set and geo commands, as C's strtod reads it.

Redis parses scores with ``strtod`` and blocking timeouts with ``strtold``, then applies its own
checks; Python's ``float`` accepts and refuses different strings ("1e400", "0x10", "1_0",
" 1"), so the exact rules live here. Not a command family: it declares no commands.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.storage.zset_value import MINUS, PLUS, LexRange, ScoreRange

_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_HEX = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?\Z")
_INF = re.compile(r"[+-]?inf(?:inity)?\Z", re.IGNORECASE)
_NAN = re.compile(r"[+-]?nan(?:\([0-9a-zA-Z_]*\))?\Z", re.IGNORECASE)
_C_SPACE = " \t\n\v\f\r"
#: the largest long double (x87 80-bit), for strtold's overflow
_LDBL_MAX = Decimal("1.18973149535723176502e4932")
_LDBL_TINY = Decimal("3.6e-4951")

MIN_OR_MAX_FLOAT = "ERR min or max is not a float"
MIN_OR_MAX_LEX = "ERR min or max not valid string range item"
NAN_SCORE = "ERR resulting score is not a number (NaN)"
MUST_BE_POSITIVE = "ERR value is out of range, must be positive"


def strtod(text: str) -> tuple[float, bool] | None:
    """(value, out of range) if all of ``text`` is a C double literal, else None."""
    if _DECIMAL.match(text):
        value = float(text)
        if math.isinf(value):
            return value, True
        underflow = value == 0.0 and any(ch in "123456789" for ch in text.split("e")[0].split("E")[0])
        return value, underflow
    if _HEX.match(text):
        try:
            value = float.fromhex(text)
        except OverflowError:
            return (-math.inf if text.startswith("-") else math.inf), True
        mantissa = text.lower().split("p")[0][2:].lstrip("+-x")
        return value, value == 0.0 and any(ch not in "0." for ch in mantissa)
    if _INF.match(text):
        return (-math.inf if text.startswith("-") else math.inf), False
    if _NAN.match(text):
        return math.nan, False
    return None


def parse_double(raw: bytes, error: str = errors.NOT_FLOAT) -> float:
    """getDoubleFromObject: the whole string, no leading space, no NaN, no overflow."""
    text = raw.decode("latin-1")
    if not text or text[0] in _C_SPACE:
        raise ReplyError(error)
    parsed = strtod(text)
    if parsed is None:
        raise ReplyError(error)
    value, out_of_range = parsed
    if math.isnan(value) or (out_of_range and (math.isinf(value) or value == 0.0)):
        raise ReplyError(error)
    return value


def _range_item(raw: bytes) -> float | None:
    """zslParseRange's strtod: leading space and an empty string are fine, overflow is inf."""
    text = raw.split(b"\0", 1)[0].decode("latin-1")
    stripped = text.lstrip(_C_SPACE)
    if not stripped:
        return 0.0 if not text else None
    parsed = strtod(stripped)
    if parsed is None or math.isnan(parsed[0]):
        return None
    return parsed[0]


def parse_score_range(low: bytes, high: bytes) -> ScoreRange:
    """``min max`` of ZRANGEBYSCORE and friends; ``(`` marks an exclusive end."""
    bounds = []
    for raw in (low, high):
        exclusive = raw[:1] == b"("
        value = _range_item(raw[1:] if exclusive else raw)
        if value is None:
            raise ReplyError(MIN_OR_MAX_FLOAT)
        bounds.append((value, exclusive))
    return ScoreRange(bounds[0][0], bounds[0][1], bounds[1][0], bounds[1][1])


def _lex_item(raw: bytes) -> tuple[object, bool]:
    head = raw[:1]
    if head == b"+" and len(raw) == 1:
        return PLUS, True
    if head == b"-" and len(raw) == 1:
        return MINUS, True
    if head == b"(":
        return raw[1:], True
    if head == b"[":
        return raw[1:], False
    raise ReplyError(MIN_OR_MAX_LEX)


def parse_lex_range(low: bytes, high: bytes) -> LexRange:
    low_value, low_ex = _lex_item(low)
    high_value, high_ex = _lex_item(high)
    return LexRange(low_value, low_ex, high_value, high_ex)


def parse_block_timeout(raw: bytes) -> float:
    """Seconds for BLPOP & co. (0 = forever), read as Redis reads it: strtold, then
    ``ceil(seconds * 1000)`` milliseconds cast to a 64-bit integer."""
    not_float = "ERR timeout is not a float or out of range"
    text = raw.decode("latin-1")
    if not text or len(text) >= 5 * 1024 or text[0] in _C_SPACE:
        raise ReplyError(not_float)
    if _DECIMAL.match(text):
        exact = Decimal(text)
        if abs(exact) > _LDBL_MAX or (exact != 0 and abs(exact) < _LDBL_TINY):
            raise ReplyError(not_float)
        millis = math.ceil(exact * 1000)
    else:
        parsed = strtod(text)
        if parsed is None or math.isnan(parsed[0]):
            raise ReplyError(not_float)
        if math.isinf(parsed[0]):
            raise ReplyError(errors.NEGATIVE_TIMEOUT)  # the cast to long long wraps negative
        millis = math.ceil(parsed[0] * 1000)
    if millis < 0 or millis >= 2**63:
        raise ReplyError(errors.NEGATIVE_TIMEOUT)
    if millis > 10**13:  # past any uptime; Redis's own sum overflows here and never fires
        return 0.0
    return millis / 1000


def parse_count(raw: bytes) -> int:
    """LPOP/ZPOPMIN count: a non-negative integer, one error text for every bad value."""
    value = parse_int(raw, MUST_BE_POSITIVE)
    if value < 0:
        raise ReplyError(MUST_BE_POSITIVE)
    return value


def parse_numkeys(raw: bytes) -> int:
    """LMPOP/ZMPOP numkeys (too many for the arguments given is a syntax error later)."""
    value = parse_int(raw, "ERR numkeys should be greater than 0")
    if value <= 0:
        raise ReplyError("ERR numkeys should be greater than 0")
    return value


def parse_mpop_tail(argv: list[bytes], pos: int, ends: tuple[bytes, bytes]) -> tuple[bool, int]:
    """``LEFT|RIGHT`` / ``MIN|MAX`` then ``[COUNT n]``: (first end chosen, count)."""
    if pos >= len(argv):
        raise ReplyError(errors.SYNTAX)
    where = argv[pos].lower()
    if where not in ends:
        raise ReplyError(errors.SYNTAX)
    count = -1
    pos += 1
    while pos < len(argv):
        if argv[pos].lower() == b"count" and pos + 1 < len(argv) and count == -1:
            count = parse_int(argv[pos + 1], "ERR count should be greater than 0")
            if count <= 0:
                raise ReplyError("ERR count should be greater than 0")
            pos += 2
        else:
            raise ReplyError(errors.SYNTAX)
    return where == ends[0], count
