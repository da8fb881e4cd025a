"""HyperLogLog in Redis's exact byte layout, so PFADD results are byte-identical to Redis's GET.

A HyperLogLog is a plain string value: a 16-byte header (``HYLL``, encoding, 3 unused bytes,
the cached cardinality as 8 little-endian bytes whose top bit marks it stale) and then either
the dense registers (16384 six-bit registers packed little-endian, 12288 bytes) or the sparse
run-length opcodes (ZERO ``00xxxxxx``, XZERO ``01xxxxxx xxxxxxxx``, VAL ``1vvvvvxx``). Elements
are hashed with MurmurHash64A (seed 0xadc83b19) and counted with Ertl's improved estimator, as
Redis 5+ does, so counts match Redis's too. The sparse updates follow Redis's split-and-merge
steps one for one (on a list of opcodes instead of bytes): that is what keeps the bytes equal.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

P = 14
REGISTERS = 1 << P
Q = 64 - P
HEADER = 16
DENSE_SIZE = HEADER + (REGISTERS * 6 + 7) // 8
DENSE, SPARSE = 0, 1
MAGIC = b"HYLL"
ALPHA_INF = 0.721347520444481703680
DEFAULT_SPARSE_MAX_BYTES = 3000

_M64 = (1 << 64) - 1
_MURMUR_M = 0xC6A4A7935BD1E995
_SEED = 0xADC83B19
_WEIGHTS = np.array([1, 2, 4, 8, 16, 32], dtype=np.uint8)

# opcode kinds in the list form of the sparse representation: (kind, value, run length)
_ZERO, _XZERO, _VAL = 0, 1, 2


class CorruptHLL(ValueError):
    """The sparse representation does not describe exactly 16384 registers."""


def murmurhash64a(data: bytes, seed: int = _SEED) -> int:
    """Redis's MurmurHash64A (little-endian reads), the hash HLL registers are chosen by."""
    length = len(data)
    m = _MURMUR_M
    h = (seed ^ (length * m)) & _M64
    tail = length & ~7
    for pos in range(0, tail, 8):
        k = (int.from_bytes(data[pos : pos + 8], "little") * m) & _M64
        k ^= k >> 47
        k = (k * m) & _M64
        h = ((h ^ k) * m) & _M64
    if length & 7:
        h ^= int.from_bytes(data[tail:], "little")
        h = (h * m) & _M64
    h ^= h >> 47
    h = (h * m) & _M64
    return h ^ (h >> 47)


def pattern(element: bytes) -> tuple[int, int]:
    """(register index, run length of zeros + 1) for one element, as hllPatLen."""
    hashed = murmurhash64a(element)
    index = hashed & (REGISTERS - 1)
    rest = (hashed >> P) | (1 << Q)
    return index, (rest & -rest).bit_length()


# -- header ----------------------------------------------------------------------------------


def new_hll() -> bytes:
    """An empty sparse HLL (XZERO covering all registers), as createHLLObject."""
    return MAGIC + bytes([SPARSE]) + bytes(11) + bytes([0x7F, 0xFF])


def is_hll(value: bytes) -> bool:
    """The checks of isHLLObjectOrReply: size, magic, known encoding, exact dense size."""
    if len(value) < HEADER or value[:4] != MAGIC or value[4] > SPARSE:
        return False
    return value[4] != DENSE or len(value) == DENSE_SIZE


def cached_count(value: bytes) -> int | None:
    if value[15] & 0x80:
        return None
    return int.from_bytes(value[8:16], "little")


def with_cached_count(value: bytes, card: int) -> bytes:
    return value[:8] + card.to_bytes(8, "little") + value[16:]


def _invalidate(buf: bytearray) -> None:
    buf[15] |= 0x80


# -- dense registers -------------------------------------------------------------------------


def _dense_get(buf: bytearray, index: int) -> int:
    bit = index * 6
    pos = HEADER + (bit >> 3)
    shift = bit & 7
    return ((buf[pos] | (buf[pos + 1] << 8)) >> shift) & 63


def _dense_set(buf: bytearray, index: int, value: int) -> None:
    bit = index * 6
    pos = HEADER + (bit >> 3)
    shift = bit & 7
    word = (buf[pos] | (buf[pos + 1] << 8)) & ~(63 << shift) | (value << shift)
    buf[pos] = word & 0xFF
    buf[pos + 1] = word >> 8


