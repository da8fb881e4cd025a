"""The MoE expert tier: experts of mixture-of-experts models served from their safetensors shards.

An engine: it imports ``pion.codecs`` and ``pion.paging``, never the server. ``ExpertTier`` is
the component the server wires (``--moe-cache DIR --moe-cache-mib N``); ``shards`` reads the
files, ``layout`` finds the experts in them, ``resident`` keeps the budgeted copies,
``histograms`` counts fetches per namespace.
"""

from pion.moe.tier import DISABLED_STATS, MAX_MODELS, ExpertTier, Pruned, TierError

__all__ = ["DISABLED_STATS", "MAX_MODELS", "ExpertTier", "Pruned", "TierError"]
