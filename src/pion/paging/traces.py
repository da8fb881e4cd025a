"""Synthetic routing traces, the two kinds the expert-paging literature measures on.

- ``uniform``: every token draws its top-k experts per layer uniformly without replacement. No
  policy can beat the cache fraction here (hit rate = c/N in expectation): a sanity check.
- ``zipf_markov``: each layer ranks its experts in a random order and draws with Zipf(s)
  probabilities (rank r weighs r**-s), and each of a token's k slots keeps the previous token's
  expert with probability ``stay`` (the temporal locality real routers show). The field's
  reference case is s = 1.1 over 64 experts x 24 layers with top-8.

Both return keys ``layer * n_experts + expert`` in fetch order: token-major, then layer, then the
k experts of that layer (the form ``pion.paging.replay`` takes).
"""

from __future__ import annotations

import numpy as np


def uniform(n_tokens: int, n_layers: int, n_experts: int, top_k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n_tokens, n_layers, top_k), dtype=np.int64)
    for t in range(n_tokens):
        for layer in range(n_layers):
            out[t, layer] = layer * n_experts + rng.choice(n_experts, top_k, replace=False)
    return out.reshape(-1)


def zipf_markov(n_tokens: int, n_layers: int, n_experts: int, top_k: int, s: float = 1.1,
                stay: float = 0.5, seed: int = 0) -> np.ndarray:
    """Zipf(s) popularity per layer (a random rank order each), with per-slot stickiness ``stay``."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_experts + 1, dtype=np.float64) ** -s
    ranks = [rng.permutation(n_experts) for _ in range(n_layers)]  # rank -> expert
    rank_of = [np.argsort(order) for order in ranks]  # expert -> rank
    out = np.empty((n_tokens, n_layers, top_k), dtype=np.int64)
    previous = [None] * n_layers
    for t in range(n_tokens):
        for layer in range(n_layers):
            chosen: list[int] = []
            if previous[layer] is not None:
                keep = rng.random(top_k) < stay
                chosen = [int(e) for e, k in zip(previous[layer], keep, strict=True) if k]
            p = weights.copy()
            p[rank_of[layer][chosen]] = 0.0
            p /= p.sum()
            fresh = rng.choice(n_experts, top_k - len(chosen), replace=False, p=p)
            picked = np.array(chosen + [int(ranks[layer][r]) for r in fresh], dtype=np.int64)
            previous[layer] = picked
            out[t, layer] = layer * n_experts + picked
    return out.reshape(-1)
