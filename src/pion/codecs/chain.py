"""Block-chain hashes of token ids: the wire contract of ``KV.PREFIX.MATCH`` and ``CHAIN``.

Block ``i`` covers tokens ``[i*block_size, (i+1)*block_size)``; only full blocks are hashed.
``hash_i = sha256(hash_{i-1} || token ids of block i as little-endian u32)[:16]``, with
``hash_{-1}`` = 16 zero bytes. Two prefixes share block ``i``'s hash only if they share every
token up to the end of that block (as vLLM's prefix caching), so one dict lookup per block finds
the longest shared prefix. Client and server both use this function.
"""

from __future__ import annotations

import hashlib

import numpy as np

HASH_BYTES = 16
ROOT = bytes(HASH_BYTES)


def token_bytes(tokens) -> bytes:
    """Token ids as the little-endian u32 bytes that are hashed and sent on the wire."""
    if isinstance(tokens, bytes | bytearray | memoryview):
        return bytes(tokens)
    return np.asarray(tokens, dtype="<u4").tobytes()


def block_hashes(tokens, block_size: int) -> list[bytes]:
    """The chain of 16-byte hashes of the full blocks of ``tokens`` (ids or their u32 LE bytes)."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    data = token_bytes(tokens)
    if len(data) % 4:
        raise ValueError("token bytes must be a multiple of 4")
    step = 4 * block_size
    parent = ROOT
    out: list[bytes] = []
    for offset in range(0, len(data) - step + 1, step):
        parent = hashlib.sha256(parent + data[offset:offset + step]).digest()[:HASH_BYTES]
        out.append(parent)
    return out
