"""Argument parsing shared by the command families, with Redis's exact error texts."""

from __future__ import annotations

import math

from pion.protocol import errors
from pion.protocol.errors import ReplyError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def parse_int(raw: bytes, error: str = errors.NOT_INTEGER) -> int:
    """A signed 64-bit integer written as Redis's string2ll accepts it (no spaces, no '+')."""
    if not raw or len(raw) > 20 or raw[0] == 0x2B or raw[-1:].isspace() or raw[:1].isspace():
        raise ReplyError(error)
    if raw[0] == 0x30 and len(raw) > 1:  # leading zeros are not integers to Redis
        raise ReplyError(error)
    if raw[:2] == b"-0":
        raise ReplyError(error)
    try:
        value = int(raw)
    except ValueError:
        raise ReplyError(error) from None
    if not INT64_MIN <= value <= INT64_MAX or b"_" in raw:
        raise ReplyError(error)
    return value


def is_int(raw: bytes) -> bool:
    try:
        parse_int(raw)
    except ReplyError:
        return False
    return True


def parse_nonneg_int(raw: bytes, error: str = errors.NOT_INTEGER) -> int:
    value = parse_int(raw, error)
    if value < 0:
        raise ReplyError(error)
    return value


def parse_float(raw: bytes, error: str = errors.NOT_FLOAT, allow_nan: bool = False) -> float:
    """A double as strtod reads it; 'inf' spellings allowed, NaN refused unless asked for."""
    text = raw.decode("latin-1")
    if not text or text != text.strip() or "_" in text:
        raise ReplyError(error)
    try:
        value = float(text)
    except ValueError:
        raise ReplyError(error) from None
    if math.isnan(value) and not allow_nan:
        raise ReplyError(error)
    return value


def parse_timeout(raw: bytes) -> float:
    """Blocking-command timeout in seconds (fractions allowed); 0 means forever."""
    try:
        value = float(raw.decode("latin-1"))
    except ValueError:
        raise ReplyError("ERR timeout is not a float or out of range") from None
    if math.isnan(value) or math.isinf(value):
        raise ReplyError("ERR timeout is not a float or out of range")
    if value < 0:
        raise ReplyError(errors.NEGATIVE_TIMEOUT)
    return value


class ArgCursor:
    """A cursor over options (mini-redis's ``Parse``): ``next``, ``next_int``, ``peek_option``."""

    __slots__ = ("argv", "pos")

    def __init__(self, argv: list[bytes], start: int = 1) -> None:
        self.argv = argv
        self.pos = start

    def done(self) -> bool:
        return self.pos >= len(self.argv)

    def remaining(self) -> int:
        return len(self.argv) - self.pos

    def next(self) -> bytes:
        if self.pos >= len(self.argv):
            raise ReplyError(errors.SYNTAX)
        value = self.argv[self.pos]
        self.pos += 1
        return value

    def next_option(self) -> bytes:
        return self.next().upper()

    def next_int(self, error: str = errors.NOT_INTEGER) -> int:
        return parse_int(self.next(), error)

    def next_float(self, error: str = errors.NOT_FLOAT) -> float:
        return parse_float(self.next(), error)


# -- the K/V families' arguments (V.*, KV.*, SSM.*, ATTEND.*) ----------------------------------

MAX_NS = 200
NS_LENGTH = "ERR ns_key length must be 1..200"


def arg(raw: bytes | memoryview) -> bytes:
    """A small argument as bytes (a large one may arrive as a memoryview: zero_copy, log replay)."""
    return raw if raw.__class__ is bytes else bytes(raw)


def check_ns(raw: bytes | memoryview) -> bytes:
    """A K/V namespace: 1..200 bytes."""
    ns = arg(raw)
    if not 1 <= len(ns) <= MAX_NS:
        raise ReplyError(NS_LENGTH)
    return ns


def strict_int(raw: bytes | memoryview, lo: int, hi: int, error: str) -> int:
    """A decimal integer in ``[lo, hi]`` (no sign games, no spaces), else ``error``."""
    text = arg(raw)
    if not text or not (text.isdigit() or (text[:1] == b"-" and text[1:].isdigit())):
        raise ReplyError(error)
    value = int(text)
    if not lo <= value <= hi:
        raise ReplyError(error)
    return value


def info_text(rows: list[tuple[str, object]]) -> bytes:
    """``key:value\\r\\n`` lines (KV.PREFIX.INFO, V.INFO, STATE.INFO)."""
    return "".join(f"{key}:{value}\r\n" for key, value in rows).encode()
