"""Cache policies for expert paging, and the offline optimum they are measured against.

A leaf: pure Python and numpy, no other pion package. The server's expert tier (``pion.moe``),
the client's expert cache (``pion.client.moe``) and ``benchmarks/bench_moe.py`` use the same
code, so a hit rate the benchmark reports for a trace is the hit rate the tier gets on it.
"""

from pion.paging.policies import DEFAULT_POLICY, POLICIES, LRUPolicy, NextUsePolicy, Policy, make_policy
from pion.paging.replay import belady_hits, replay_hits

__all__ = [
    "DEFAULT_POLICY", "POLICIES", "LRUPolicy", "NextUsePolicy", "Policy", "belady_hits", "make_policy", "replay_hits",
]
