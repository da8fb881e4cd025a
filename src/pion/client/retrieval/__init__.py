"""Retrieved-chunk K/V: ``HybridRetrievalCache`` composes cached chunks into a prompt.

Importing this package imports no model runtime; see ``cache.py`` for the design, ``rope.py``
for the exact re-rotation and ``repair.py`` for EPIC / CacheBlend repair.
"""

from __future__ import annotations

from pion.client.retrieval.cache import BACKENDS, HybridRetrievalCache
from pion.client.retrieval.repair import Repair
from pion.client.retrieval.rope import RopeSpec, RotationRefused

__all__ = ["BACKENDS", "HybridRetrievalCache", "Repair", "RopeSpec", "RotationRefused"]
