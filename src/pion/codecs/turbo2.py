"""turbo2: block INT2 (the reference's format 4).

Row = ``[f32 norm_sq][D/32 blocks]``, block = ``[f16 stored_scale][8 bytes]``: s = absmax/1.5,
stored_scale = s/2, q = round(v/s + 1.5) clamped to [0, 3]; 16 values per 32-bit LE word
(value k at bits 2k..2k+1), dims 0-15 then 16-31. Decode (2q-3)·stored_scale, i.e. the levels
{-3, -1, 1, 3}·stored_scale. An all-zero block stores scale 0 (the reference stores 0.5 and
decodes it to ±0.5): still the same decoder, but zeros come back as zeros.
"""

from __future__ import annotations

import numpy as np

from pion.codecs.base import BLOCK, Codec, block_absmax, pack_block_rows, sum_squares, unpack_block_rows

_SHIFTS = np.arange(0, 32, 2, dtype=np.uint32)


class Turbo2Codec(Codec):
    name = "turbo2"
    tag = 4
    block = BLOCK

    def _row_bytes(self, dim: int) -> int:
        return 4 + 10 * dim // BLOCK

    def _encode(self, rows: np.ndarray) -> bytes:
        blocks = rows.reshape(rows.shape[0], -1, BLOCK)
        absmax = block_absmax(blocks)
        step = absmax / np.float32(1.5)
        step[absmax == 0] = 1.0
        shifted = blocks / step[:, :, None]
        shifted += np.float32(1.5)
        scaled = np.floor(shifted)
        shifted -= scaled
        scaled += shifted >= 0.5  # round half up, exactly (see base.round_half_away)
        np.clip(scaled, 0, 3, out=scaled)
        stored = step / np.float32(2.0)
        stored[absmax == 0] = 0.0  # the levels are odd multiples: only a zero scale gives zeros
        decoded = (scaled * 2 - 3) * stored.astype(np.float16).astype(np.float32)[:, :, None]
        codes = scaled.astype(np.uint32).reshape(rows.shape[0], -1, 2, 16)
        codes <<= _SHIFTS
        words = codes.sum(axis=-1, dtype=np.uint32).astype("<u4")
        payload = words.view(np.uint8).reshape(rows.shape[0], -1, 8)
        return pack_block_rows(sum_squares(decoded), stored, payload)

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        scales, payload = unpack_block_rows(raw, dim, 8)
        rows, nblocks = scales.shape
        words = np.ascontiguousarray(payload).view("<u4").reshape(rows, nblocks, 2)
        codes = (words[..., None] >> _SHIFTS) & 3
        values = codes.reshape(rows, nblocks, BLOCK).astype(np.float32)
        values *= 2
        values -= 3
        values *= scales[:, :, None]
        return values.reshape(rows, dim)


CODEC = Turbo2Codec()
