"""Exact re-rotation of cached K to another position, for any RoPE the runtime applies.

A chunk's K was computed by the model at positions ``p`` (where the chunk sat when it was
encoded); composed into a prompt it sits at ``q``. RoPE multiplies each pair of K's head
dimensions by a rotation of angle ``theta_i(p)`` (times a constant, e.g. YaRN's mscale), so
``K(q) = R(theta(q) - theta(p)) K(p)`` exactly, whatever the frequencies are (default,
linear, Llama-3, YaRN, LongRoPE's static factors, partial rotary) and whichever dimensions
are paired (split-half ``[x1, x2]`` or interleaved ``x0 x1, x2 x3 ...``).

Nothing here knows a formula. ``RopeSpec.probe(apply)`` asks the runtime's own RoPE (a
function ``apply(x [n_vec, n_pos, D], start) -> same shape``, given by the runtime shim) what it
does to the basis vectors, which gives the dimension pairs, and to one probe vector per
position, which gives the runtime's own cosine and sine at every position, rounded as the
runtime rounds them. The rotation between two positions is then built in float64 from those
values (``cos(b - a) = cos b cos a + sin b sin a``...), so rotated K matches what a fresh
prefill at ``q`` computes to float32 rounding at any offset; the naive ``angle = inv_freq *
delta`` differs from the runtime's ``fl(inv_freq * q)`` by up to half an ulp of the angle
(2e-4 rad at position 4,000), which a 2e-5 check rejects.

What is not a rotation (a dimension mixed with more than one other, unequal diagonal
entries, a scale that changes with position), and a RoPE whose frequencies depend on the
sequence length (dynamic NTK, LongRoPE's short/long switch) beyond the length where they
change, raise ``RotationRefused`` naming the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: table rows are computed in blocks of this many positions (and grown by doubling)
TABLE_BLOCK = 512
#: relative tolerance of the structure checks on the runtime's probe output
STRUCTURE_TOL = 1e-5


class RotationRefused(ValueError):
    """This model's positional encoding cannot be moved exactly (see the message for why)."""


Apply = Callable[[np.ndarray, int], np.ndarray]


