"""Attention over a chosen subset of a stored prefix's tokens.

``attend_tokens``: one token set shared by every head (what the selectors give), gathered once.
``attend_indexed``: a token list per head (``QUERY_SPARSE``: the caller chose them). Both return
``(out, lse)`` like ``dense.attend_prefix``, so the suffix merge is the same.
"""

from __future__ import annotations

import numpy as np

from pion.attention.dense import attend_prefix, attend_rows, empty_result, identity_map


def attend_tokens(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, tokens: np.ndarray | None, head_map: np.ndarray | None = None,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Attention of ``q [H_q, M, D]`` over the prefix tokens ``tokens`` (all of them when None)."""
    if tokens is None:
        return attend_prefix(q, k, v, head_map, scale)
    return attend_prefix(q, np.take(k, tokens, axis=1), np.take(v, tokens, axis=1), head_map, scale)


def attend_indexed(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, indices: list[np.ndarray], head_map: np.ndarray | None = None,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Attention of ``q [H_q, M, D]`` where query head h sees prefix tokens ``indices[h]`` of its kv head."""
    heads, rows, dim = q.shape
    head_map = identity_map(heads) if head_map is None else head_map
    scale = dim ** -0.5 if scale is None else scale
    out, lse = empty_result(heads, rows, v.shape[2])
    for h in range(heads):
        picked, g = indices[h], int(head_map[h])
        if len(picked) == 0:
            continue
        o, s = attend_rows(q[h], np.take(k[g], picked, axis=0), np.take(v[g], picked, axis=0), scale)
        out[h], lse[h] = o, s
    return out, lse


def top_k_tokens(q: np.ndarray, k: np.ndarray, head_map: np.ndarray, top_k: int) -> list[np.ndarray]:
    """Per query head, the ``top_k`` prefix tokens with the highest ``q . k`` (ascending ids)."""
    picked = []
    for h in range(q.shape[0]):
        scores = k[int(head_map[h])] @ q[h, 0]
        if top_k >= scores.shape[0]:
            picked.append(np.arange(scores.shape[0]))
            continue
        picked.append(np.sort(np.argpartition(-scores, top_k - 1)[:top_k]))
    return picked
