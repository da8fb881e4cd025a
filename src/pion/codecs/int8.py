"""int8, affine, with the scale and offset kept PER ROW: ``[f32 scale][f32 min][D x int8]``.

The reference (format 0) keeps one scale/min per layer slot and overwrites it on every batch,
so rows stored by an earlier batch decode with the wrong scale. We keep them in the row.
Codes follow the reference: scale = 254/(max-min) (1.0 when the range is below 1e-8),
code = clamp((v-min)*scale, 0, 254) - 127, decode (code+127)/scale + min; we round to nearest
where the reference truncates (same decoder, half the error).
"""

from __future__ import annotations

import numpy as np

from pion.codecs.base import F32, Codec


class Int8Codec(Codec):
    name = "int8"
    tag = 0

    def _row_bytes(self, dim: int) -> int:
        return dim + 8

    def _encode(self, rows: np.ndarray) -> bytes:
        lo = rows.min(axis=1)
        span = rows.max(axis=1) - lo
        scale = np.where(span < 1e-8, np.float32(1.0), np.float32(254.0) / np.where(span < 1e-8, 1, span))
        scale = scale.astype(np.float32)
        scaled = rows - lo[:, None]
        scaled *= scale[:, None]
        np.clip(scaled, 0, 254, out=scaled)
        scaled += np.float32(0.5)
        codes = (np.floor(scaled) - 127).astype(np.int8)
        out = np.empty((rows.shape[0], rows.shape[1] + 8), dtype=np.uint8)
        out[:, 0:4] = scale.astype(F32).view(np.uint8).reshape(-1, 4)
        out[:, 4:8] = lo.astype(F32).view(np.uint8).reshape(-1, 4)
        out[:, 8:] = codes.view(np.uint8)
        return out.tobytes()

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        scale = np.ascontiguousarray(raw[:, 0:4]).view(F32)
        lo = np.ascontiguousarray(raw[:, 4:8]).view(F32)
        values = raw[:, 8:].view(np.int8).astype(np.float32)
        values += np.float32(127.0)
        values /= scale
        values += lo
        return values


CODEC = Int8Codec()
