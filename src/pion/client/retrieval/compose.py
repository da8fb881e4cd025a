"""Composition: the stub's and the chunks' stacked K/V rows into one runtime cache.

Rows are kept as ``(layers, tokens, width)`` arrays (heads concatenated, the V-store's row
layout). ``compose`` places the stub at ``[0, stub_len)`` and each chunk after the previous
one, re-rotating its K from the positions it was encoded at to the ones it now occupies
(all layers in one call: the rotation depends on positions only); V is position-free and
copied as stored. Before the first rotation to a position it has not moved K to yet, the
composer checks the rotation against a fresh prefill at that offset (``verify_rotation``)
and refuses, with the measured error, a model it cannot move exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pion.client.retrieval.rope import RotationRefused

#: probe tokens for the fresh-prefill check (small ids exist in every vocabulary)
PROBE_TOKENS = [1, 5, 9, 13, 17, 21, 25, 29]
#: relative error a rotation may show against a fresh prefill, for float32 K
ROTATION_TOL = 2e-5
#: the fresh-prefill check looks this far ahead at least (rounded up to a power of two)
VERIFY_BLOCK = 1024


@dataclass
class Composed:
    kv: tuple[np.ndarray, np.ndarray]
    total: int
    segments: list[tuple[int, int]]
    rotated: int
    rotate_ms: float


class Composer:
    """Stacks, rotates and concatenates rows for one model's adapter."""

    def __init__(self, adapter) -> None:
        self.adapter = adapter
        self._runtime = None
        self.verified_upto = 0
        #: the worst relative error the fresh-prefill checks measured so far (layer 0 K)
        self.verified_error = 0.0

    @property
    def runtime(self):
        if self._runtime is None:
            from pion.client.retrieval.runtime import runtime_for

            self._runtime = runtime_for(self.adapter)
        return self._runtime

    @property
    def has_rope(self) -> bool:
        return self._runtime is not None and self._runtime._rope is not None

    def rows(self, cache) -> tuple[np.ndarray, np.ndarray]:
        """Stacked ``(layers, tokens, width)`` K and V of a runtime cache."""
        kv, _ = self.adapter.export(cache)
        return np.stack([k for k, _ in kv]), np.stack([v for _, v in kv])

    def build(self, parts: list[tuple[np.ndarray, np.ndarray]]):
        """A fresh runtime cache holding the parts' rows one after the other (always a copy)."""
        k = np.concatenate([p[0] for p in parts], axis=1) if len(parts) > 1 else parts[0][0].copy()
        v = np.concatenate([p[1] for p in parts], axis=1) if len(parts) > 1 else parts[0][1].copy()
        return self.adapter.build([(k[layer], v[layer]) for layer in range(k.shape[0])], {})

    def compose(self, stub: tuple[np.ndarray, np.ndarray], stub_len: int, packs: list[tuple[int, np.ndarray, np.ndarray]]) -> Composed:
        """The stub and each ``(encoded_at, k, v)`` pack after it, K re-rotated to its new place."""
        keys, values, segments = [stub[0]], [stub[1]], []
        cursor, rotated, rotate_s = stub_len, 0, 0.0
        heads = self.adapter.layout.heads[0][0]
        for encoded_at, k, v in packs:
            n = k.shape[1]
            source, target = np.arange(encoded_at, encoded_at + n), np.arange(cursor, cursor + n)
            if encoded_at != cursor:
                started = time.perf_counter()
                self.verify_rotation(int(target[-1]) + 1)
                k = self.runtime.rope.rotate(k, heads, source, target)
                rotate_s += time.perf_counter() - started
                rotated += n
            keys.append(k)
            values.append(v)
            segments.append((cursor, cursor + n))
            cursor += n
        return Composed((np.concatenate(keys, axis=1), np.concatenate(values, axis=1)), cursor, segments, rotated,
                        rotate_s * 1000)

    def verify_rotation(self, positions: int) -> float:
        """Check, once per new reach, that K rotated to ``positions - len(probe)`` equals a fresh
        prefill there (layer 0, whose pre-RoPE K does not depend on position); the error."""
        if positions <= self.verified_upto:
            return self.verified_error
        runtime, n = self.runtime, len(PROBE_TOKENS)
        limit = runtime.rope.limit
        reach = max(VERIFY_BLOCK, 1 << (positions - 1).bit_length())  # check ahead: fewer re-checks
        reach = positions if limit is not None and reach > limit >= positions else reach
        offset = max(reach, 2 * n) - n
        runtime.rope.ensure(offset + n)
        heads = self.adapter.layout.heads[0][0]
        base = runtime.first_layer_k(runtime.prefill_at(PROBE_TOKENS, 0, first_layer_only=True))
        fresh = runtime.first_layer_k(runtime.prefill_at(PROBE_TOKENS, offset, first_layer_only=True))
        moved = runtime.rope.rotate(base, heads, np.arange(n), np.arange(offset, offset + n))
        error = rel_error(moved, fresh)
        tol = rotation_tolerance(self.adapter.layout.dtype)
        if not error <= tol:
            raise RotationRefused(
                f"re-rotated K differs from a fresh prefill at offset {offset} by {error:.2e} (relative, layer 0; "
                f"tolerance {tol:.1e}): this model's positional encoding is not the RoPE it reports"
            )
        self.verified_upto, self.verified_error = offset + n, max(self.verified_error, error)
        return error


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b|, in float64."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = np.abs(b).max()
    return float(np.abs(a - b).max() / scale) if scale else float(np.abs(a).max())


def rotation_tolerance(dtype: str) -> float:
    """2e-5 for float32 K; a few units of the dtype's rounding for half-precision K."""
    if dtype == "float32":
        return ROTATION_TOL
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}.get(dtype, 2.0 ** -7)
    return 4 * eps
