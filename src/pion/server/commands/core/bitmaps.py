"""Bitmap commands on strings: GETBIT SETBIT BITCOUNT BITPOS BITOP, with Redis 8.2's DIFF, DIFF1,
ANDOR and ONE (BITFIELD is in ``bitfield``).

Bit 0 is the most significant bit of the first byte, as in Redis. Large strings are counted and
combined with numpy (``bitwise_count``, vectorised AND/OR/XOR/NOT); BITPOS scans for the first
interesting byte with a compiled byte-class regex, which runs in C without copying.

The argument and lookup order follows Redis 7.0: BITCOUNT and BITPOS answer for a missing key
before looking at the range arguments (7.2 reports a bad range even then).
"""

from __future__ import annotations

import re

import numpy as np

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.registry import command

BIT_OFFSET_ERROR = "ERR bit offset is not an integer or out of range"
_NUMPY_MIN = 4096  # below this many bytes plain Python integers are faster
_NOT_ZERO = re.compile(rb"[^\x00]")
_NOT_ONES = re.compile(rb"[^\xff]")


def parse_bit_offset(ctx: Ctx, raw: bytes, hash_bits: int = 0) -> int:
    """Redis's getBitOffsetFromArgument: ``#n`` means n * hash_bits (BITFIELD only);
    the byte it lands in must be below ``proto-max-bulk-len``."""
    use_hash = hash_bits > 0 and raw[:1] == b"#"
    offset = parse_int(raw[1:] if use_hash else raw, BIT_OFFSET_ERROR)
    if use_hash:
        offset *= hash_bits
    if offset < 0 or (offset >> 3) >= ctx.server.settings.proto_max_bulk_len:
        raise ReplyError(BIT_OFFSET_ERROR)
    return offset


def popcount(data: bytes | memoryview) -> int:
    if len(data) < _NUMPY_MIN:
        return int.from_bytes(data, "big").bit_count()
    return int(np.bitwise_count(np.frombuffer(data, dtype=np.uint8)).sum(dtype=np.int64))


@command("GETBIT", 3, "readonly fast", keys=(1, 1, 1), categories="@read @bitmap @fast", group="bitmap",
         since="2.2.0")
def getbit(ctx: Ctx, argv: list[bytes]):
    """GETBIT key offset"""
    offset = parse_bit_offset(ctx, argv[2])
    value = ctx.db.get_typed(argv[1], bytes)
    byte = offset >> 3
    if value is None or byte >= len(value):
        return 0
    return (value[byte] >> (7 - (offset & 7))) & 1


@command("SETBIT", 4, "write denyoom", keys=(1, 1, 1), categories="@write @bitmap @slow", group="bitmap",
         since="2.2.0")
def setbit(ctx: Ctx, argv: list[bytes]):
    """SETBIT key offset value

    Grows the string with zero bytes; keeps the TTL. Answers the old bit. Setting a bit to the
    value it already has (without growing) changes nothing and is not logged.
    """
    offset = parse_bit_offset(ctx, argv[2])
    on = parse_int(argv[3], "ERR bit is not an integer or out of range")
    if on & ~1:
        raise ReplyError("ERR bit is not an integer or out of range")
    key = argv[1]
    old = ctx.db.get_typed(key, bytes)
    byte, shift = offset >> 3, 7 - (offset & 7)
    size = 0 if old is None else len(old)
    previous = old[byte] >> shift & 1 if byte < size else 0
    if byte < size and previous == on:
        return previous
    data = bytearray(old or b"")
    if byte >= size:
        data.extend(bytes(byte + 1 - size))
    data[byte] = (data[byte] & ~(1 << shift)) | (on << shift)
    ctx.db.set(key, bytes(data), keep_ttl=True)
    ctx.dirty()
    ctx.notify("$", "setbit", key)
    return previous


