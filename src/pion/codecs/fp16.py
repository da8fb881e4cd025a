"""fp16: IEEE half per element, round to nearest even, 2·D bytes a row (the reference's format 2).

Exact for fp16 models. Values beyond ±65504 become ±inf, as IEEE says.
"""

from __future__ import annotations

import numpy as np

from pion.codecs.base import F16, Codec, half_bits


class Fp16Codec(Codec):
    name = "fp16"
    per_value = True
    tag = 2

    def _row_bytes(self, dim: int) -> int:
        return 2 * dim

    def _encode(self, rows: np.ndarray) -> bytes:
        return half_bits(rows).tobytes()

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        return raw.view(F16).astype(np.float32)


CODEC = Fp16Codec()