@dataclass
class RopeSpec:
    """The pairing of K's head dimensions and the runtime's cos/sin per position."""

    head_dim: int
    #: first / second dimension of each rotated pair: ``rope(e_a) = m(c e_a + s e_b)``
    first: np.ndarray
    second: np.ndarray
    #: dimensions left unrotated, and the constant factor the runtime multiplies every dimension by
    keep: np.ndarray
    keep_scale: np.ndarray
    apply: Apply
    #: positions at which the frequencies start to depend on the sequence length (None: never seen)
    limit: int | None = None
    #: the runtime's unit-norm (cos, sin) per position, float64, shape (positions, pairs)
    _cos: np.ndarray | None = None
    _sin: np.ndarray | None = None
    #: the runtime's own (cos, sin) with its scale, float32 as it computed them
    _raw_cos: np.ndarray | None = None
    _raw_sin: np.ndarray | None = None

    @classmethod
    def probe(cls, apply: Apply, head_dim: int, limit: int | None = None) -> RopeSpec:
        """Find the rotated pairs from what ``apply`` does to the basis vectors at two positions."""
        basis = np.eye(head_dim, dtype=np.float32)[:, None, :]
        out = np.stack([_at(apply, basis, p)[:, 0] for p in (1, 37)], axis=0)  # (pos, in, out)
        partners = []
        for j in range(head_dim):
            touched = sorted({int(k) for k in np.nonzero(np.any(out[:, j] != 0, axis=0))[0]} - {j})
            if len(touched) > 1:
                raise RotationRefused(f"RoPE mixes dimension {j} with {len(touched)} others: not a pairwise rotation")
            partners.append(touched[0] if touched else None)
        first, second, keep = [], [], []
        for j, k in enumerate(partners):
            if k is None:
                if not np.allclose(out[:, j, j], out[0, j, j], rtol=STRUCTURE_TOL):
                    raise RotationRefused(f"dimension {j} is scaled by a position-dependent factor")
                keep.append(j)
                continue
            if partners[k] != j:
                raise RotationRefused(f"RoPE pairs dimension {j} with {k} but {k} with {partners[k]}")
            if j < k:
                first.append(j)
                second.append(k)
        if not first:
            raise RotationRefused("the model applies no rotary position embedding to K")
        keep = np.array(keep, dtype=np.int64)
        spec = cls(head_dim, np.array(first), np.array(second), keep, out[0, keep, keep].astype(np.float32), apply, limit)
        spec._check_rotation(out)
        return spec

    def _check_rotation(self, out: np.ndarray) -> None:
        a, b = self.first, self.second
        for pos in range(out.shape[0]):
            m = out[pos]
            caa, cbb, sab, sba = m[a, a], m[b, b], m[a, b], m[b, a]  # m[in, out]
            scale = np.maximum(np.hypot(caa, sab), 1e-30)
            if not (np.allclose(caa, cbb, atol=STRUCTURE_TOL * scale.max()) and
                    np.allclose(sab, -sba, atol=STRUCTURE_TOL * scale.max())):
                raise RotationRefused("the runtime's RoPE is not a rotation on each dimension pair")

    # -- tables ------------------------------------------------------------------------

    def ensure(self, positions: int) -> None:
        """Make the cos/sin table cover positions ``[0, positions)`` (the runtime computes it)."""
        have = 0 if self._cos is None else self._cos.shape[0]
        if positions <= have:
            return
        if self.limit is not None and positions > self.limit:
            raise RotationRefused(
                f"position {positions - 1} is past {self.limit}, where this model's RoPE frequencies start to "
                "depend on the sequence length (dynamic scaling): K computed at other lengths cannot be moved exactly"
            )
        size = max(TABLE_BLOCK, 1 << (positions - 1).bit_length())
        if self.limit is not None:
            size = min(size, self.limit)
        out = self._table(size)
        if out is None and size > positions:
            out = self._table(positions)
        if out is None:
            raise RotationRefused(
                f"this model's RoPE gives other angles to the first positions when the sequence is {positions} long "
                "(dynamic scaling): K computed at other lengths cannot be moved exactly"
            )
        c, s = out[:, self.first], out[:, self.second]
        norm = np.hypot(c.astype(np.float64), s.astype(np.float64))
        if np.any(norm == 0) or not np.allclose(norm, norm[:1], rtol=1e-4):
            raise RotationRefused("the RoPE scale changes with position (not a pure rotation)")
        self._raw_cos, self._raw_sin = c, s
        self._cos, self._sin = c / norm, s / norm

    def _table(self, size: int) -> np.ndarray | None:
        """The probe vector through the runtime's RoPE at ``[0, size)``; None when the first
        positions come out otherwise than in a short sequence (length-dependent frequencies)."""
        probe = np.zeros((1, size, self.head_dim), dtype=np.float32)
        probe[0, :, self.first] = 1.0
        out = _at(self.apply, probe, 0)[0]
        short = _at(self.apply, probe[:, : min(size, 64)], 0)[0]
        if not np.allclose(out[: short.shape[0]], short, rtol=0, atol=1e-6 * np.abs(short).max()):
            return None
        return out

    def raw(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The runtime's own (cos, sin), scale included, at ``positions``: ``(n, pairs)`` float32."""
        positions = np.asarray(positions)
        self.ensure(int(positions.max(initial=0)) + 1)
        return self._raw_cos[positions], self._raw_sin[positions]

    def deltas(self, source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float32 ``(cos, sin)`` of ``theta(target) - theta(source)`` per token and pair: ``(n, pairs)``."""
        source, target = np.asarray(source), np.asarray(target)
        self.ensure(int(max(source.max(initial=0), target.max(initial=0))) + 1)
        ca, sa, cb, sb = self._cos[source], self._sin[source], self._cos[target], self._sin[target]
        return (cb * ca + sb * sa).astype(np.float32), (sb * ca - cb * sa).astype(np.float32)

    def rotate(self, k: np.ndarray, heads: int, source: np.ndarray, target: np.ndarray) -> np.ndarray:
        """K rows moved from positions ``source`` to ``target``.

        ``k``: ``(..., n, heads*head_dim)`` rows (any float dtype; the math runs in float32 and
        the result comes back in ``k``'s dtype). ``source``/``target``: ``n`` positions each.
        """
        if np.array_equal(source, target):
            return k
        cos, sin = self.deltas(source, target)
        shape = k.shape
        x = k.astype(np.float32, copy=True).reshape(*shape[:-1], heads, self.head_dim)
        cos, sin = cos[:, None, :], sin[:, None, :]  # (n, 1, pairs) against (..., n, heads, pairs)
        a, b = _as_index(self.first), _as_index(self.second)
        xa, xb = x[..., a].copy(), x[..., b]
        x[..., a] = xa * cos - xb * sin
        x[..., b] = xa * sin + xb * cos
        out = x.reshape(shape)
        return out if out.dtype == k.dtype else out.astype(k.dtype)

    def describe(self) -> dict:
        kind = "split-half" if np.array_equal(self.second - self.first, np.full(len(self.first), len(self.first))) \
            else "interleaved" if np.all(self.second - self.first == 1) else "paired"
        return {"pairs": kind, "rotated_dims": 2 * len(self.first), "head_dim": self.head_dim, "limit": self.limit}


def _at(apply: Apply, x: np.ndarray, start: int) -> np.ndarray:
    return np.asarray(apply(np.ascontiguousarray(x, dtype=np.float32), start), dtype=np.float32)


def _as_index(idx: np.ndarray):
    """A slice when the indices are an arithmetic progression (views instead of gathers)."""
    if len(idx) > 1:
        step = int(idx[1] - idx[0])
        if step > 0 and np.array_equal(idx, np.arange(idx[0], idx[0] + step * len(idx), step)):
            return slice(int(idx[0]), int(idx[-1]) + 1, step)
    elif len(idx) == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    return idx
