"""One Stage-2 query, every form: which prefix tokens to attend, the kernels, the suffix merge.

A ``Query`` says what the command asked (the query rows, head map, scale, window, and at most
one of: a per-call top-k, per-head token lists, or a selector), plus an optional live suffix.
``answer(view, query)`` runs it over a ``PrefixView`` and returns a ``Result``. ``pieces`` cuts
a dense query into independent parts (ranges of prefix tokens, the suffix) for worker threads;
``combine`` merges their results by the online softmax into what ``answer`` gives. Nothing here
changes the view: a summary a query had to compute comes back in the result for the caller to
keep (on the thread that owns the tier).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial, reduce

import numpy as np

from pion.attention.dense import attend_prefix, attend_suffix, empty_result
from pion.attention.merge import merge
from pion.attention.select import PER_HEAD, BlockSummary, select_tokens, select_tokens_per_head, summarize
from pion.attention.sparse import attend_indexed, attend_tokens, top_k_tokens
from pion.attention.tier import PrefixView

#: a part of a split query gets at least this many prefix tokens
MIN_PART_TOKENS = 4096


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

    def is_dense(self, total: int) -> bool:
        """Does it attend every one of the ``total`` prefix tokens of its window?"""
        top_k = self.top_k and self.q.shape[1] == 1 and self.top_k < total
        return self.indices is None and self.selector is None and not top_k


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


def answer(view: PrefixView, query: Query) -> Result:
    """Attention of ``query`` over the prefix in ``view`` (merged with the suffix when given)."""
    start = window_start(view.n_tokens, query.window)
    k, v = view.k[:, start:], view.v[:, start:]
    total = k.shape[1]
    new_summary = None
    if query.indices is not None:
        picked = [ids[ids >= start] - start for ids in query.indices]
        out, lse = attend_indexed(query.q, k, v, picked, query.head_map, query.scale)
        attended = float(np.mean([len(p) for p in picked]))
    elif query.selector is None and not query.is_dense(total):
        picked = top_k_tokens(query.q, k, query.head_map, query.top_k)
        out, lse = attend_indexed(query.q, k, v, picked, query.head_map, query.scale)
        attended = float(min(query.top_k, total))
    elif query.selector is not None:
        tokens, new_summary = choose(view, k, start, query)
        if isinstance(tokens, list):
            out, lse = attend_indexed(query.q, k, v, tokens, query.head_map, query.scale)
            attended = float(np.mean([len(t) for t in tokens]))
        else:
            out, lse = attend_tokens(query.q, k, v, tokens, query.head_map, query.scale)
            attended = float(total if tokens is None else len(tokens))
    else:
        out, lse = attend_prefix(query.q, k, v, query.head_map, query.scale)
        attended = float(total)
    if query.k_suffix is not None:
        out, lse = merge(out, lse, *attend_suffix(query.q, query.k_suffix, query.v_suffix, query.head_map, query.scale))
    return Result(out, lse, attended, total, new_summary, start)


def choose(view: PrefixView, k: np.ndarray, start: int, query: Query):
    """The selector's tokens (relative to ``start``; a list per head for the per-head selectors),
    and a summary it had to build (or None)."""
    sel = query.selector
    if k.shape[1] <= sel.block * sel.k_top:
        return None, None
    summary = view.summaries.get((sel.block, start))
    built = None
    if summary is None:
        summary = built = summarize(k, sel.block)
    pick = select_tokens_per_head if sel.kind in PER_HEAD else select_tokens
    tokens = pick(query.q[:, 0, :], k.shape[1], summary, query.head_map, sel.k_top, sel.kind)
    return tokens, built


def cost(view: PrefixView, query: Query) -> int:
    """About how many floats the query reads (what decides whether it is worth a worker thread)."""
    start = window_start(view.n_tokens, query.window)
    total = view.n_tokens - start
    width = view.kv_heads * view.head_dim
    rows = query.q.shape[1]
    suffix = 0 if query.k_suffix is None else 2 * query.k_suffix.size * rows
    if query.indices is not None:
        return sum(len(ids) for ids in query.indices) * 2 * view.head_dim + suffix
    if query.selector is not None and total > query.selector.block * query.selector.k_top:
        sel = query.selector
        if (sel.block, start) not in view.summaries:
            return total * width + suffix
        return (3 * (total // sel.block) + 2 * sel.block * sel.k_top) * width + suffix
    if not query.is_dense(total):
        return total * width + suffix
    return 2 * total * width * rows + suffix


# -- splitting a dense query over worker threads -------------------------------------------------


def pieces(view: PrefixView, query: Query, parts: int) -> list[Callable[[], Result]]:
    """Independent jobs whose ``combine``d results equal ``answer(view, query)``.

    Only dense queries are cut (into ranges of prefix tokens, plus the suffix); the others are
    one job: their prefix part is small once the tokens are chosen.
    """
    start = window_start(view.n_tokens, query.window)
    total = view.n_tokens - start
    parts = min(parts, total // MIN_PART_TOKENS)
    if not query.is_dense(total) or parts < 2:
        return [partial(answer, view, query)]
    bounds = np.linspace(start, view.n_tokens, parts + 1).astype(int)
    jobs: list[Callable[[], Result]] = [partial(_prefix_range, view, query, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    if query.k_suffix is not None:
        jobs.append(partial(_suffix_part, query))
    return jobs


def _prefix_range(view: PrefixView, query: Query, lo: int, hi: int) -> Result:
    out, lse = attend_prefix(query.q, view.k[:, lo:hi], view.v[:, lo:hi], query.head_map, query.scale)
    return Result(out, lse, float(hi - lo), hi - lo)


def _suffix_part(query: Query) -> Result:
    out, lse = attend_suffix(query.q, query.k_suffix, query.v_suffix, query.head_map, query.scale)
    return Result(out, lse, 0.0, 0)


def combine(results: list[Result]) -> Result:
    """Merge the results of ``pieces`` into one."""
    if len(results) == 1:
        return results[0]

    def step(a: Result, b: Result) -> Result:
        out, lse = merge(a.out, a.lse, b.out, b.lse)
        return Result(out, lse, a.attended + b.attended, a.prefix_tokens + b.prefix_tokens)

    first = Result(*empty_result(*results[0].out.shape), 0.0, 0)
    return reduce(step, results, first)
