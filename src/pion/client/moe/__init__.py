"""MoE expert paging on the client: experts stay on the server, the process keeps a budget of them.

``ExpertSource`` fetches one model's experts (local lane or RESP), ``ExpertCache`` keeps a byte
budget of them with prefetch and stall accounting. Both are runtime-free (numpy); the
transformers integration is ``pion.client.adapters.moe_transformers.load_paged_moe``.
"""

from pion.client.moe.cache import CacheStats, ExpertCache
from pion.client.moe.source import ExpertPruned, ExpertSource

__all__ = ["CacheStats", "ExpertCache", "ExpertPruned", "ExpertSource"]
