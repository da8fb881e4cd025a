"""The codec contract and the numpy helpers the block codecs share.

A codec turns a ``(rows, dim)`` float array into row-major bytes, ``bytes_per_row(dim)`` bytes a
row, and back. Rows are independent (every scale lives inside its row), so any run of rows can
be stored, sliced, shipped and decoded on its own: that is what lets the V-store keep rows
encoded and send them as they are (``FMT RAW``). All multi-byte numbers are little-endian.
"""

from __future__ import annotations

import numpy as np

F32 = np.dtype("<f4")
F16 = np.dtype("<f2")
U32 = np.dtype("<u4")
BLOCK = 32


class CodecError(ValueError):
    """A codec cannot take this input (a dim it cannot split into blocks, a wrong byte count)."""


class Codec:
    """One row encoding. Subclasses set ``name``, ``tag`` and ``block`` and fill the three hooks."""

    name = ""
    #: stable format tag (the reference's on-disk values, ours appended after them)
    tag = -1
    #: the row length must be a multiple of this
    block = 1
    #: every value is encoded on its own (a NaN or Inf stays in its place); False for the codecs
    #: whose scales are shared by a row or a block, which refuse non-finite input
    per_value = False

    def check_dim(self, dim: int) -> None:
        """Refuse a dim this codec cannot take (never switch to another codec silently)."""
        if dim < 1:
            raise CodecError(f"{self.name}: dim must be >= 1, got {dim}")
        if dim % self.block:
            raise CodecError(f"{self.name} needs a dim divisible by {self.block}, got {dim}")

    def bytes_per_row(self, dim: int) -> int:
        self.check_dim(dim)
        return self._row_bytes(dim)

    def encode(self, array: np.ndarray) -> bytes:
        """Encode ``(rows, dim)`` (or one ``(dim,)`` row) of floats; returns rows * bytes_per_row bytes."""
        rows = as_rows(array)
        self.check_dim(rows.shape[1])
        if rows.shape[0] == 0:
            return b""
        if not self.per_value and not np.isfinite(rows).all():
            row = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
            raise CodecError(f"{self.name} cannot encode NaN or Inf (row {row}): its scale is shared by "
                             f"{'the row' if self.block == 1 else 'a block'}, which would decode all NaN")
        return self._encode(rows)

    def decode(self, data: bytes | bytearray | memoryview, shape: tuple[int, ...] | int) -> np.ndarray:
        """Decode bytes into float32 of ``shape`` (``(rows, dim)`` or ``(dim,)``)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dim = shape[-1]
        rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
        expected = rows * self.bytes_per_row(dim)
        if len(data) != expected:
            raise CodecError(f"{self.name}: {len(data)} bytes for shape {shape}, expected {expected}")
        if rows == 0:
            return np.zeros(shape, dtype=np.float32)
        raw = np.frombuffer(data, dtype=np.uint8).reshape(rows, -1)
        return self._decode(raw, dim).reshape(shape)

    def zero_rows(self, rows: int, dim: int) -> bytes:
        """The encoding of ``rows`` rows of zeros (what the V-store answers for rows never stored)."""
        one = self.encode(np.zeros((1, dim), dtype=np.float32))
        return one * rows

    # -- hooks -------------------------------------------------------------------------------

    def _row_bytes(self, dim: int) -> int:
        raise NotImplementedError

    def _encode(self, rows: np.ndarray) -> bytes:
        raise NotImplementedError

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<codec {self.name}>"


def as_rows(array: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 ``(rows, dim)`` view or copy of the input."""
    arr = np.asarray(array)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    elif arr.ndim != 2:
        arr = arr.reshape(-1, arr.shape[-1])
    return np.ascontiguousarray(arr, dtype=np.float32)


