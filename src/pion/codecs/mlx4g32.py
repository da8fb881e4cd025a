"""mlx4g32: int4, group 32, affine: mlx's ``QuantizedKVCache`` layout (the reference's format 7).

Row = ``[u32 packed x D/8][f16 scales x D/32][f16 biases x D/32]``. Per group of 32: scale =
(max-min)/15 (1e-8 when the group is constant), scale and bias (= min) rounded through fp16
first, q = floor((v-bias)/scale + 0.5) clamped to [0, 15]; each u32 holds 8 consecutive
elements, element j at bits 4·(j%8). Decode q·scale + bias.

A constant group's scale underflows to 0 in fp16 (a division by zero in the reference); we
give it q = 0, so it decodes to its bias.
"""

from __future__ import annotations

import numpy as np

from pion.codecs.base import BLOCK, F16, U32, Codec, fold

_SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)


class Mlx4g32Codec(Codec):
    name = "mlx4g32"
    tag = 7
    block = BLOCK

    def _row_bytes(self, dim: int) -> int:
        return dim // 2 + 4 * dim // BLOCK

    def _encode(self, rows: np.ndarray) -> bytes:
        nrows, dim = rows.shape
        groups = rows.reshape(nrows, -1, BLOCK)
        lo = fold(groups, np.minimum)
        scale = (fold(groups, np.maximum) - lo) / np.float32(15.0)
        scale[scale <= 0] = 1e-8
        scale16 = scale.astype(F16)
        bias16 = lo.astype(F16)
        safe = scale16.astype(np.float32)
        zero = safe == 0
        safe[zero] = 1.0
        q = groups - bias16.astype(np.float32)[:, :, None]
        q /= safe[:, :, None]
        q += np.float32(0.5)
        np.floor(q, out=q)
        np.clip(q, 0, 15, out=q)
        q[zero] = 0
        codes = q.astype(np.uint32).reshape(nrows, -1, 8)
        codes <<= _SHIFTS
        words = codes.sum(axis=-1, dtype=np.uint32).astype(U32)
        out = np.empty((nrows, self._row_bytes(dim)), dtype=np.uint8)
        packed = dim // 2
        ngroups = dim // BLOCK
        out[:, :packed] = words.view(np.uint8).reshape(nrows, packed)
        out[:, packed:packed + 2 * ngroups] = scale16.view(np.uint8).reshape(nrows, -1)
        out[:, packed + 2 * ngroups:] = bias16.view(np.uint8).reshape(nrows, -1)
        return out.tobytes()

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        nrows = raw.shape[0]
        packed = dim // 2
        ngroups = dim // BLOCK
        words = np.ascontiguousarray(raw[:, :packed]).view(U32)
        scales = np.ascontiguousarray(raw[:, packed:packed + 2 * ngroups]).view(F16).astype(np.float32)
        biases = np.ascontiguousarray(raw[:, packed + 2 * ngroups:]).view(F16).astype(np.float32)
        codes = (words[:, :, None] >> _SHIFTS) & 15
        values = codes.reshape(nrows, ngroups, BLOCK).astype(np.float32)
        values *= scales[:, :, None]
        values += biases[:, :, None]
        return values.reshape(nrows, dim)


CODEC = Mlx4g32Codec()
