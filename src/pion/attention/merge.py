"""The online-softmax merge: two partial attentions over disjoint key sets, as one over their union.

Given ``(out_a, lse_a)`` and ``(out_b, lse_b)`` (``lse`` = row-wise ``max + log sum exp``):
``m = max(lse_a, lse_b)``, ``w_a = exp(lse_a - m)``, ``w_b = exp(lse_b - m)``,
``out = (w_a out_a + w_b out_b) / (w_a + w_b)``, ``lse = m + log(w_a + w_b)`` (spec 6.3). A side
that saw no key (``lse = -inf``) has weight 0; both empty gives ``out = 0``, ``lse = -inf``.
"""

from __future__ import annotations

import numpy as np


def merge(
    out_a: np.ndarray, lse_a: np.ndarray, out_b: np.ndarray, lse_b: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two partial results of shape ``out [..., D]``, ``lse [...]``."""
    peak = np.maximum(lse_a, lse_b)
    finite = np.isfinite(peak)
    base = np.where(finite, peak, 0)
    w_a = np.where(np.isfinite(lse_a), np.exp(lse_a - base), 0)
    w_b = np.where(np.isfinite(lse_b), np.exp(lse_b - base), 0)
    total = w_a + w_b
    safe = np.where(total > 0, total, 1)
    out = (w_a[..., None] * out_a + w_b[..., None] * out_b) / safe[..., None]
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, base + np.log(safe), -np.inf)
    return out.astype(np.float32, copy=False), lse.astype(np.float32, copy=False)
