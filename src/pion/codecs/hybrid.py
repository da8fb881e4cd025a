"""bf16_rope_fp8_body: the first ``rope`` dims as bf16, the rest as fp8 blocks (the reference's
format 6, DeepSeek-V4 style). Row = ``[bf16 x rope][(D-rope)/32 x ([f16 scale][32 x E4M3])]``:
the fp8 block layout of ``fp8`` without its 4-byte norm header. Needs 0 < rope < D and
(D - rope) % 32 == 0; only reachable through a per-layer SCHEMA with ``rope=N``.
"""

from __future__ import annotations

import numpy as np

from pion.codecs import fp8
from pion.codecs.base import BLOCK, Codec, CodecError, pack_block_rows, unpack_block_rows
from pion.codecs.bf16 import BF16


class RopeFp8Codec(Codec):
    name = "bf16_rope_fp8_body"
    tag = 6

    def __init__(self, rope: int) -> None:
        self.rope = rope

    def check_dim(self, dim: int) -> None:
        rope = self.rope
        if not 0 < rope < dim or (dim - rope) % BLOCK:
            raise CodecError(
                f"{self.name} needs 0 < rope < dim and (dim - rope) divisible by {BLOCK}, got dim={dim} rope={rope}"
            )

    def _row_bytes(self, dim: int) -> int:
        return 2 * self.rope + 34 * (dim - self.rope) // BLOCK

    def _encode(self, rows: np.ndarray) -> bytes:
        nrows = rows.shape[0]
        head = rows[:, :self.rope].astype(BF16).view(np.uint8).reshape(nrows, -1)
        codes, scale, _ = fp8.quantize(np.ascontiguousarray(rows[:, self.rope:]))
        body = np.frombuffer(pack_block_rows(None, scale, codes), dtype=np.uint8).reshape(nrows, -1)
        return np.concatenate([head, body], axis=1).tobytes()

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        nrows = raw.shape[0]
        head = np.ascontiguousarray(raw[:, :2 * self.rope]).view(BF16).astype(np.float32)
        scales, codes = unpack_block_rows(raw[:, 2 * self.rope:], dim - self.rope, BLOCK, header=False)
        body = fp8.dequantize(scales, codes).reshape(nrows, -1)
        return np.concatenate([head, body], axis=1)

    def __repr__(self) -> str:
        return f"<codec {self.name} rope={self.rope}>"
