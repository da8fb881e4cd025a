"""``KV.PREFIX.MATCH``: the longest stored prefix that shares a request's leading token blocks.

The client sends the 16-byte chain hashes of its prompt's full blocks (``pion.codecs.chain``)
and, preferably, the token ids. One dict lookup per block finds how deep the chain goes; the
deepest namespaces are then checked: their stored token ids must equal the request's (so a hash
collision cannot serve the wrong rows) and they must hold every row of those blocks, on every
layer of both sides, like a LOOKUP hit. Among several, the most recently used wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pion.kvcache.space import KVSpace


def chain_depth(index: dict[bytes, list[tuple[bytes, int]]], hashes: list[bytes]) -> int:
    """How many leading hashes some stored chain has at the same positions."""
    depth = 0
    for position, digest in enumerate(hashes):
        if not any(pos == position for _, pos in index.get(digest, ())):
            break
        depth = position + 1
    return depth


def agreeing_blocks(stored: np.ndarray, given: np.ndarray, block_size: int, blocks: int) -> int:
    """How many of the first ``blocks`` blocks have equal token ids in both arrays."""
    n = blocks * block_size
    diff = np.flatnonzero(stored[:n] != given[:n])
    return blocks if len(diff) == 0 else int(diff[0]) // block_size


def match(space: KVSpace, block_size: int, hashes: list[bytes], tokens: np.ndarray | None) -> tuple[bytes | None, int, int]:
    """``(namespace, blocks, seq)`` of the best complete match, or ``(None, 0, 0)``."""
    index = space.registry.chain_index.get(block_size)
    if not index:
        return None, 0, 0
    depth = chain_depth(index, hashes)
    if tokens is not None:
        depth = min(depth, len(tokens) // block_size)
    while depth > 0:
        best: tuple[int, bytes, int] | None = None
        for ns, pos in index.get(hashes[depth - 1], ()):
            prefix = space.registry.get(ns)
            if pos != depth - 1 or prefix is None or prefix.chain is None:
                continue
            if tokens is not None and agreeing_blocks(prefix.chain.tokens, tokens, block_size, depth) < depth:
                continue
            complete, seq = space.completeness(ns, depth * block_size)
            used = space.evictor.last_use.get(ns, 0)
            if complete and (best is None or used > best[0]):
                best = (used, ns, seq)
        if best is not None:
            return best[1], depth, best[2]
        depth -= 1
    return None, 0, 0
