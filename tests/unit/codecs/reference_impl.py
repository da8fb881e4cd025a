"""Scalar transcriptions of the reference's row layouts (spec section 3), element by element.

Slow and obvious on purpose: the vectorised codecs must produce the same bytes.
"""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np

F32 = np.float32


def half(value) -> bytes:
    return np.float16(value).tobytes()


def half_value(value) -> float:
    return float(np.float16(value))


def round_half_away(x: float) -> float:
    return math.copysign(math.floor(abs(x) + 0.5), x)


def symmetric_row(row: np.ndarray, levels: float, lo: int, hi: int, pack) -> bytes:
    blocks, recon = [], []
    for b in range(len(row) // 32):
        v = row[32 * b: 32 * b + 32]
        absmax = F32(np.max(np.abs(v)))
        scale = F32(absmax / F32(levels)) if absmax != 0 else F32(1.0)
        q = [int(min(max(round_half_away(float(F32(x / scale))), lo), hi)) for x in v]
        blocks.append(half(scale) + pack(q))
        recon.extend(qi * half_value(scale) for qi in q)
    norm = sum(F32(r) * F32(r) for r in recon)
    return struct.pack("<f", norm) + b"".join(blocks)


def pack4(q) -> bytes:
    codes = [x + 8 for x in q]
    return bytes((codes[i + 16] << 4) | codes[i] for i in range(16))


def pack3(q) -> bytes:
    codes = [x + 4 for x in q]
    out = b""
    for group in range(4):
        word = sum(codes[8 * group + k] << (3 * k) for k in range(8))
        out += word.to_bytes(3, "little")
    return out


def turbo4(row):
    return symmetric_row(row, 7.0, -8, 7, pack4)


def turbo3(row):
    return symmetric_row(row, 3.0, -4, 3, pack3)


def turbo2(row) -> bytes:
    blocks, recon = [], []
    for b in range(len(row) // 32):
        v = row[32 * b: 32 * b + 32]
        absmax = F32(np.max(np.abs(v)))
        s = F32(absmax / F32(1.5)) if absmax != 0 else F32(1.0)
        stored = F32(s / F32(2.0)) if absmax != 0 else F32(0.0)
        q = [int(min(max(math.floor(float(F32(F32(x / s) + F32(1.5))) + 0.5), 0), 3)) for x in v]
        words = [sum(q[16 * h + k] << (2 * k) for k in range(16)) for h in range(2)]
        blocks.append(half(stored) + b"".join(w.to_bytes(4, "little") for w in words))
        recon.extend((2 * qi - 3) * half_value(stored) for qi in q)
    norm = sum(F32(r) * F32(r) for r in recon)
    return struct.pack("<f", norm) + b"".join(blocks)


def fp8(row) -> bytes:
    blocks, recon = [], []
    for b in range(len(row) // 32):
        v = row[32 * b: 32 * b + 32]
        absmax = F32(np.max(np.abs(v)))
        scale = F32(absmax / F32(240.0)) if absmax != 0 else F32(1.0)
        codes = np.array([F32(x / scale) for x in v], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
        blocks.append(half(scale) + codes.tobytes())
        recon.extend(float(c) * half_value(scale) for c in codes.astype(np.float32))
    norm = sum(F32(r) * F32(r) for r in recon)
    return struct.pack("<f", norm) + b"".join(blocks)


def mlx4g32(row) -> bytes:
    words, scales, biases = b"", b"", b""
    for g in range(len(row) // 32):
        v = row[32 * g: 32 * g + 32]
        lo, hi = F32(v.min()), F32(v.max())
        scale = F32((hi - lo) / F32(15.0))
        if scale <= 0:
            scale = F32(1e-8)
        s16, b16 = np.float16(scale), np.float16(lo)
        q = []
        for x in v:
            if float(s16) == 0:
                q.append(0)
                continue
            q.append(int(min(max(math.floor(F32(F32(F32(x) - F32(b16)) / F32(s16)) + F32(0.5)), 0), 15)))
        for w in range(4):
            words += sum(q[8 * w + j] << (4 * j) for j in range(8)).to_bytes(4, "little")
        scales += s16.tobytes()
        biases += b16.tobytes()
    return words + scales + biases


def int8(row) -> bytes:
    lo = F32(row.min())
    span = F32(row.max() - lo)
    scale = F32(1.0) if span < 1e-8 else F32(F32(254.0) / span)
    codes = bytes(
        (int(math.floor(F32(min(max(F32(F32(x - lo) * scale), F32(0.0)), F32(254.0)) + F32(0.5)))) - 127) & 0xFF
        for x in row
    )
    return struct.pack("<ff", scale, lo) + codes
