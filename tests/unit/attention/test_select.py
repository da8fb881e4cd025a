"""The selectors pick exactly the tokens of spec 6.4's algorithm (shared mask, ascending, tail kept)."""

from __future__ import annotations

import numpy as np
import pytest

from pion.attention.dense import grouped_map
from pion.attention.select import (
    BLOCK_MEAN,
    BLOCK_MEAN_PER_HEAD,
    QUEST,
    QUEST_PER_HEAD,
    block_scores,
    select_tokens,
    select_tokens_per_head,
    summarize,
)
from tests.unit.attention import reference as ref


@pytest.mark.parametrize("selector", [BLOCK_MEAN, QUEST])
@pytest.mark.parametrize(("n", "block", "k_top", "q_heads", "kv_heads"),
                         [(1000, 64, 4, 8, 8), (1000, 64, 4, 8, 2), (513, 16, 7, 3, 1), (4096, 64, 8, 9, 3),
                          (640, 64, 10, 2, 2), (650, 64, 20, 2, 2)])
def test_selection_equals_the_spec_algorithm(selector, n, block, k_top, q_heads, kv_heads):
    rng = np.random.default_rng(n + block + k_top + selector)
    k = rng.standard_normal((kv_heads, n, 64)).astype(np.float32)
    q = rng.standard_normal((q_heads, 64)).astype(np.float32)
    head_map = grouped_map(q_heads, kv_heads)
    got = select_tokens(q, n, summarize(k, block), head_map, k_top, selector)
    want = ref.select(q, np.transpose(k, (1, 0, 2)), head_map, block, k_top, selector)
    if want is None:
        assert got is None
        return
    np.testing.assert_array_equal(got, want)
    full = (n // block) * block
    assert np.all(np.diff(got) > 0), "ascending token order"
    np.testing.assert_array_equal(got[len(got) - (n - full):], np.arange(full, n))  # the tail is kept


def test_small_prefix_is_dense():
    rng = np.random.default_rng(0)
    k = rng.standard_normal((1, 512, 32)).astype(np.float32)
    q = rng.standard_normal((1, 32)).astype(np.float32)
    assert select_tokens(q, 512, summarize(k, 64), np.zeros(1, np.intp), 8, QUEST) is None


def test_quest_bound_is_never_below_a_blocks_true_max_score():
    rng = np.random.default_rng(1)
    k = (rng.standard_normal((2, 2048, 64)) * rng.uniform(0.1, 3, 64)).astype(np.float32)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    head_map = grouped_map(4, 2)
    summary = summarize(k, 64)
    bounds = block_scores(q, summary, head_map, QUEST)
    for h in range(4):
        true = (k[head_map[h]] @ q[h]).reshape(-1, 64).max(axis=1) / 8
        assert np.all(bounds[h] >= true - 1e-4)


def test_ties_go_to_the_earlier_block():
    k = np.ones((1, 64 * 6, 8), np.float32)
    q = np.ones((1, 8), np.float32)
    got = select_tokens(q, 64 * 6, summarize(k, 64), np.zeros(1, np.intp), 2, BLOCK_MEAN)
    np.testing.assert_array_equal(got, np.arange(128))


@pytest.mark.parametrize(("selector", "base"), [(QUEST_PER_HEAD, QUEST), (BLOCK_MEAN_PER_HEAD, BLOCK_MEAN)])
def test_per_head_selection_is_each_heads_own_top_blocks(selector, base):
    rng = np.random.default_rng(11)
    k = rng.standard_normal((2, 1000, 32)).astype(np.float32)
    q = rng.standard_normal((4, 32)).astype(np.float32)
    head_map = grouped_map(4, 2)
    got = select_tokens_per_head(q, 1000, summarize(k, 64), head_map, 3, selector)
    want = ref.select_per_head(q, np.transpose(k, (1, 0, 2)), head_map, 64, 3, base)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert select_tokens_per_head(q, 1000, summarize(k, 64), head_map, 20, selector) is None  # budget covers N
