"""A float64 numpy reference for Stage-2 attention, written as literally as the spec reads
(one head at a time, explicit softmax, the selector steps of spec 6.4 in order)."""

from __future__ import annotations

import numpy as np


def attention(q, k_tokens, v_tokens, head_map, scale, visible=None):
    """``q [H_q, M, D]`` over ``k_tokens, v_tokens [T, H_kv, D]``; ``visible[m]`` keys for row m.

    Returns ``(out [H_q, M, D], lse [H_q, M])`` in float64.
    """
    q = np.asarray(q, np.float64)
    k = np.asarray(k_tokens, np.float64)
    v = np.asarray(v_tokens, np.float64)
    heads, rows, _ = q.shape
    out = np.zeros((heads, rows, v.shape[2]))
    lse = np.full((heads, rows), -np.inf)
    for h in range(heads):
        g = head_map[h]
        for m in range(rows):
            limit = k.shape[0] if visible is None else visible[m]
            if limit <= 0:
                continue
            s = (k[:limit, g, :] @ q[h, m]) * scale
            peak = s.max()
            w = np.exp(s - peak)
            out[h, m] = w @ v[:limit, g, :] / w.sum()
            lse[h, m] = peak + np.log(w.sum())
    return out, lse


def prefix_and_suffix(q, k_pre, v_pre, k_suf, v_suf, head_map, scale):
    """One softmax over [prefix (all visible) + causal suffix]; suffix given head-major ``[H_kv, S, D]``."""
    rows = q.shape[1]
    suffix = k_suf.shape[1]
    k_all = np.concatenate([k_pre, np.transpose(k_suf, (1, 0, 2))], axis=0)
    v_all = np.concatenate([v_pre, np.transpose(v_suf, (1, 0, 2))], axis=0)
    n = k_pre.shape[0]
    visible = [n + suffix - rows + m + 1 for m in range(rows)]
    return attention(q, k_all, v_all, head_map, scale, visible)


def select(q, k_tokens, head_map, block, k_top, selector):
    """Spec 6.4, literally: token ids to attend (None = dense) for a decode query ``q [H_q, D]``."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k_tokens, np.float64)
    n = k.shape[0]
    if n <= block * k_top:
        return None
    full = (n // block) * block
    n_blocks = full // block
    dim = q.shape[1]
    scores = np.zeros((q.shape[0], n_blocks))
    for h in range(q.shape[0]):
        g = head_map[h]
        for b in range(n_blocks):
            keys = k[b * block:(b + 1) * block, g, :]
            if selector == 0:
                scores[h, b] = q[h] @ keys.mean(axis=0) / np.sqrt(dim)
            else:
                kmin, kmax = keys.min(axis=0), keys.max(axis=0)
                scores[h, b] = np.sum(np.maximum(q[h] * kmin, q[h] * kmax)) / np.sqrt(dim)
    shared = scores.mean(axis=0)
    count = min(k_top, n_blocks)
    chosen = sorted(sorted(range(n_blocks), key=lambda b: (-shared[b], b))[:count])
    tokens = [b * block + t for b in chosen for t in range(block)]
    return np.array(tokens + list(range(full, n)))


def rel_err(got, want) -> float:
    """Max abs error relative to the largest reference magnitude (normwise; elementwise would
    divide by values that are zero by chance)."""
    want = np.asarray(want, np.float64)
    finite = np.isfinite(want)
    scale = max(np.abs(want[finite]).max(), 1e-30)
    return float(np.abs(np.asarray(got, np.float64)[finite] - want[finite]).max() / scale)


def select_per_head(q, k_tokens, head_map, block, k_top, selector):
    """Pion's per-head variant: spec 6.4 steps 1-3, then each query head its own top blocks
    (the shared algorithm run for one head at a time)."""
    picks = [select(np.asarray(q)[h:h + 1], k_tokens, [head_map[h]], block, k_top, selector) for h in range(len(q))]
    return None if picks[0] is None else picks
