"""KV.PREFIX.MATCH: shared, divergent and colliding prefixes."""

from __future__ import annotations

import numpy as np
import pytest

from pion.codecs.chain import block_hashes
from pion.kvcache.match import match
from pion.kvcache.space import KVSpace
from tests.unit.kvcache.helpers import fill, register, tokens_blob

BS = 4


@pytest.fixture
def space():
    sp = KVSpace()
    register(sp, b"p12", chain=(BS, tokens_blob(range(12))))
    fill(sp, b"p12", 12)
    return sp


def ask(space, tokens, with_tokens=True, hashes=None):
    ids = np.asarray(tokens, dtype="<u4")
    return match(space, BS, hashes if hashes is not None else block_hashes(ids, BS), ids if with_tokens else None)[:2]


def test_a_request_sharing_the_whole_prefix_matches_every_block(space):
    assert ask(space, list(range(12)) + [99, 98]) == (b"p12", 3)


def test_a_divergent_request_matches_the_shared_leading_blocks(space):
    assert ask(space, list(range(6)) + [77] * 10) == (b"p12", 1)
    assert ask(space, [1] + list(range(1, 12))) == (None, 0)


def test_the_longest_complete_prefix_wins(space):
    register(space, b"p20", chain=(BS, tokens_blob(range(20))))
    fill(space, b"p20", 20)
    assert ask(space, range(24)) == (b"p20", 5)
    register(space, b"p28", chain=(BS, tokens_blob(range(28))))  # registered, rows not stored yet
    assert ask(space, range(32)) == (b"p20", 5)


def test_a_hash_collision_is_caught_by_comparing_tokens(space):
    """Pretend another prompt hashed like p12: the stored tokens differ, so no rows are served."""
    other = [50 + i for i in range(12)]
    forged = block_hashes(np.arange(12, dtype="<u4"), BS)  # p12's hashes, sent with other tokens
    assert ask(space, other, hashes=forged) == (None, 0)
    half = list(range(4)) + [99] * 8  # first block really shared, the rest collides
    assert ask(space, half, hashes=forged) == (b"p12", 1)
    assert ask(space, other, with_tokens=False, hashes=forged) == (b"p12", 3)  # hashes alone are trusted


def test_other_block_sizes_do_not_match(space):
    ids = np.arange(12, dtype="<u4")
    assert match(space, 6, block_hashes(ids, 6), ids)[:2] == (None, 0)
