"""turbo3: block INT3, symmetric (the reference's format 3).

Row = ``[f32 norm_sq][D/32 blocks]``, block = ``[f16 scale][12 bytes]``: scale = absmax/3,
q = round-half-away(v/scale) clamped to [-4, 3], u = q+4. Each group of 8 consecutive dims packs
LSB-first into a 24-bit little-endian word (value k at bits 3k..3k+2): dims 0-15 fill bytes
0..5, dims 16-31 bytes 6..11. Decode (u-4)·scale.
"""

from __future__ import annotations

import numpy as np

from pion.codecs.base import BLOCK, Codec, pack_block_rows, unpack_block_rows
from pion.codecs.turbo4 import quantize_symmetric

_SHIFTS = np.arange(0, 24, 3, dtype=np.uint32)


class Turbo3Codec(Codec):
    name = "turbo3"
    tag = 3
    block = BLOCK

    def _row_bytes(self, dim: int) -> int:
        return 4 + 14 * dim // BLOCK

    def _encode(self, rows: np.ndarray) -> bytes:
        q, scale, norm_sq = quantize_symmetric(rows, 3.0, -4, 3)
        codes = (q + 4).astype(np.uint32).reshape(q.shape[0], q.shape[1], 4, 8)
        codes <<= _SHIFTS
        words = codes.sum(axis=-1, dtype=np.uint32)
        payload = words.astype("<u4").view(np.uint8).reshape(q.shape[0], q.shape[1], 4, 4)[..., :3]
        return pack_block_rows(norm_sq, scale, payload.reshape(q.shape[0], q.shape[1], 12))

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        scales, payload = unpack_block_rows(raw, dim, 12)
        rows, nblocks = scales.shape
        triples = payload.reshape(rows, nblocks, 4, 3).astype(np.uint32)
        words = triples[..., 0] | (triples[..., 1] << 8) | (triples[..., 2] << 16)
        codes = (words[..., None] >> _SHIFTS) & 7
        values = codes.reshape(rows, nblocks, BLOCK).astype(np.float32)
        values -= np.float32(4.0)
        values *= scales[:, :, None]
        return values.reshape(rows, dim)


CODEC = Turbo3Codec()
