"""BITFIELD and BITFIELD_RO: signed and unsigned integers of 1..64 bits (u63 at most) at any bit
offset of a string, with Redis's overflow policies WRAP (default), SAT and FAIL.

All operations are parsed (and every argument error reported) before any is run, as in Redis;
the string is grown once to the farthest bit a SET or INCRBY reaches.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.commands.core.bitmaps import parse_bit_offset
from pion.server.context import Ctx
from pion.server.registry import command

TYPE_ERROR = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."
_ARGS_AFTER = {b"GET": 2, b"SET": 3, b"INCRBY": 3}
_OVERFLOWS = (b"WRAP", b"SAT", b"FAIL")
_U64 = (1 << 64) - 1


@dataclass(slots=True)
class BitfieldOp:
    op: bytes  # GET, SET or INCRBY
    signed: bool
    bits: int
    offset: int
    value: int  # SET value or INCRBY increment
    overflow: bytes  # WRAP, SAT or FAIL


@command("BITFIELD", -2, "write denyoom", keys=(1, 1, 1), categories="@write @bitmap @slow", group="bitmap",
         since="3.2.0")
def bitfield(ctx: Ctx, argv: list[bytes]):
    """BITFIELD key [GET encoding offset | [OVERFLOW <WRAP | SAT | FAIL>] <SET encoding offset value | INCRBY encoding offset increment> ...]

    Answers one entry per GET/SET/INCRBY: the value read, the old value (SET), the new value
    (INCRBY), or nil where OVERFLOW FAIL refused the write.
    """
    return _bitfield(ctx, argv, read_only=False)


@command("BITFIELD_RO", -2, "readonly fast", keys=(1, 1, 1), categories="@read @bitmap @fast",
         group="bitmap", since="6.0.0")
def bitfield_ro(ctx: Ctx, argv: list[bytes]):
    """BITFIELD_RO key [GET encoding offset [GET encoding offset ...]]"""
    return _bitfield(ctx, argv, read_only=True)


def _bitfield(ctx: Ctx, argv: list[bytes], read_only: bool):
    ops = parse_ops(ctx, argv)
    writes = [op for op in ops if op.op != b"GET"]
    if writes and read_only:
        raise ReplyError("ERR BITFIELD_RO only supports the GET subcommand")
    key = argv[1]
    old = ctx.db.get_typed(key, bytes)
    if not writes:
        data = old or b""
        return [read_field(data, op.offset, op.bits, op.signed) for op in ops]
    need = (max(op.offset + op.bits - 1 for op in writes) >> 3) + 1
    data = bytearray(old or b"")
    grown = len(data) < need
    if grown:
        data.extend(bytes(need - len(data)))
    replies = [run_op(data, op) for op in ops]
    new = bytes(data)
    if old is None or new != old:
        ctx.db.set(key, new, keep_ttl=True)
        ctx.dirty()
        ctx.notify("$", "setbit", key)
    return replies


def parse_ops(ctx: Ctx, argv: list[bytes]) -> list[BitfieldOp]:
    ops: list[BitfieldOp] = []
    overflow = b"WRAP"
    j, argc = 2, len(argv)
    while j < argc:
        name = argv[j].upper()
        remaining = argc - j - 1
        if name == b"OVERFLOW" and remaining >= 1:
            overflow = argv[j + 1].upper()
            if overflow not in _OVERFLOWS:
                raise ReplyError("ERR Invalid OVERFLOW type specified")
            j += 2
            continue
        if remaining < _ARGS_AFTER.get(name, argc):
            raise ReplyError(errors.SYNTAX)
        signed, bits = parse_type(argv[j + 1])
        offset = parse_bit_offset(ctx, argv[j + 2], bits)
        value = parse_int(argv[j + 3]) if name != b"GET" else 0
        ops.append(BitfieldOp(name, signed, bits, offset, value, overflow))
        j += 1 + _ARGS_AFTER[name]
    return ops


def parse_type(raw: bytes) -> tuple[bool, int]:
    """``i1``..``i64`` or ``u1``..``u63`` (lower-case sign letter only, as in Redis)."""
    sign = raw[:1]
    if sign not in (b"i", b"u"):
        raise ReplyError(TYPE_ERROR)
    bits = parse_int(raw[1:], TYPE_ERROR)
    if bits < 1 or bits > (64 if sign == b"i" else 63):
        raise ReplyError(TYPE_ERROR)
    return sign == b"i", bits


def read_field(data: bytes | bytearray, offset: int, bits: int, signed: bool) -> int:
    """The integer at bits [offset, offset+bits); bits past the end of the string read as 0."""
    first, last = offset >> 3, (offset + bits - 1) >> 3
    chunk = bytes(data[first:last + 1]).ljust(last - first + 1, b"\x00")
    value = int.from_bytes(chunk, "big") >> ((last + 1) * 8 - offset - bits)
    value &= (1 << bits) - 1
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value


def write_field(data: bytearray, offset: int, bits: int, value: int) -> None:
    first, last = offset >> 3, (offset + bits - 1) >> 3
    shift = (last + 1) * 8 - offset - bits
    mask = ((1 << bits) - 1) << shift
    word = int.from_bytes(data[first:last + 1], "big")
    word = (word & ~mask) | ((value << shift) & mask)
    data[first:last + 1] = word.to_bytes(last - first + 1, "big")


def run_op(data: bytearray, op: BitfieldOp) -> int | None:
    """One operation on the (already grown) string; None when OVERFLOW FAIL refuses it."""
    old = read_field(data, op.offset, op.bits, op.signed)
    if op.op == b"GET":
        return old
    if op.op == b"INCRBY":
        value, incr = old, op.value
    else:  # SET checks the new value itself; unsigned types see it cast to uint64 first
        value, incr = (op.value if op.signed else op.value & _U64), 0
    new = fit(value, incr, op.bits, op.signed, op.overflow)
    if new is None:
        return None
    write_field(data, op.offset, op.bits, new)
    return new if op.op == b"INCRBY" else old


def fit(value: int, incr: int, bits: int, signed: bool, overflow: bytes) -> int | None:
    """``value + incr`` if it fits the type, else wrapped, saturated, or None (FAIL)."""
    direction = _overflow_direction(value, incr, bits, signed)
    if direction == 0:
        return value + incr
    if overflow == b"FAIL":
        return None
    if overflow == b"SAT":
        if signed:
            return (1 << (bits - 1)) - 1 if direction > 0 else -(1 << (bits - 1))
        return (1 << bits) - 1 if direction > 0 else 0
    wrapped = (value + incr) & ((1 << bits) - 1)
    return wrapped - (1 << bits) if signed and wrapped >> (bits - 1) else wrapped


def _overflow_direction(value: int, incr: int, bits: int, signed: bool) -> int:
    """Redis's check(Un)signedBitfieldOverflow: 1 over, -1 under, 0 fits.

    Kept to the letter, int64 wrap-around included: for SET of a signed value near INT64_MIN,
    ``max - value`` wraps negative and Redis reports an overflow upwards (SAT gives the maximum).
    """
    if not signed:
        high = (1 << bits) - 1
        if value > high or (incr > 0 and incr > high - value):
            return 1
        return -1 if incr < 0 and incr < -value else 0
    high = (1 << 63) - 1 if bits == 64 else (1 << (bits - 1)) - 1
    low = -high - 1
    max_incr, min_incr = _int64(high - value), _int64(low - value)
    if value > high or (bits != 64 and incr > max_incr) or (value >= 0 and 0 < incr and incr > max_incr):
        return 1
    if value < low or (bits != 64 and incr < min_incr) or (value < 0 and incr < 0 and incr < min_incr):
        return -1
    return 0


def _int64(value: int) -> int:
    return ((value + (1 << 63)) & _U64) - (1 << 63)
