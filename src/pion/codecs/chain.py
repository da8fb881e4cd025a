"""Block-chain hashes of token ids: the wire contract of ``KV.PREFIX.MATCH`` and ``CHAIN``.

Block ``i`` covers tokens ``[i*block_size, (i+1)*block_size)``; only full blocks are hashed.
``hash_i = sha256(hash_{i-1} || token ids of block i as little-endian u32)[:16]``, with
``hash_{-1}`` = the chain's 16-byte seed (``root``; 16 zero bytes, ``ROOT``, by default). Two
prefixes share block ``i``'s hash only if they share the seed and every token up to the end of
that block (as vLLM's prefix caching), so one dict lookup per block finds the longest shared
prefix. The seed keeps apart chains that must never match each other although their token ids
are equal: another model, tokenizer or codec schema (the client derives it from its manifest).
Client and server both use this function.
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


def check_root(root) -> bytes:
    """``root`` as bytes, or ValueError unless it is exactly ``HASH_BYTES`` bytes."""
    data = bytes(root) if isinstance(root, bytes | bytearray | memoryview) else None
    if data is None or len(data) != HASH_BYTES:
        raise ValueError(f"root must be {HASH_BYTES} bytes")
    return data


def chain_seed(identity: bytes | str) -> bytes:
    """A 16-byte seed derived from what must not be shared (model fingerprint, codec schema, ...).

    Any stable bytes will do; equal identities give equal seeds, so the same model's prompts
    still match each other across clients.
    """
    data = identity.encode() if isinstance(identity, str) else bytes(identity)
    return hashlib.sha256(b"pion.chain.seed\0" + data).digest()[:HASH_BYTES]


def block_hashes(tokens, block_size: int, root: bytes = ROOT) -> list[bytes]:
    """The chain of 16-byte hashes of the full blocks of ``tokens`` (ids or their u32 LE bytes).

    ``root`` (16 bytes) seeds the chain: chains with different seeds share no hash.
    """
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    parent = check_root(root)
    data = token_bytes(tokens)
    if len(data) % 4:
        raise ValueError("token bytes must be a multiple of 4")
    step = 4 * block_size
    out: list[bytes] = []
    for offset in range(0, len(data) - step + 1, step):
        parent = hashlib.sha256(parent + data[offset:offset + step]).digest()[:HASH_BYTES]
        out.append(parent)
    return out
