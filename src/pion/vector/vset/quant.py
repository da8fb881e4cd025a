"""How a vector set stores its vectors, and the distance between them, as Redis 8 does.

Every vector is L2-normalized at insertion (its norm is kept so VEMB can give it back), so the
dot product is the cosine similarity and the distance is ``1 - cos`` in [0, 2]; a reply's score
is ``1 - distance / 2`` in [0, 1]. Three encodings, chosen when the set is created:

- ``F32`` (``NOQUANT``): the unit vector as float32.
- ``Q8`` (the default): per-vector symmetric int8. The largest absolute component maps to 127;
  the range (that component) is kept, so ``q * range / 127`` recovers a component. The distance
  is ``1 - dot(qa, qb) * (range_a / 127) * (range_b / 127)``; a zero vector is at distance 1.
- ``BIN``: one sign bit per component (set when the component is > 0), packed little-endian into
  64-bit words; the distance is ``2 * hamming / dim``.

A query is encoded the same way as a stored vector (Redis quantizes the query too). Rows are
numpy arrays; ``rng`` is the Q8 range (1 for the other encodings). Everything here is pure numpy
and safe to call from any thread.

Every distance is computed in a fixed order of operations, so that the compiled kernel
(``_kernel.pyx``, see ``kernel``) gives the same bits and so builds the same graph:

- Q8: the integer dot product (exact: float32 products of int8 values summed below 2^24, or
  float64 past 1,040 dimensions), then Redis's float32 ``1 - dot * ((range_a / 127) * (range_b
  / 127))`` (vset's ``vectors_distance_q8``, so scores equal Redis's).
- F32: the products in float64 (exact), summed in 8 lanes (lane ``j`` takes components
  ``j, j + 8, ...`` in order), the lanes added as ``((0+1)+(2+3))+((4+5)+(6+7))``, rounded to
  float32; ``1 - dot`` in float32. BLAS's order depends on the CPU and the row count.
- BIN: integers, then one float32 product.
"""

from __future__ import annotations

import numpy as np

F32, Q8, BIN = 0, 1, 2
#: the names VINFO and VEMB RAW answer (vset.c's vectorSetGetQuantName)
QUANT_NAMES = {F32: "f32", Q8: "int8", BIN: "bin"}
#: the VADD option that selects each encoding
QUANT_OPTIONS = {b"NOQUANT": F32, b"Q8": Q8, b"BIN": BIN}

_ROUND_HALF = np.float32(0.5)


def row_dtype(quant: int) -> np.dtype:
    return np.dtype({F32: "<f4", Q8: "i1", BIN: "<u8"}[quant])


def row_width(quant: int, dim: int) -> int:
    """Items per stored row: components (F32, Q8) or 64-bit words (BIN)."""
    return (dim + 63) // 64 if quant == BIN else dim


def row_bytes(quant: int, dim: int) -> int:
    return row_width(quant, dim) * row_dtype(quant).itemsize


def normalize(vec: np.ndarray) -> tuple[np.ndarray, float]:
    """The unit vector (float32, divided in float32 as Redis does, so NOQUANT's VEMB gives the
    input back) and the norm it had. A zero vector stays zero with norm 1, as in Redis (its
    norm is never set). A norm too large for float32 is summed in float64 instead."""
    unit = np.asarray(vec, dtype=np.float32).copy()
    norm = np.float32(np.sqrt(np.dot(unit, unit)))
    if not np.isfinite(norm):
        wide = unit.astype(np.float64)
        norm64 = float(np.sqrt(np.dot(wide, wide)))
        if not np.isfinite(norm64):
            return unit, 1.0
        return (wide / norm64).astype(np.float32), float(np.float32(norm64))
    if norm == 0:
        return unit, 1.0
    unit /= norm
    return unit, float(norm)


def encode(unit: np.ndarray, quant: int) -> tuple[np.ndarray, float]:
    """A unit vector as a stored row and its range (Q8; 1 for the other encodings)."""
    if quant == F32:
        return unit.astype(np.float32, copy=False), 1.0
    if quant == Q8:
        max_abs = np.float32(np.max(np.abs(unit))) if unit.size else np.float32(0)
        if max_abs == 0:
            return np.zeros(unit.shape, dtype=np.int8), 0.0
        scaled = unit * (np.float32(127.0) / max_abs)
        # C's roundf: halves away from zero (numpy's rint rounds them to even)
        rounded = np.copysign(np.floor(np.abs(scaled) + _ROUND_HALF), scaled)
        return np.clip(rounded, -127, 127).astype(np.int8), float(max_abs)
    bits = np.packbits(unit > 0, bitorder="little")
    padded = np.zeros(row_bytes(BIN, unit.size), dtype=np.uint8)
    padded[: bits.size] = bits
    return padded.view("<u8"), 1.0


def decode(row: np.ndarray, rng: float, norm: float, quant: int, dim: int) -> np.ndarray:
    """The approximate original vector (VEMB): de-quantized, then multiplied back by its norm
    (BIN answers the signs, +1/-1, without the norm, as Redis does)."""
    if quant == BIN:
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:dim]
        return np.where(bits == 1, np.float32(1.0), np.float32(-1.0))
    if quant == Q8:
        values = (row.astype(np.float32) * np.float32(rng)) / np.float32(127.0)
    else:
        values = row.astype(np.float32)
    return values * np.float32(norm)


