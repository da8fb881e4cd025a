"""The block-hash chain that indexes a prefix by fixed-size token blocks.

Block ``i`` of a token sequence is ``tokens[i*B:(i+1)*B]``; its hash is
``sha256(parent || u32le(tokens of the block))[:16]``, ``parent`` being the previous block's hash
(16 zero bytes for block 0). Two sequences share the hashes of exactly their common leading full
blocks, so the server (``KV.PREFIX.MATCH``) finds the longest stored block-aligned head of a
prompt with one lookup per block. Only full blocks are hashed.

The function itself lives in ``pion.codecs.chain``, the leaf package client and server share,
so both sides hash the same way by construction; this module adds the wire helpers.
"""

from __future__ import annotations

from collections.abc import Sequence

from pion.codecs.chain import HASH_BYTES, ROOT, block_hashes, token_bytes

__all__ = ["DEFAULT_BLOCK_SIZE", "HASH_BYTES", "ROOT", "block_hashes", "hash_blob", "token_blob"]

DEFAULT_BLOCK_SIZE = 256


def hash_blob(hashes: Sequence[bytes]) -> bytes:
    """The wire form of a chain: the hashes concatenated, ``HASH_BYTES`` each, in token order."""
    return b"".join(hashes)


def token_blob(token_ids: Sequence[int]) -> bytes:
    """Token ids as little-endian u32 (what ``CHAIN`` and ``MATCH`` carry)."""
    return token_bytes(token_ids)