def round_half_away(values: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero (the reference's rounding), exactly.

    ``trunc(x + copysign(0.5, x))`` is wrong in float32 (0.49999997 + 0.5 rounds up to 1.0), so
    split off the fraction, which is exact, and compare it.
    """
    whole = np.trunc(values)
    values -= whole
    whole += values >= 0.5
    whole -= values <= -0.5
    return whole


def block_absmax(blocks: np.ndarray) -> np.ndarray:
    """Per-block max |v| of ``(rows, nblocks, 32)``; returns ``(rows, nblocks)`` float32.

    Taken on the float32 bits with the sign cleared: for non-negative floats the integer order
    is the float order, and numpy's integer max over a short axis is twice as fast as abs + max.
    """
    bits = np.ascontiguousarray(blocks, dtype=np.float32).view(np.uint32) & np.uint32(0x7FFFFFFF)
    return bits.reshape(-1, blocks.shape[-1]).max(axis=1).view(np.float32).reshape(blocks.shape[:-1])


def half_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits (uint16), round to nearest even: bit-equal to ``astype(float16)``
    (NaN payloads too) and about twice as fast, since numpy converts one element at a time.

    Normals keep the top 10 mantissa bits with a round-to-even bias and rebias the exponent;
    values below 2^-14 become subnormals by adding 0.5 (which aligns their bits, rounding as the
    FPU does); 65520 and up round to infinity.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    magnitude = bits & np.uint32(0x7FFFFFFF)
    out = magnitude + np.uint32(0xC8000FFF)  # exponent 127 -> 15 (mod 2^32), plus the rounding bias
    out += (magnitude >> 13) & np.uint32(1)
    out >>= 13
    large = magnitude >= np.uint32(0x47800000)
    if large.any():
        top = magnitude[large]
        nan = top > np.uint32(0x7F800000)
        payload = np.where(nan, np.maximum((top & np.uint32(0x7FFFFF)) >> 13, np.uint32(1)), np.uint32(0))
        out[large] = np.uint32(0x7C00) + payload
    small = magnitude < np.uint32(0x38800000)
    if small.any():
        aligned = magnitude[small].view(np.float32) + np.float32(0.5)
        out[small] = aligned.view(np.uint32) - np.uint32(0x3F000000)
    out |= (bits >> 16) & np.uint32(0x8000)
    return out.astype(np.uint16)


def fold(values: np.ndarray, op) -> np.ndarray:
    """Reduce the last axis (a power of two) by halving it: much faster than a reduction over
    a short contiguous axis, which numpy runs one small inner loop per block."""
    while values.shape[-1] > 1:
        half = values.shape[-1] // 2
        values = op(values[..., :half], values[..., half:])
    return values[..., 0]


def pack_block_rows(norm_sq: np.ndarray | None, scales: np.ndarray, payload: np.ndarray) -> bytes:
    """Lay out ``[f32 norm_sq][nblocks x ([f16 scale][payload])]`` per row.

    ``scales`` is ``(rows, nblocks)`` float, ``payload`` ``(rows, nblocks, P)`` uint8;
    ``norm_sq`` None leaves the 4-byte header out (the rope/fp8 hybrid's body).
    """
    rows, nblocks, width = payload.shape
    head = 0 if norm_sq is None else 4
    out = np.empty((rows, head + nblocks * (2 + width)), dtype=np.uint8)
    if norm_sq is not None:
        out[:, :4] = norm_sq.astype(F32).view(np.uint8).reshape(rows, 4)
    body = out[:, head:].reshape(rows, nblocks, 2 + width)
    body[:, :, :2] = scales.astype(F16).view(np.uint8).reshape(rows, nblocks, 2)
    body[:, :, 2:] = payload
    return out.tobytes()


def unpack_block_rows(raw: np.ndarray, dim: int, width: int, header: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of ``pack_block_rows``: ``(scales float32 (rows, nb), payload uint8 (rows, nb, width))``."""
    rows = raw.shape[0]
    nblocks = dim // BLOCK
    body = raw[:, 4:] if header else raw
    body = body.reshape(rows, nblocks, 2 + width)
    scales = np.ascontiguousarray(body[:, :, :2]).view(F16).reshape(rows, nblocks).astype(np.float32)
    return scales, body[:, :, 2:]


def sum_squares(values: np.ndarray) -> np.ndarray:
    """Per-row sum of squares of ``(rows, ...)`` (the block rows' ``norm_sq`` header)."""
    flat = values.reshape(values.shape[0], -1)
    return np.einsum("ij,ij->i", flat, flat, dtype=np.float32)
