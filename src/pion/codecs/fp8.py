"""fp8: block E4M3 (the reference's format 5).

Row = ``[f32 norm_sq][D/32 blocks]``, block = ``[f16 scale][32 x E4M3]``: scale = absmax/240
(keeps values off the ±448 saturation tail; 1.0 for an all-zero block), element =
float8_e4m3fn(v/scale). Decode e4m3 -> f32 · scale. ``encode_body``/``decode_body`` are the
header-less block run that the rope/fp8 hybrid reuses.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from pion.codecs.base import BLOCK, Codec, block_absmax, pack_block_rows, sum_squares, unpack_block_rows

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
#: byte -> float32 value of that E4M3 code (a gather is faster than a cast)
LUT = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)


def to_e4m3(values: np.ndarray) -> np.ndarray:
    """float32 -> E4M3 codes, round to nearest even, bit-equal to ml_dtypes' cast for |v| <= 448.

    Integer arithmetic on the float32 bits: three times faster than ``astype(float8_e4m3fn)``.
    Normals drop 20 mantissa bits with a round-to-even bias and rebias the exponent (127 -> 7);
    values below 2^-6 are subnormals, m·2^-9 with m = rint(|v|·512).
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    magnitude = bits & np.uint32(0x7FFFFFFF)
    code = magnitude + np.uint32(0x7FFFF)
    code += (magnitude >> 20) & np.uint32(1)
    code >>= 20
    code -= np.uint32(960)
    absolute = magnitude.view(np.float32)
    small = absolute < np.float32(2.0**-6)
    code[small] = np.rint(absolute[small] * np.float32(512.0)).astype(np.uint32)
    out = code.astype(np.uint8)
    out |= (bits >> 24).astype(np.uint8) & np.uint8(0x80)
    return out


def quantize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes uint8 (r, nb, 32), scale (r, nb), decoded float32 (r, nb, 32))``."""
    blocks = rows.reshape(rows.shape[0], -1, BLOCK)
    absmax = block_absmax(blocks)
    scale = absmax / np.float32(240.0)
    scale[absmax == 0] = 1.0
    codes = to_e4m3(blocks / scale[:, :, None])
    decoded = LUT[codes]
    decoded *= scale.astype(np.float16).astype(np.float32)[:, :, None]
    return codes, scale, decoded


def dequantize(scales: np.ndarray, codes: np.ndarray) -> np.ndarray:
    values = LUT[codes]
    values *= scales[:, :, None]
    return values


class Fp8Codec(Codec):
    name = "fp8"
    tag = 5
    block = BLOCK

    def _row_bytes(self, dim: int) -> int:
        return 4 + 34 * dim // BLOCK

    def _encode(self, rows: np.ndarray) -> bytes:
        codes, scale, decoded = quantize(rows)
        return pack_block_rows(sum_squares(decoded), scale, codes)

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        scales, codes = unpack_block_rows(raw, dim, BLOCK)
        return dequantize(scales, codes).reshape(raw.shape[0], dim)


CODEC = Fp8Codec()
