"""bf16: bfloat16 per element (round to nearest even), 2·D bytes a row.

Ours (not in the reference): exact for bf16 models, where fp16 would overflow or lose range.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from pion.codecs.base import Codec

BF16 = np.dtype(ml_dtypes.bfloat16)


class Bf16Codec(Codec):
    name = "bf16"
    per_value = True
    tag = 9

    def _row_bytes(self, dim: int) -> int:
        return 2 * dim

    def _encode(self, rows: np.ndarray) -> bytes:
        return rows.astype(BF16).tobytes()

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        return raw.view(BF16).astype(np.float32)


CODEC = Bf16Codec()
