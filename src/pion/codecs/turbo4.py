"""turbo4: block INT4, symmetric (the reference's format 1).

Row = ``[f32 norm_sq][D/32 blocks]``, block = ``[f16 scale][16 bytes]``: scale = absmax/7 (1.0 for
an all-zero block), q = round-half-away(v/scale) clamped to [-8, 7], stored as the nibble q+8;
byte i = code(dim i+16) << 4 | code(dim i). Decode (nibble-8)·scale. ``norm_sq`` is the sum of
squares of the decoded row (used by distance kernels, ignored by fetch).
"""

from __future__ import annotations

import numpy as np

from pion.codecs.base import (
    BLOCK,
    Codec,
    block_absmax,
    pack_block_rows,
    round_half_away,
    sum_squares,
    unpack_block_rows,
)


def quantize_symmetric(rows: np.ndarray, levels: float, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks of 32 scaled by absmax/levels: returns ``(q int8 (r, nb, 32), scale, norm_sq)``."""
    blocks = rows.reshape(rows.shape[0], -1, BLOCK)
    absmax = block_absmax(blocks)
    scale = absmax / np.float32(levels)
    scale[absmax == 0] = 1.0
    scaled = round_half_away(blocks / scale[:, :, None])
    np.clip(scaled, lo, hi, out=scaled)
    q = scaled.astype(np.int8)
    decoded = scaled * scale.astype(np.float16).astype(np.float32)[:, :, None]
    return q, scale, sum_squares(decoded)


class Turbo4Codec(Codec):
    name = "turbo4"
    tag = 1
    block = BLOCK

    def _row_bytes(self, dim: int) -> int:
        return 4 + 18 * dim // BLOCK

    def _encode(self, rows: np.ndarray) -> bytes:
        q, scale, norm_sq = quantize_symmetric(rows, 7.0, -8, 7)
        codes = (q + 8).view(np.uint8)
        payload = (codes[:, :, 16:] << 4) | codes[:, :, :16]
        return pack_block_rows(norm_sq, scale, payload)

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        scales, payload = unpack_block_rows(raw, dim, 16)
        codes = np.empty(payload.shape[:2] + (BLOCK,), dtype=np.int8)
        np.bitwise_and(payload, 0x0F, out=codes[:, :, :16], casting="unsafe")
        np.right_shift(payload, 4, out=codes[:, :, 16:], casting="unsafe")
        codes -= 8
        values = codes.astype(np.float32)
        values *= scales[:, :, None]
        return values.reshape(raw.shape[0], dim)


CODEC = Turbo4Codec()