_Q8_MAX = np.float32(127.0)
#: components an integer-valued float32 dot product sums exactly (127 * 127 * 1040 < 2^24)
_Q8_EXACT_F32_DIM = 1040
#: F32 dot products: the lanes of the fixed summation order (see the module docstring)
LANES = 8
#: rows per block of an F32 product (bounds the float64 scratch of a long exact scan)
_F32_BLOCK = 1024


def probe(row: np.ndarray, rng: float, quant: int) -> np.ndarray:
    """An encoded query in the form ``distances`` takes. Q8: float32, the int8 components then
    ``range / 127`` (dim + 1 items); the others: the row itself."""
    if quant == Q8:
        out = np.empty(row.size + 1, dtype=np.float32)
        out[:-1] = row
        out[-1] = np.float32(rng) / _Q8_MAX
        return out
    return row


def _f32_dots(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """float32 dot products of ``rows`` with ``query`` in the fixed order of the module docstring.

    The products go into a (blocks, rows, LANES) float64 array so that summing over axis 0, the
    slowest axis in memory, is numpy's plain sequential loop (it sums pairwise only along the
    fastest axis): lane j of each row adds components j, j + 8, ... in order."""
    if len(rows) > _F32_BLOCK:
        return np.concatenate([_f32_dots(rows[i : i + _F32_BLOCK], query) for i in range(0, len(rows), _F32_BLOCK)])
    n, dim = rows.shape
    head = dim - dim % LANES
    q = query.astype(np.float64)
    if head:
        blocks = head // LANES
        prods = np.empty((blocks, n, LANES), dtype=np.float64)
        np.multiply(rows[:, :head].reshape(n, blocks, LANES).transpose(1, 0, 2), q[:head].reshape(blocks, 1, LANES),
                    out=prods, dtype=np.float64)
        lanes = np.add.reduce(prods, axis=0)
    else:
        lanes = np.zeros((n, LANES), dtype=np.float64)
    if dim > head:
        lanes[:, : dim - head] += rows[:, head:].astype(np.float64) * q[head:]
    pairs = lanes[:, 0::2] + lanes[:, 1::2]
    quads = pairs[:, 0::2] + pairs[:, 1::2]
    return (quads[:, 0] + quads[:, 1]).astype(np.float32)


def _q8_dots(rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """Exact integer dot products of int8-valued rows (``rows_b`` 1-D or transposed 2-D), as float32."""
    if rows_a.shape[-1] <= _Q8_EXACT_F32_DIM:
        return rows_a.astype(np.float32) @ rows_b.astype(np.float32, copy=False)
    return (rows_a.astype(np.float64) @ rows_b.astype(np.float64)).astype(np.float32)


def distances(rows: np.ndarray, ranges: np.ndarray, query: np.ndarray, quant: int, dim: int) -> np.ndarray:
    """float32 distances from a ``probe`` to each of ``rows`` (``ranges`` aligned with them)."""
    if quant == F32:
        return np.float32(1.0) - _f32_dots(rows, query)
    if quant == Q8:  # may leave [0, 2] by quantization error: see ``clamp``
        scale = (ranges.astype(np.float32, copy=False) / _Q8_MAX) * query[-1]
        return np.float32(1.0) - _q8_dots(rows, query[:-1]) * scale
    ham = np.bitwise_count(rows ^ query).sum(axis=-1, dtype=np.int64)
    return ham.astype(np.float32) * np.float32(2.0 / dim)


def clamp(distance: float) -> float:
    """A reported distance within [0, 2], as Redis clamps its Q8 distances (quantization can push
    a cosine slightly past 1). Walks compare unclamped values: the order is the same."""
    return 0.0 if distance < 0.0 else 2.0 if distance > 2.0 else distance


def pairwise(rows_a: np.ndarray, ranges_a: np.ndarray | None, rows_b: np.ndarray,
             ranges_b: np.ndarray | None, quant: int, dim: int) -> np.ndarray:
    """The (len(a), len(b)) float32 distance matrix, each entry as ``distances`` computes it."""
    if quant == F32:
        if not len(rows_a):
            return np.zeros((0, len(rows_b)), dtype=np.float32)
        return np.float32(1.0) - np.stack([_f32_dots(rows_b, row) for row in rows_a])
    if quant == Q8:
        assert ranges_a is not None and ranges_b is not None
        scale = (ranges_a.astype(np.float32)[:, None] / _Q8_MAX) * (ranges_b.astype(np.float32)[None, :] / _Q8_MAX)
        return np.float32(1.0) - _q8_dots(rows_a, rows_b.T) * scale
    ham = np.bitwise_count(rows_a[:, None, :] ^ rows_b[None, :, :]).sum(axis=-1, dtype=np.int64)
    return ham.astype(np.float32) * np.float32(2.0 / dim)


def projection_matrix(input_dim: int, output_dim: int) -> np.ndarray:
    """REDUCE's projection: Redis's deterministic Hadamard-pattern matrix,
    ``m[i][j] = (+1 if popcount(i & j) is even else -1) / sqrt(input_dim)`` (so replicas and
    restarts agree), shape (output_dim, input_dim), float32."""
    i = np.arange(output_dim, dtype=np.uint32)[:, None]
    j = np.arange(input_dim, dtype=np.uint32)[None, :]
    odd = np.bitwise_count(i & j) & 1
    scale = np.float32(1.0) / np.float32(np.sqrt(np.float32(input_dim)))
    return np.where(odd == 0, scale, -scale).astype(np.float32)


def project(vec: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    return (matrix @ np.asarray(vec, dtype=np.float32)).astype(np.float32)
