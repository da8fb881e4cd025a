"""What every vector search path shares: the merge of (doc, distance) candidates into one answer
per document, nearest first, and the row gather that feeds an exact scan.

Kept apart from ``vectors`` (the field) and ``hnsw_graph`` (the graph) because both rank with it.
"""

from __future__ import annotations

import numpy as np

EMPTY_IDS = np.zeros(0, dtype=np.int64)
EMPTY_DISTS = np.zeros(0, dtype=np.float32)


def gather(rows: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``rows[cand]``: ``take`` measured 31 us against fancy indexing's 43 us for 2,000 x 128
    (and against 70 us for ``take`` into a reused buffer)."""
    return rows.take(cand, axis=0)


def best_per_doc(docs: np.ndarray, dists: np.ndarray, k: int | None,
                  single: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Nearest first (ties by doc id), one entry per document (its nearest vector), at most k;
    dead slots dropped. ``single``: every document has one vector (no merge needed)."""
    live = docs >= 0
    if not live.all():
        docs, dists = docs[live], dists[live]
    if len(docs) == 0:
        return EMPTY_IDS, EMPTY_DISTS
    if k is not None and len(docs) > 4 * k:
        part = np.argpartition(dists, 4 * k)[: 4 * k]
        docs, dists = docs[part], dists[part]
    order = np.lexsort((docs, dists))
    docs, dists = docs[order], dists[order]
    if single:
        if k is not None:
            docs, dists = docs[:k], dists[:k]
        return docs, dists.astype(np.float32, copy=False)
    _, first = np.unique(docs, return_index=True)
    first.sort()
    docs, dists = docs[first], dists[first]
    if k is not None:
        docs, dists = docs[:k], dists[:k]
    return docs, dists.astype(np.float32)
