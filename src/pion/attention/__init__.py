"""attention: numpy kernels for attention over a stored K/V prefix (Stage 2), and the warm tier.

- ``dense``: attention over a token-major prefix and a causal suffix, with the row-wise LSE;
- ``merge``: the online-softmax merge of two partial results (prefix + suffix);
- ``select``: block summaries and the block-mean / Quest selectors (the spec's exact algorithm);
- ``sparse``: attention over selected tokens (shared, or per head);
- ``query``: the whole computation of each ATTEND.PREFIX form, on arrays;
- ``tier``: prefixes ready for attention under a byte budget, and the cold registry.

A leaf: numpy only (BLAS through matrix products), no other pion package, no torch.
"""

from pion.attention.dense import attend_prefix, attend_suffix, grouped_map, identity_map
from pion.attention.merge import merge
from pion.attention.select import BLOCK_MEAN, DEFAULT_BLOCK, QUEST, BlockSummary, select_tokens, summarize
from pion.attention.tier import PrefixView, WarmTier

__all__ = [
    "BLOCK_MEAN", "DEFAULT_BLOCK", "QUEST", "BlockSummary", "PrefixView", "WarmTier", "attend_prefix",
    "attend_suffix", "grouped_map", "identity_map", "merge", "select_tokens", "summarize",
]
