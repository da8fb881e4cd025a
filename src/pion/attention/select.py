"""Sparse selectors over a stored prefix: block-mean and Quest, with per-block key summaries.

The exact algorithm (spec 6.4), shared by the server (``QUERY_SPARSE_AUTO*``) and the client's
in-process lane, so both pick the same tokens:

1. ``budget = B * K_top``; a prefix of at most ``budget`` tokens is attended densely.
2. ``N_full = floor(N / B) * B``; the tail ``[N_full, N)`` (the most recent tokens) is always kept.
3. Block scores per query head (GQA: a query head reads its kv head's summaries):
   block-mean ``q . mean(K[block]) / sqrt(D)``; Quest ``sum_d max(q_d Kmin_d, q_d Kmax_d) / sqrt(D)``,
   an upper bound of every ``q . k`` in the block, so it never misses a block whose true max score
   is among the top K.
4. One **shared** mask: scores averaged over the query heads, the top ``K_eff = min(K_top, N_full/B)``
   blocks (ties to the earlier block), in ascending block order, expanded to tokens, then the tail.

Pion adds per-head variants (selector ids 2 and 3): step 4 without the average, each query head
keeping its own top blocks (as Quest itself does), so a needle one head looks for is not diluted
by the others.

Summaries (``BlockSummary``: per kv head and block the mean, min and max key) are computed once
per prefix and block size (at store time for the default block size) and kept with the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pion.attention.dense import is_grouped

BLOCK_MEAN = 0
QUEST = 1
#: Pion's: the same scores, but every query head keeps its own top blocks (no shared mask)
QUEST_PER_HEAD = 2
BLOCK_MEAN_PER_HEAD = 3
SELECTOR_NAMES = {BLOCK_MEAN: "block-mean", QUEST: "quest", QUEST_PER_HEAD: "quest-per-head",
                  BLOCK_MEAN_PER_HEAD: "block-mean-per-head"}
PER_HEAD = {QUEST_PER_HEAD: QUEST, BLOCK_MEAN_PER_HEAD: BLOCK_MEAN}
DEFAULT_BLOCK = 64


@dataclass(frozen=True, slots=True)
class BlockSummary:
    """Per kv head and block: ``mean, kmin, kmax`` of ``[H_kv, n_blocks, D]`` (float32)."""

    block: int
    mean: np.ndarray
    kmin: np.ndarray
    kmax: np.ndarray

    @property
    def n_blocks(self) -> int:
        return self.mean.shape[1]

    @property
    def nbytes(self) -> int:
        return self.mean.nbytes + self.kmin.nbytes + self.kmax.nbytes



def summarize(k: np.ndarray, block: int) -> BlockSummary:
    """Summaries of the full blocks of a prefix ``k [H_kv, N, D]``."""
    if block <= 0:
        raise ValueError("block size must be > 0")
    heads, n, dim = k.shape
    full = (n // block) * block
    blocks = k[:, :full].reshape(heads, full // block, block, dim)
    return BlockSummary(block, blocks.mean(axis=2, dtype=np.float32), blocks.min(axis=2), blocks.max(axis=2))


def block_scores(q: np.ndarray, summary: BlockSummary, head_map: np.ndarray, selector: int) -> np.ndarray:
    """``[H_q, n_blocks]`` scores of one decode query ``q [H_q, D]``."""
    q_heads, dim = q.shape
    kv_heads = summary.mean.shape[0]
    if selector not in (BLOCK_MEAN, QUEST):
        raise ValueError(f"unknown selector {selector}")
    if is_grouped(head_map, kv_heads):  # every head in one batched product
        qg = q.reshape(kv_heads, q_heads // kv_heads, dim).transpose(0, 2, 1)
        if selector == BLOCK_MEAN:
            scores = np.matmul(summary.mean, qg)
        else:
            scores = np.matmul(summary.kmax, np.maximum(qg, 0)) + np.matmul(summary.kmin, np.minimum(qg, 0))
        scores = scores.transpose(0, 2, 1).reshape(q_heads, -1)
    else:
        scores = np.empty((q_heads, summary.n_blocks), np.float32)
        for h in range(q_heads):
            g, qh = int(head_map[h]), q[h]
            if selector == BLOCK_MEAN:
                scores[h] = summary.mean[g] @ qh
            else:
                scores[h] = summary.kmax[g] @ np.maximum(qh, 0) + summary.kmin[g] @ np.minimum(qh, 0)
    return scores / np.float32(np.sqrt(dim))


def top_blocks(shared: np.ndarray, k_top: int) -> np.ndarray:
    """Indices of the ``k_top`` highest shared scores (ties to the earlier block), ascending."""
    count = min(k_top, shared.shape[0])
    order = np.argsort(-shared, kind="stable")[:count]
    return np.sort(order)


def select_tokens(
    q: np.ndarray, n_tokens: int, summary: BlockSummary | None, head_map: np.ndarray, k_top: int, selector: int,
) -> np.ndarray | None:
    """Token ids to attend for a decode query ``q [H_q, D]``, ascending; None means all (dense).

    ``summary`` must summarise the same ``n_tokens`` prefix with the block size in use.
    """
    block = summary.block if summary is not None else 0
    if summary is None or n_tokens <= block * k_top:
        return None
    full = (n_tokens // block) * block
    if summary.n_blocks != full // block:
        raise ValueError(f"summary has {summary.n_blocks} blocks, the prefix {full // block}")
    shared = block_scores(q, summary, head_map, selector).mean(axis=0)
    chosen = top_blocks(shared, k_top)
    tokens = (chosen[:, None] * block + np.arange(block)[None, :]).reshape(-1)
    return np.concatenate([tokens, np.arange(full, n_tokens)]).astype(np.intp)


def select_tokens_per_head(
    q: np.ndarray, n_tokens: int, summary: BlockSummary | None, head_map: np.ndarray, k_top: int, selector: int,
) -> list[np.ndarray] | None:
    """Per query head, its own token ids (steps 1-3 and 4 without the average); None means dense."""
    block = summary.block if summary is not None else 0
    if summary is None or n_tokens <= block * k_top:
        return None
    full = (n_tokens // block) * block
    scores = block_scores(q, summary, head_map, PER_HEAD.get(selector, selector))
    tail = np.arange(full, n_tokens)
    out = []
    for h in range(q.shape[0]):
        chosen = top_blocks(scores[h], k_top)
        tokens = (chosen[:, None] * block + np.arange(block)[None, :]).reshape(-1)
        out.append(np.concatenate([tokens, tail]).astype(np.intp))
    return out
