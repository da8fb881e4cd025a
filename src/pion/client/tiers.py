"""Which storage a prompt cache URL names: one Pion server, Pion cluster nodes, or a Redis Cluster.

Kept apart from ``cluster`` and ``redis_tier`` so that neither has to import the other to choose.
"""

from __future__ import annotations

import urllib.parse

from pion.client.client import PionClient


def open_client(url: str):
    """The client for a prompt cache URL: ``PionClient`` for one server, ``PionClusterClient``
    for ``pion+cluster://``, ``RedisClusterStore`` for ``redis+cluster://``."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme in ("pion+cluster", "pions+cluster"):
        from pion.client.cluster import PionClusterClient

        return PionClusterClient(url)
    if scheme in ("redis+cluster", "rediss+cluster"):
        from pion.client.redis_tier import RedisClusterStore

        return RedisClusterStore(url)
    return PionClient(url)