def dense_registers(value: bytes) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(value, dtype=np.uint8, offset=HEADER), bitorder="little")
    return (bits[: REGISTERS * 6].reshape(REGISTERS, 6) @ _WEIGHTS).astype(np.uint8)


def _pack_dense(header: bytes, registers: np.ndarray) -> bytes:
    bits = ((registers[:, None] >> np.arange(6, dtype=np.uint8)) & 1).astype(np.uint8)
    return bytes(header[:4]) + bytes([DENSE]) + bytes(header[5:16]) + np.packbits(bits.ravel(), bitorder="little").tobytes()


# -- sparse opcodes --------------------------------------------------------------------------


def _parse_sparse(value: bytes) -> tuple[list[int], list[tuple[int, int, int]]]:
    """(first register of each opcode, opcodes); CorruptHLL unless they cover all registers."""
    starts: list[int] = []
    ops: list[tuple[int, int, int]] = []
    pos, end, first = HEADER, len(value), 0
    while pos < end:
        byte = value[pos]
        starts.append(first)
        if byte & 0x80:
            op = (_VAL, ((byte >> 2) & 0x1F) + 1, (byte & 3) + 1)
            pos += 1
        elif byte & 0x40:
            if pos + 1 >= end:
                raise CorruptHLL("truncated XZERO")
            op = (_XZERO, 0, (((byte & 0x3F) << 8) | value[pos + 1]) + 1)
            pos += 2
        else:
            op = (_ZERO, 0, (byte & 0x3F) + 1)
            pos += 1
        ops.append(op)
        first += op[2]
    if first != REGISTERS:
        raise CorruptHLL("sparse runs do not cover the registers")
    return starts, ops


def _op_bytes(op: tuple[int, int, int]) -> bytes:
    kind, val, run = op
    if kind == _VAL:
        return bytes([0x80 | ((val - 1) << 2) | (run - 1)])
    if kind == _XZERO:
        return bytes([0x40 | ((run - 1) >> 8), (run - 1) & 0xFF])
    return bytes([run - 1])


def _zero_run(run: int) -> tuple[int, int, int]:
    return (_XZERO, 0, run) if run > 64 else (_ZERO, 0, run)


class _Sparse:
    """A sparse HLL being edited: hllSparseSet on a list of opcodes, then back to bytes."""

    __slots__ = ("header", "starts", "ops", "size")

    def __init__(self, value: bytes) -> None:
        self.header = bytearray(value[:HEADER])
        self.starts, self.ops = _parse_sparse(value)
        self.size = len(value)

    def set(self, index: int, count: int, max_bytes: int) -> int:
        """1 if the register grew, 0 if not, -1 if the HLL must go dense first."""
        if count > 32:
            return -1
        starts, ops = self.starts, self.ops
        at = bisect_right(starts, index) - 1
        kind, val, run = ops[at]
        first = starts[at]
        if kind == _VAL and val >= count:
            return 0
        if run == 1 and kind != _XZERO:
            ops[at] = (_VAL, count, 1)
        else:
            seq = self._split(kind, val, first, first + run - 1, index, count)
            delta = sum(2 if op[0] == _XZERO else 1 for op in seq) - (2 if kind == _XZERO else 1)
            if delta > 0 and self.size + delta > max_bytes:
                return -1
            self.size += delta
            ops[at : at + 1] = seq
            seq_starts, pos = [], first
            for op in seq:
                seq_starts.append(pos)
                pos += op[2]
            starts[at : at + 1] = seq_starts
        self._merge(at - 1 if at > 0 else 0)
        return 1

    @staticmethod
    def _split(kind: int, val: int, first: int, last: int, index: int, count: int) -> list[tuple[int, int, int]]:
        seq = []
        if index != first:
            seq.append((_VAL, val, index - first) if kind == _VAL else _zero_run(index - first))
        seq.append((_VAL, count, 1))
        if index != last:
            seq.append((_VAL, val, last - index) if kind == _VAL else _zero_run(last - index))
        return seq

    def _merge(self, at: int) -> None:
        """Redis's step 4: merge adjacent equal VAL opcodes, scanning 5 opcodes from ``at``."""
        ops, starts = self.ops, self.starts
        scan = 5
        while at < len(ops) and scan > 0:
            scan -= 1
            kind, val, run = ops[at]
            if kind != _VAL:
                at += 1
                continue
            if at + 1 < len(ops):
                nkind, nval, nrun = ops[at + 1]
                if nkind == _VAL and nval == val and run + nrun <= 4:
                    ops[at] = (_VAL, val, run + nrun)
                    del ops[at + 1]
                    del starts[at + 1]
                    self.size -= 1
                    continue
            at += 1

    def registers(self) -> np.ndarray:
        regs = np.zeros(REGISTERS, dtype=np.uint8)
        for first, (kind, val, run) in zip(self.starts, self.ops, strict=True):
            if kind == _VAL:
                regs[first : first + run] = val
        return regs

    def to_bytes(self) -> bytes:
        return bytes(self.header) + b"".join(_op_bytes(op) for op in self.ops)

    def to_dense(self) -> bytearray:
        """hllSparseToDense: header copied (cached count too), registers filled, one pad byte."""
        return bytearray(_pack_dense(bytes(self.header), self.registers())) + b"\x00"


