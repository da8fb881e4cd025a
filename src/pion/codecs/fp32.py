"""fp32: IEEE single per element, 4·D bytes a row. Lossless; the wire format of V.STOREBATCH."""

from __future__ import annotations

import numpy as np

from pion.codecs.base import F32, Codec


class Fp32Codec(Codec):
    name = "fp32"
    per_value = True
    tag = 8

    def _row_bytes(self, dim: int) -> int:
        return 4 * dim

    def _encode(self, rows: np.ndarray) -> bytes:
        return rows.astype(F32, copy=False).tobytes()

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        return raw.view(F32).astype(np.float32)


CODEC = Fp32Codec()
