"""Block-chain hashes: the formula of the wire contract, and the seed (``root``) that starts it."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from pion.client.blocks import chain_seed
from pion.codecs.chain import HASH_BYTES, ROOT, block_hashes


def by_hand(tokens, block_size: int, root: bytes) -> list[bytes]:
    data = np.asarray(tokens, dtype="<u4").tobytes()
    out, parent = [], root
    for i in range(len(tokens) // block_size):
        parent = hashlib.sha256(parent + data[i * 4 * block_size:(i + 1) * 4 * block_size]).digest()[:16]
        out.append(parent)
    return out


def test_the_default_root_is_sixteen_zero_bytes():
    tokens = list(range(10))
    assert block_hashes(tokens, 4) == block_hashes(tokens, 4, ROOT) == by_hand(tokens, 4, bytes(16))
    assert len(block_hashes(tokens, 4)) == 2  # the partial last block is not hashed


def test_a_root_seeds_every_hash_of_the_chain():
    tokens = list(range(12))
    seed = bytes(range(16))
    seeded = block_hashes(tokens, 4, seed)
    assert seeded == by_hand(tokens, 4, seed)
    assert not set(seeded) & set(block_hashes(tokens, 4))  # no block hash shared with the zero root
    assert block_hashes(np.asarray(tokens, "<u4").tobytes(), 4, bytearray(seed)) == seeded
    assert block_hashes(tokens[:8], 4, seed) == seeded[:2]  # still a chain: heads share their hashes


@pytest.mark.parametrize("root", [b"", bytes(15), bytes(17), "0" * 16, None])
def test_a_root_must_be_sixteen_bytes(root):
    with pytest.raises(ValueError, match="root must be 16 bytes"):
        block_hashes([1, 2, 3, 4], 4, root)


def test_chain_seed_is_stable_and_tells_identities_apart():
    assert len(chain_seed("model-a")) == HASH_BYTES
    assert chain_seed("model-a") == chain_seed(b"model-a")
    assert chain_seed("model-a") != chain_seed("model-b") != ROOT
