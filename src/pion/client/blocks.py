"""The block-hash chain that indexes a prefix by fixed-size token blocks.

Block ``i`` of a token sequence is ``tokens[i*B:(i+1)*B]``; its hash is
``sha256(parent || u32le(tokens of the block))[:16]``, ``parent`` being the previous block's hash
(the chain's 16-byte seed for block 0: ``ROOT``, 16 zero bytes, unless ``SEED`` gave another).
Two sequences of the same seed share the hashes of exactly their common leading full blocks, so
the server (``KV.PREFIX.MATCH``) finds the longest stored block-aligned head of a prompt with
one lookup per block. Only full blocks are hashed. Give each model (and codec schema) its own
seed, ``chain_seed(fingerprint)``: register with ``SEED`` and hash MATCH requests from the same
seed, and another model's prefixes of the same token ids can never be matched.

The function itself lives in ``pion.codecs.chain``, the leaf package client and server share,
so both sides hash the same way by construction; this module adds the wire helpers.
"""

from __future__ import annotations

from collections.abc import Sequence

from pion.codecs.chain import HASH_BYTES, ROOT, block_hashes, chain_seed, check_root, token_bytes

__all__ = [
    "DEFAULT_BLOCK_SIZE", "HASH_BYTES", "ROOT", "block_hashes", "chain_seed", "check_root", "hash_blob", "token_blob",
]

DEFAULT_BLOCK_SIZE = 256


def hash_blob(hashes: Sequence[bytes]) -> bytes:
    """The wire form of a chain: the hashes concatenated, ``HASH_BYTES`` each, in token order."""
    return b"".join(hashes)


def token_blob(token_ids: Sequence[int]) -> bytes:
    """Token ids as little-endian u32 (what ``CHAIN`` and ``MATCH`` carry)."""
    return token_bytes(token_ids)
