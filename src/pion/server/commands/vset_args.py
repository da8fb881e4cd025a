"""What the vector-set commands share: the vector argument, the key lookup and Redis 8's
number format (not a command family; see vsets.py and vsets_read.py)."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import HumanDouble
from pion.server.args import parse_float, parse_int
from pion.server.context import Ctx
from pion.vector.vset import VectorSet
from pion.vector.vset.vectorset import MAX_DIM

INVALID_VECTOR = "ERR invalid vector specification"


def parse_vector(argv: list[bytes], start: int, allow_reduce: bool) -> tuple[np.ndarray, int, int]:
    """``[REDUCE dim] FP32 blob | VALUES n v...`` at ``start``: (vector, reduce dim or 0, how
    many arguments it took), with vset.c's checks; a non-finite component is refused too."""
    consumed = 0
    reduce_dim = 0
    if allow_reduce and len(argv) > start + 2 and argv[start].upper() == b"REDUCE":
        reduce_dim = parse_int(argv[start + 1], INVALID_VECTOR)
        if reduce_dim <= 0:
            raise ReplyError(INVALID_VECTOR)
        start += 2
        consumed += 2
    if start >= len(argv):
        raise ReplyError(INVALID_VECTOR)
    kind = argv[start].upper()
    if kind == b"FP32":
        if len(argv) < start + 2:
            raise ReplyError(INVALID_VECTOR)
        blob = argv[start + 1]
        if len(blob) % 4 or len(blob) < 4 or len(blob) // 4 > MAX_DIM:
            raise ReplyError(INVALID_VECTOR)
        # a read-only view of the argument (a bytes object owns its memory; anything else is
        # copied once): every consumer normalizes or projects it into a new array
        vec = np.frombuffer(blob if blob.__class__ is bytes else bytes(blob), dtype="<f4")
        consumed += 2
    elif kind == b"VALUES":
        if len(argv) < start + 2:
            raise ReplyError(INVALID_VECTOR)
        dim = parse_int(argv[start + 1], INVALID_VECTOR)
        if not 1 <= dim <= MAX_DIM or len(argv) < start + 2 + dim:
            raise ReplyError(INVALID_VECTOR)
        vec = np.array([parse_float(raw, INVALID_VECTOR) for raw in argv[start + 2 : start + 2 + dim]],
                       dtype=np.float32)
        consumed += dim + 2
    else:
        raise ReplyError(INVALID_VECTOR)
    if reduce_dim > vec.size or not np.isfinite(vec).all():
        raise ReplyError(INVALID_VECTOR)
    return vec, reduce_dim, consumed


def get_set(ctx: Ctx, key: bytes) -> VectorSet | None:
    """The vector set at ``key``, None if absent; WRONGTYPE for another type."""
    value = ctx.db.get(key)
    if value is None or value.__class__ is VectorSet:
        return value
    raise ReplyError(errors.WRONGTYPE)


def double(value: float) -> HumanDouble:
    """A double as Redis 8 writes it (fpconv_dtoa: the shortest digits that read back the same,
    plain notation for exponents from -6 to 20, else ``1.5e-7``)."""
    if math.isnan(value):
        return HumanDouble(b"nan")
    if math.isinf(value):
        return HumanDouble(b"inf" if value > 0 else b"-inf")
    if value == 0:
        return HumanDouble(b"-0" if math.copysign(1.0, value) < 0 else b"0")
    parts = Decimal(repr(abs(value))).as_tuple()
    digits, k = list(parts.digits), int(parts.exponent)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        k += 1
    text = "".join(map(str, digits))
    return HumanDouble(("-" if value < 0 else "").encode() + _emit(text, k))


def _emit(digits: str, k: int) -> bytes:
    """fpconv's emit_digits: ``digits`` times 10**k."""
    n = len(digits)
    exp = abs(k + n - 1)
    if k >= 0 and exp < n + 7:
        return (digits + "0" * k).encode()
    if k < 0 and (k > -7 or exp < 4):
        offset = n + k
        if offset <= 0:
            return ("0." + "0" * -offset + digits).encode()
        return (digits[:offset] + "." + digits[offset:]).encode()
    digits = digits[:18]
    head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if k + n - 1 < 0 else "+"
    return f"{head}e{sign}{exp}".encode()