def _bit_range(start: int, end: int | None, is_bit: bool, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive in bits, clipped to the string, or None when empty.

    ``start``/``end`` count bytes unless ``is_bit``; a missing end means the end of the string.
    """
    total = size * 8 if is_bit else size
    if end is None:
        end = total - 1
    if start < 0:
        start = max(total + start, 0)
    if end < 0:
        end = max(total + end, 0)
    end = min(end, total - 1)
    if start > end:
        return None
    return (start, end) if is_bit else (start * 8, end * 8 + 7)


def _parse_unit(raw: bytes | None) -> bool:
    if raw is None:
        return False
    unit = raw.upper()
    if unit not in (b"BIT", b"BYTE"):
        raise ReplyError(errors.SYNTAX)
    return unit == b"BIT"


@command("BITCOUNT", -2, "readonly", keys=(1, 1, 1), categories="@read @bitmap @slow", group="bitmap",
         since="2.6.0")
def bitcount(ctx: Ctx, argv: list[bytes]):
    """BITCOUNT key [start end [BYTE | BIT]]"""
    value = ctx.db.get_typed(argv[1], bytes)
    if value is None:
        return 0
    argc = len(argv)
    if argc == 2:
        return popcount(value)
    if argc not in (4, 5):
        raise ReplyError(errors.SYNTAX)
    start, end = parse_int(argv[2]), parse_int(argv[3])
    if start < 0 and end < 0 and start > end:
        return 0
    span = _bit_range(start, end, _parse_unit(argv[4] if argc == 5 else None), len(value))
    if span is None:
        return 0
    first, last = span
    sbyte, ebyte = first >> 3, last >> 3
    count = popcount(memoryview(value)[sbyte:ebyte + 1])
    count -= (value[sbyte] >> (8 - (first & 7))).bit_count()  # bits before the range
    count -= (value[ebyte] & ((1 << (7 - (last & 7))) - 1)).bit_count()  # bits after it
    return count


@command("BITPOS", -3, "readonly", keys=(1, 1, 1), categories="@read @bitmap @slow", group="bitmap",
         since="2.8.7")
def bitpos(ctx: Ctx, argv: list[bytes]):
    """BITPOS key bit [start [end [BYTE | BIT]]]

    A missing key is all zeros. Looking for 0 without an explicit end treats the string as
    zero-padded on the right; with an explicit end, not found is -1.
    """
    bit = parse_int(argv[2])
    if bit not in (0, 1):
        raise ReplyError("ERR The bit argument must be 1 or 0.")
    value = ctx.db.get_typed(argv[1], bytes)
    if value is None:
        return -1 if bit else 0
    argc = len(argv)
    if argc > 6:
        raise ReplyError(errors.SYNTAX)
    if argc == 3:
        span = (0, len(value) * 8 - 1) if value else None
    else:  # Redis 7.0 parses start, then the unit, then end
        start = parse_int(argv[3])
        is_bit = _parse_unit(argv[5] if argc == 6 else None)
        end = parse_int(argv[4]) if argc >= 5 else None
        span = _bit_range(start, end, is_bit, len(value))
    if span is None:
        return -1
    found = first_bit(value, bit, *span)
    if found >= 0 or bit == 1:
        return found
    return -1 if argc >= 5 else span[1] + 1


def first_bit(data: bytes, bit: int, first: int, last: int) -> int:
    """The first position in bits [first, last] whose bit equals ``bit``, or -1."""
    sbyte, ebyte = first >> 3, last >> 3
    for pos in range(first, min(last, sbyte * 8 + 7) + 1):  # the partial first byte
        if (data[pos >> 3] >> (7 - (pos & 7))) & 1 == bit:
            return pos
    if ebyte > sbyte + 1:
        match = (_NOT_ZERO if bit else _NOT_ONES).search(data, sbyte + 1, ebyte)
        if match is not None:
            byte = match.start()
            value = data[byte] if bit else data[byte] ^ 0xFF
            return byte * 8 + 8 - value.bit_length()
    if ebyte > sbyte:
        for pos in range(ebyte * 8, last + 1):  # the last byte
            if (data[pos >> 3] >> (7 - (pos & 7))) & 1 == bit:
                return pos
    return -1


_BITOPS = (b"AND", b"OR", b"XOR", b"NOT", b"DIFF", b"DIFF1", b"ANDOR", b"ONE")
#: Redis 8.2's operations of a first key against the union of the others
_AGAINST_REST = (b"DIFF", b"DIFF1", b"ANDOR")


@command("BITOP", -4, "write denyoom", keys=(2, -1, 1), categories="@write @bitmap @slow", group="bitmap",
         since="2.6.0")
def bitop(ctx: Ctx, argv: list[bytes]):
    """BITOP <AND | OR | XOR | NOT | DIFF | DIFF1 | ANDOR | ONE> destkey key [key ...]

    Shorter inputs (and missing keys) count as zero-padded. An empty result deletes destkey.
    Answers the length of the result. Redis 8.2 added DIFF (X and not any other), DIFF1 (not X
    and any other), ANDOR (X and any other), each with at least two source keys, and ONE (the
    bits set in exactly one key).
    """
    op = argv[1].upper()
    if op not in _BITOPS:
        raise ReplyError(errors.SYNTAX)
    if op == b"NOT" and len(argv) != 4:
        raise ReplyError("ERR BITOP NOT must be called with a single source key.")
    if op in _AGAINST_REST and len(argv) < 5:
        raise ReplyError(f"ERR BITOP {op.decode()} must be called with at least two source keys.")
    sources = [ctx.db.get_typed(key, bytes) or b"" for key in argv[3:]]
    size = max(len(s) for s in sources)
    dest = argv[2]
    if size == 0:
        if ctx.db.delete(dest):
            ctx.dirty()
            ctx.notify("g", "del", dest)
        return 0
    ctx.db.set(dest, combine(op, sources, size))
    ctx.dirty()
    ctx.notify("$", "set", dest)
    return size


def combine(op: bytes, sources: list[bytes], size: int) -> bytes:
    """The operation over zero-padded sources, ``size`` bytes long: Python integers for small
    inputs, numpy arrays (vectorised) for large ones."""
    if size < _NUMPY_MIN:
        mask = (1 << (size * 8)) - 1
        values = [int.from_bytes(s.ljust(size, b"\x00"), "big") for s in sources]
        return _fold(op, values, lambda value: value ^ mask).to_bytes(size, "big")
    arrays = [np.frombuffer(s.ljust(size, b"\x00"), dtype=np.uint8) for s in sources]
    return _fold(op, arrays, np.invert).tobytes()


def _fold(op: bytes, values: list, invert):
    """One operation over ints or uint8 arrays alike (``&``, ``|``, ``^``; ``invert`` is NOT)."""
    first, rest = values[0], values[1:]
    if op == b"NOT":
        return invert(first)
    if op in _AGAINST_REST:
        union = rest[0]
        for other in rest[1:]:
            union = union | other
        if op == b"DIFF":
            return first & invert(union)
        return invert(first) & union if op == b"DIFF1" else first & union
    result = first
    if op == b"ONE":
        seen_twice = first ^ first
        for other in rest:
            seen_twice = seen_twice | (result & other)
            result = (result ^ other) & invert(seen_twice)
        return result
    for other in rest:
        result = result & other if op == b"AND" else result | other if op == b"OR" else result ^ other
    return result
