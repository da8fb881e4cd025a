"""Helpers of the Stage-2 server tests: random prefixes, the wire calls, the float64 reference."""

from __future__ import annotations

import numpy as np
from tests.unit.attention import reference as ref

TOL = 1e-5


def prefix(rng, heads, n, dim):
    """A prefix as the reference ships it: ``[H, N, D]`` K and V."""
    k = (rng.standard_normal((heads, n, dim)) * 1.5).astype(np.float32)
    v = rng.standard_normal((heads, n, dim)).astype(np.float32)
    return k, v


def tokens_major(cube):
    return np.ascontiguousarray(np.transpose(cube, (1, 0, 2)))


def store(r, sid, layer, k, v):
    heads, n, dim = k.shape
    return r.execute_command("ATTEND.PREFIX.STORE", sid, layer, heads, n, dim, k.tobytes(), v.tobytes())


def out_and_lse(raw, heads, rows, dim):
    out = np.frombuffer(raw[: heads * rows * dim * 4], "<f4").reshape(heads, rows, dim)
    lse = np.frombuffer(raw[heads * rows * dim * 4:], "<f4").reshape(heads, rows) if rows > 1 else None
    return out, lse


def reference(q, k, v, head_map, scale=None):
    """Dense float64 attention of ``q [H_q, M, D]`` over a ``[H, N, D]`` prefix."""
    scale = q.shape[2] ** -0.5 if scale is None else scale
    return ref.attention(q, tokens_major(k), tokens_major(v), head_map, scale)


def store_vstore_prefix(r, ns, layer, rows_k, rows_v, fmt):
    """A prompt cache's prefix: token-major rows ``[N, H_kv*D]`` in V-store sessions ``ns_pk``/``ns_pv``."""
    for side, rows in (("_pk", rows_k), ("_pv", rows_v)):
        r.execute_command("V.CREATE", ns + side, rows.shape[1], "VQUANT", fmt)
        r.execute_command("V.STOREBATCH", ns + side, layer, 0, len(rows), rows.astype(np.float32).tobytes())


def decoded(r, sid, layer, n):
    raw = r.execute_command("V.FETCH", sid, layer, "RANGE", 0, n)
    return np.frombuffer(raw, "<f4").reshape(n, -1)
