"""The warm tier's byte budget and cold registry; ``query.answer`` for every form."""

from __future__ import annotations

import numpy as np

from pion.attention.dense import grouped_map
from pion.attention.query import MIN_PART_TOKENS, Query, Selector, answer, combine, cost, pieces
from pion.attention.select import DEFAULT_BLOCK, QUEST, summarize
from pion.attention.tier import PrefixView, WarmTier
from tests.unit.attention import reference as ref


def view(n=100, heads=2, dim=32, owned=None, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((heads, n, dim)).astype(np.float32)
    v = rng.standard_normal((heads, n, dim)).astype(np.float32)
    return PrefixView(k, v, k.nbytes + v.nbytes if owned is None else owned, origin=b"ns")


def test_budget_demotes_least_recently_used_to_cold():
    one = view()
    tier = WarmTier(budget=int(one.nbytes * 2.5))
    assert tier.put("a", one) == [] and tier.put("b", view()) == []
    tier.get("a")  # b is now the least recently used
    assert tier.put("c", view()) == ["b"]
    assert tier.is_cold("b") and tier.get("b") is None and tier.demotions == 1
    assert tier.nbytes == 2 * one.nbytes
    tier.put("b", view())  # rehydrated: a is demoted now
    assert tier.rehydrates == 1 and tier.is_cold("a") and not tier.is_cold("b")


def test_a_view_larger_than_the_budget_is_not_kept_and_not_cold():
    tier = WarmTier(budget=10)
    assert tier.put("a", view()) == []
    assert tier.get("a") is None and not tier.is_cold("a") and tier.nbytes == 0


def test_summaries_added_later_are_counted():
    tier = WarmTier(budget=0)
    v = view()
    tier.put("a", v)
    before = tier.nbytes
    summary = summarize(v.k, 16)
    tier.add_summary("a", v, summary)
    assert tier.nbytes == before + summary.nbytes
    tier.add_summary("a", v, summary)  # the same block size again: kept once
    assert tier.nbytes == before + summary.nbytes


def test_drop_where_forgets_warm_and_cold():
    tier = WarmTier(budget=0)
    tier.put(("t", b"s", 0), view())
    tier.cold[("t", b"s", 1)] = b"s"
    assert tier.drop_where(lambda key: key[1] == b"s") == 1
    assert not tier.entries and not tier.cold


def tm(cube):
    return np.transpose(cube, (1, 0, 2))


def test_answer_dense_window_topk_indices_and_selector():
    v = view(n=700, heads=2, dim=64, seed=3)
    rng = np.random.default_rng(9)
    q = rng.standard_normal((4, 1, 64)).astype(np.float32)
    head_map = grouped_map(4, 2)
    scale = 64 ** -0.5
    dense = answer(v, Query(q, head_map, scale))
    assert ref.rel_err(dense.out, ref.attention(q, tm(v.k), tm(v.v), head_map, scale)[0]) < 1e-5
    assert dense.attended == 700
    windowed = answer(v, Query(q, head_map, scale, window=100))
    assert ref.rel_err(windowed.out, ref.attention(q, tm(v.k)[600:], tm(v.v)[600:], head_map, scale)[0]) < 1e-5
    top = answer(v, Query(q, head_map, scale, top_k=50))
    assert top.attended == 50
    picks = [np.array([0, 1]), np.array([5]), np.array([699]), np.array([3, 4])]
    indexed = answer(v, Query(q, head_map, scale, indices=picks))
    for h in range(4):
        ids = picks[h]
        g = head_map[h]
        want = ref.attention(q[h:h + 1], tm(v.k)[ids][:, g:g + 1], tm(v.v)[ids][:, g:g + 1], [0], scale)[0]
        assert ref.rel_err(indexed.out[h], want[0]) < 1e-5
    sparse = answer(v, Query(q, head_map, scale, selector=Selector(DEFAULT_BLOCK, 4, QUEST)))
    tokens = ref.select(q[:, 0], tm(v.k), head_map, DEFAULT_BLOCK, 4, QUEST)
    assert sparse.attended == len(tokens) == 4 * 64 + 700 - 640
    assert ref.rel_err(sparse.out, ref.attention(q, tm(v.k)[tokens], tm(v.v)[tokens], head_map, scale)[0]) < 1e-5
    assert sparse.new_summary is not None and sparse.new_summary.block == DEFAULT_BLOCK


def test_pieces_combined_equal_one_answer():
    v = view(n=3 * MIN_PART_TOKENS + 5, heads=2, dim=32, seed=4)
    rng = np.random.default_rng(10)
    q = rng.standard_normal((4, 2, 32)).astype(np.float32)
    k_suf = rng.standard_normal((2, 3, 32)).astype(np.float32)
    query = Query(q, grouped_map(4, 2), 32 ** -0.5, k_suffix=k_suf, v_suffix=k_suf)
    jobs = pieces(v, query, 3)
    assert len(jobs) == 4  # three prefix ranges and the suffix
    split, whole = combine([job() for job in jobs]), answer(v, query)
    np.testing.assert_allclose(split.out, whole.out, atol=2e-6)
    np.testing.assert_allclose(split.lse, whole.lse, atol=2e-5)
    assert split.attended == whole.attended and split.prefix_tokens == whole.prefix_tokens
    assert len(pieces(v, Query(q[:, :1], grouped_map(4, 2), 0.1, selector=Selector(64, 2, QUEST)), 3)) == 1


def test_cost_counts_what_each_form_reads():
    v = view(n=6400, heads=2, dim=32, seed=5)
    v.summaries[(64, 0)] = summarize(v.k, 64)
    q = np.ones((2, 1, 32), np.float32)
    dense = cost(v, Query(q, grouped_map(2, 2), 0.1))
    sparse = cost(v, Query(q, grouped_map(2, 2), 0.1, selector=Selector(64, 4, QUEST)))
    unsummarized = cost(v, Query(q, grouped_map(2, 2), 0.1, selector=Selector(32, 4, QUEST)))
    assert dense == 2 * 6400 * 64 and sparse < dense / 10 and unsummarized == 6400 * 64
