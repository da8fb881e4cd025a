"""The K/V engine behind the shared prompt cache: V-store sessions of encoded rows, the prefix
registry with manifests and block chains, eviction by byte budget, the stats ledger, and the SSM
and STATE substrates. Pure data structures: the server's command modules parse and log, this
package keeps the state (one ``KVSpace`` per tenant, inside a ``KVEngine``).
"""

from pion.kvcache.space import KVEngine, KVSpace

__all__ = ["KVEngine", "KVSpace"]
