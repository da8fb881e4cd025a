"""``KV.PREFIX.MATCH``: the longest stored prefix that shares a request's leading token blocks.

The client sends the 16-byte chain hashes of its prompt's full blocks (``pion.codecs.chain``)
and, preferably, the token ids. One dict lookup per block finds how deep the chain goes; the
deepest namespaces are then checked: their stored token ids must equal the request's (so a hash
collision cannot serve the wrong rows) and they must hold every row of those blocks, on every
layer of both sides, like a LOOKUP hit. Among several, the most recently used wins.

``match_tokens`` (MATCH ... TOKENS ... SEED seed WITHTOKENS) goes further, as mlx-lm's
``fetch_nearest_cache``: the answer is the exact number of leading request tokens a prefix holds,
not only whole blocks (a 600-token prefix serves all 600 tokens of a longer prompt), the
prefixes of every block size the server indexes are searched (the server hashes the request's
tokens with the seed for the other sizes, so a client with another ``block_size`` is not a
silent miss), and prefixes shorter than one block are found through their first token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pion.codecs.chain import block_hashes

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


#: short prefixes (no full block) compared per MATCH, most recently used first
MAX_SHORT_CANDIDATES = 64


def common_prefix(stored: np.ndarray, given: np.ndarray) -> int:
    """How many leading token ids the two arrays share."""
    n = min(len(stored), len(given))
    diff = np.flatnonzero(stored[:n] != given[:n])
    return n if len(diff) == 0 else int(diff[0])


def match_tokens(space: KVSpace, block_size: int, hashes: list[bytes], tokens: np.ndarray, seed: bytes | None,
                 ) -> tuple[bytes | None, int, int, int, int, int]:
    """``(namespace, blocks, tokens held, its block size, tokens it stores, seq)`` of the prefix
    holding the most leading request tokens (complete, of this seed when given), or zeros."""
    best: tuple[int, int, bytes, int, int, int] | None = None  # (tokens, last use, ns, blocks, bs, seq)
    registry = space.registry
    sizes = [block_size] + ([bs for bs in registry.chain_index if bs != block_size] if seed is not None else [])
    token_blob = tokens.astype("<u4").tobytes()

    def consider(ns: bytes, floor: int, bs: int) -> None:
        nonlocal best
        prefix = registry.get(ns)
        if prefix is None or prefix.chain is None or (seed is not None and prefix.chain.seed != seed):
            return
        held = common_prefix(prefix.chain.tokens, tokens)
        if held < max(floor, 1):
            return
        complete, seq = space.completeness(ns, held)
        used = space.evictor.last_use.get(ns, 0)
        if complete and (best is None or (held, used) > (best[0], best[1])):
            best = (held, used, ns, held // bs, bs, seq)

    for bs in sizes:
        index = registry.chain_index.get(bs)
        if not index:
            continue
        own = hashes if bs == block_size else block_hashes(token_blob, bs, seed)
        depth = min(chain_depth(index, own), len(tokens) // bs)
        while depth > 0 and (best is None or best[0] < depth * bs):
            for ns, pos in index.get(own[depth - 1], ()):
                if pos == depth - 1:
                    consider(ns, depth * bs, bs)
            if best is not None:
                break
            depth -= 1
    if seed is not None and len(tokens) and best is None:
        short = registry.short_index.get((seed, int(tokens[0])), ())
        recent = sorted(short, key=lambda ns: space.evictor.last_use.get(ns, 0), reverse=True)
        for ns in recent[:MAX_SHORT_CANDIDATES]:
            prefix = registry.get(ns)
            consider(ns, 1, prefix.chain.block_size if prefix is not None and prefix.chain is not None else 1)
    if best is None:
        return None, 0, 0, 0, 0, 0
    stored = registry.get(best[2]).token_count() or 0
    return best[2], best[3], best[0], best[4], stored, best[5]
