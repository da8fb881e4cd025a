"""Dense attention over a stored prefix, with the row-wise log-sum-exp that lets a caller merge it.

Layouts (float32, C order unless said):

- ``q``: ``[H_q, M, D]`` query heads, M query rows each (M=1 is a decode step).
- a stored prefix and a live suffix: ``k, v`` of ``[H_kv, N, D]``, head-major (the reference's
  wire layout): each kv head's keys are one contiguous matrix, which matrix-vector products
  read three times faster than the V-store's token-major rows viewed per head.
- ``head_map``: ``[H_q]`` ints, query head -> kv head (GQA); ``None`` is the identity.

Every query head that shares a kv head is computed in one matrix product against that kv head's
keys (BLAS through numpy), cut into row chunks so the score matrix stays small. Results are
``out [H_q, M, D]`` and ``lse [H_q, M]`` (natural log; ``-inf`` where a row saw no key, with
``out`` 0 there).
"""

from __future__ import annotations

import numpy as np

#: bytes of float32 scores one chunk of query rows may hold (bounds the kernel's scratch memory)
SCORE_BYTES = 32 * 1024 * 1024


def identity_map(heads: int) -> np.ndarray:
    return np.arange(heads, dtype=np.intp)


def grouped_map(q_heads: int, kv_heads: int) -> np.ndarray:
    """The usual GQA map: query head h reads kv head ``h // (q_heads // kv_heads)``."""
    if kv_heads <= 0 or q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads are not a multiple of {kv_heads} kv heads")
    return np.arange(q_heads, dtype=np.intp) // (q_heads // kv_heads)


def head_groups(head_map: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``[(kv head, query heads that read it)]`` in kv-head order."""
    return [(int(g), np.flatnonzero(head_map == g)) for g in np.unique(head_map)]


def empty_result(q_heads: int, rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((q_heads, rows, dim), np.float32), np.full((q_heads, rows), -np.inf, np.float32)


def attend_rows(
    qr: np.ndarray, kg: np.ndarray, vg: np.ndarray, scale: float, visible: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Softmax attention of query rows ``qr [R, D]`` over ``kg, vg [T, D]``, or of a batch of them
    (``[B, R, D]`` over ``[B, T, D]``: one kv head per batch entry, one call for all heads).

    ``visible`` (``[R]`` ints) lets row r see keys ``[0, visible[r])`` only (a causal suffix).
    Returns ``(out [(B,) R, D], lse [(B,) R])``.
    """
    single = qr.ndim == 2
    if single:
        qr, kg, vg = qr[None], kg[None], vg[None]
    batch, rows, _ = qr.shape
    out = np.zeros((batch, rows, vg.shape[2]), np.float32)
    lse = np.full((batch, rows), -np.inf, np.float32)
    total = kg.shape[1]
    if total and rows:
        step = max(1, SCORE_BYTES // (4 * total * batch))
        for lo in range(0, rows, step):
            hi = min(rows, lo + step)
            out[:, lo:hi], lse[:, lo:hi] = _softmax_rows(qr[:, lo:hi], kg, vg, scale,
                                                         None if visible is None else visible[lo:hi])
    return (out[0], lse[0]) if single else (out, lse)


def _softmax_rows(qr, kg, vg, scale: float, visible):
    scores = np.matmul(qr, kg.transpose(0, 2, 1))
    scores *= np.float32(scale)
    if visible is not None:
        scores[:, np.arange(kg.shape[1])[None, :] >= visible[:, None]] = -np.inf
    peak = scores.max(axis=2)
    seen = np.isfinite(peak)
    peak = np.where(seen, peak, 0).astype(np.float32)
    scores -= peak[:, :, None]
    np.exp(scores, out=scores)
    weight = np.where(seen, scores.sum(axis=2), 1).astype(np.float32)
    out = np.matmul(scores, vg)
    out /= weight[:, :, None]
    with np.errstate(divide="ignore"):
        return out, np.where(seen, peak + np.log(weight), -np.inf)


def is_grouped(head_map: np.ndarray, kv_heads: int) -> bool:
    """Is ``head_map`` the usual grouping over all ``kv_heads`` (so queries reshape into groups)?"""
    q_heads = len(head_map)
    return q_heads % kv_heads == 0 and bool(np.array_equal(head_map, np.arange(q_heads) // (q_heads // kv_heads)))


def _attend(q, k, v, head_map, scale, causal_suffix: bool):
    q_heads, rows, dim = q.shape
    head_map = identity_map(q_heads) if head_map is None else head_map
    scale = dim ** -0.5 if scale is None else scale
    kv_heads, total = k.shape[0], k.shape[1]
    if total == 0:
        return empty_result(q_heads, rows, v.shape[2])
    if is_grouped(head_map, kv_heads):
        group = q_heads // kv_heads
        visible = causal_visible(rows, total, group) if causal_suffix else None
        out, lse = attend_rows(q.reshape(kv_heads, group * rows, dim), k, v, scale, visible)
        return out.reshape(q_heads, rows, -1), lse.reshape(q_heads, rows)
    out, lse = empty_result(q_heads, rows, v.shape[2])
    for g, heads in head_groups(head_map):
        visible = causal_visible(rows, total, len(heads)) if causal_suffix else None
        o, s = attend_rows(q[heads].reshape(len(heads) * rows, dim), k[g], v[g], scale, visible)
        out[heads] = o.reshape(len(heads), rows, -1)
        lse[heads] = s.reshape(len(heads), rows)
    return out, lse


def attend_prefix(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, head_map: np.ndarray | None = None, scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Attention of ``q [H_q, M, D]`` over every key of a prefix ``k, v [H_kv, N, D]``."""
    return _attend(q, k, v, head_map, scale, causal_suffix=False)


def causal_visible(rows: int, suffix: int, groups: int = 1) -> np.ndarray:
    """Keys each row may see in a causal suffix: row m sees positions ``<= suffix - rows + m``."""
    return np.tile(np.arange(suffix - rows + 1, suffix + 1), groups)


def attend_suffix(
    q: np.ndarray, k_suf: np.ndarray, v_suf: np.ndarray, head_map: np.ndarray | None = None,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Causal attention of ``q [H_q, M, D]`` over the live suffix ``k_suf, v_suf [H_kv, S, D]``."""
    return _attend(q, k_suf, v_suf, head_map, scale, causal_suffix=True)
