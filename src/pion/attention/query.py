"""One Stage-2 query, every form: which prefix tokens to attend, the kernels, the suffix merge.

A ``Query`` says what the command asked (the query rows, head map, scale, window, and at most
one of: a per-call top-k, per-head token lists, or a selector), plus an optional live suffix.
``answer(view, query)`` runs it over a ``PrefixView`` and returns a ``Result``. It reads the
view and changes nothing: a summary it had to compute comes back in the result for the caller
to keep (on the thread that owns the tier).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pion.attention.dense import attend_prefix, attend_suffix
from pion.attention.merge import merge
from pion.attention.select import BlockSummary, select_tokens, summarize
from pion.attention.sparse import attend_indexed, attend_tokens, top_k_tokens
from pion.attention.tier import PrefixView


@dataclass(frozen=True, slots=True)
class Selector:
    """``QUERY_SPARSE_AUTO``: blocks of ``block`` tokens, ``k_top`` of them, selector id 0 or 1."""

    block: int
    k_top: int
    kind: int


@dataclass(slots=True)
class Query:
    q: np.ndarray  # [H_q, M, D]
    head_map: np.ndarray  # [H_q] -> kv head
    scale: float
    #: attend only the last ``window`` prefix tokens (0: all of them)
    window: int = 0
    top_k: int = 0
    indices: list[np.ndarray] | None = None
    selector: Selector | None = None
    k_suffix: np.ndarray | None = None  # [H_kv, S, D]
    v_suffix: np.ndarray | None = None


@dataclass(slots=True)
class Result:
    out: np.ndarray  # [H_q, M, D]
    lse: np.ndarray  # [H_q, M]
    #: prefix tokens attended (per query head on average) and the prefix length they came from
    attended: float
    prefix_tokens: int
    #: a summary computed for this query, for the caller to keep with the view
    new_summary: BlockSummary | None = None
    summary_start: int = 0


def window_start(n_tokens: int, window: int) -> int:
    return n_tokens - window if 0 < window < n_tokens else 0


def answer(view: PrefixView, query: Query, kv_heads: int | None = None) -> Result:
    """Attention of ``query`` over the prefix in ``view`` (merged with the suffix when given).

    ``kv_heads``: split the rows into that many heads of the query's head dim (default: as built).
    """
    if kv_heads is not None:
        view = view.shaped(kv_heads, query.q.shape[2])
    start = window_start(view.n_tokens, query.window)
    k, v = view.k[start:], view.v[start:]
    total = k.shape[0]
    new_summary = None
    if query.indices is not None:
        picked = [ids[ids >= start] - start for ids in query.indices]
        out, lse = attend_indexed(query.q, k, v, picked, query.head_map, query.scale)
        attended = float(np.mean([len(p) for p in picked]))
    elif query.top_k and query.top_k < total and query.q.shape[1] == 1:
        picked = top_k_tokens(query.q, k, query.head_map, query.top_k)
        out, lse = attend_indexed(query.q, k, v, picked, query.head_map, query.scale)
        attended = float(query.top_k)
    elif query.selector is not None:
        tokens, new_summary = choose(view, k, start, query)
        out, lse = attend_tokens(query.q, k, v, tokens, query.head_map, query.scale)
        attended = float(total if tokens is None else len(tokens))
    else:
        out, lse = attend_prefix(query.q, k, v, query.head_map, query.scale)
        attended = float(total)
    if query.k_suffix is not None:
        out_s, lse_s = attend_suffix(query.q, query.k_suffix, query.v_suffix, query.head_map, query.scale)
        out, lse = merge(out, lse, out_s, lse_s)
    return Result(out, lse, attended, total, new_summary, start)


def choose(view: PrefixView, k: np.ndarray, start: int, query: Query) -> tuple[np.ndarray | None, BlockSummary | None]:
    """The selector's tokens (relative to ``start``), and a summary it had to build (or None)."""
    sel = query.selector
    if k.shape[0] <= sel.block * sel.k_top:
        return None, None
    summary = view.summaries.get((sel.block, start))
    built = None
    if summary is None:
        summary = built = summarize(k, sel.block)
    summary = summary.as_heads(k.shape[1], k.shape[2])
    tokens = select_tokens(query.q[:, 0, :], k.shape[0], summary, query.head_map, sel.k_top, sel.kind)
    return tokens, built