# -- commands' building blocks ---------------------------------------------------------------


def add(value: bytes, elements: list[bytes], max_bytes: int = DEFAULT_SPARSE_MAX_BYTES) -> tuple[bytes, int]:
    """PFADD: the new string and how many elements changed a register (CorruptHLL if bad)."""
    changed = 0
    sparse = _Sparse(value) if value[4] == SPARSE else None
    dense = None if sparse is not None else bytearray(value) + b"\x00"
    for element in elements:
        index, count = pattern(element)
        if sparse is not None:
            result = sparse.set(index, count, max_bytes)
            if result >= 0:
                changed += result
                continue
            dense = sparse.to_dense()
            sparse = None
        if _dense_get(dense, index) < count:  # type: ignore[arg-type]
            _dense_set(dense, index, count)  # type: ignore[arg-type]
            changed += 1
    if sparse is not None:
        if not changed:
            return value, 0
        sparse.header[15] |= 0x80
        return sparse.to_bytes(), changed
    assert dense is not None
    if changed:
        _invalidate(dense)
    return bytes(dense[:-1]), changed


def registers(value: bytes) -> np.ndarray:
    """All 16384 register values (CorruptHLL for a sparse string that does not add up)."""
    if value[4] == DENSE:
        return dense_registers(value)
    return _Sparse(value).registers()


def estimate(regs: np.ndarray) -> int:
    """Ertl's estimator over the register histogram (hllCount)."""
    histo = np.bincount(regs, minlength=Q + 2).tolist()
    m = float(REGISTERS)
    z = m * _tau((m - histo[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += histo[j]
        z *= 0.5
    z += m * _sigma(histo[0] / m)
    estimate_value = ALPHA_INF * m * m / z
    return int(math.floor(estimate_value + 0.5))


def count(value: bytes) -> int:
    return estimate(registers(value))


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        previous = z
        z += x * y
        y += y
        if previous == z:
            return z


def _tau(x: float) -> float:
    if x == 0.0 or x == 1.0:
        return 0.0
    y, z = 1.0, 1 - x
    while True:
        x = math.sqrt(x)
        previous = z
        y *= 0.5
        z -= (1 - x) ** 2 * y
        if previous == z:
            return z / 3


def merge_into(dest: bytes, maxima: np.ndarray, use_dense: bool, max_bytes: int = DEFAULT_SPARSE_MAX_BYTES) -> bytes:
    """PFMERGE's write: raise ``dest`` to ``maxima`` register by register, in index order."""
    sparse = _Sparse(dest) if dest[4] == SPARSE else None
    if sparse is not None and use_dense:
        dense: bytearray | None = sparse.to_dense()
        sparse = None
    else:
        dense = None if sparse is not None else bytearray(dest) + b"\x00"
    if dense is not None:
        regs = np.maximum(dense_registers(bytes(dense[:-1])), maxima)
        out = bytearray(_pack_dense(bytes(dense[:HEADER]), regs))
        _invalidate(out)
        return bytes(out)
    assert sparse is not None
    for index in np.flatnonzero(maxima).tolist():
        if sparse.set(index, int(maxima[index]), max_bytes) < 0:
            dense = sparse.to_dense()
            regs = np.maximum(dense_registers(bytes(dense[:-1])), maxima)
            out = bytearray(_pack_dense(bytes(dense[:HEADER]), regs))
            _invalidate(out)
            return bytes(out)
    sparse.header[15] |= 0x80
    return sparse.to_bytes()
