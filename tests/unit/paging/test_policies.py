"""Cache policies against traces whose best answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from pion.paging import LRUPolicy, NextUsePolicy, belady_hits, make_policy, replay_hits
from pion.paging.replay import next_uses
from pion.paging.traces import uniform, zipf_markov


def test_next_uses_points_at_the_following_access():
    assert next_uses(np.array([1, 2, 1, 3, 2])).tolist() == [2, 4, 5, 5, 5]


def test_belady_on_a_textbook_trace():
    # 1 2 3 1 2 4 1 2 with 2 slots: MIN keeps 1 and 2, bypasses 3 and 4 -> 4 hits
    assert belady_hits(np.array([1, 2, 3, 1, 2, 4, 1, 2]), 2) == 4
    assert belady_hits(np.array([1, 1, 1]), 0) == 0


def test_lru_thrashes_on_a_cycle_and_belady_does_not():
    cycle = np.tile(np.arange(10), 20)
    assert replay_hits(LRUPolicy(), cycle, 9, n_experts=10) == 0
    assert belady_hits(cycle, 9) > 150


def test_no_policy_beats_belady_and_nextuse_beats_lru_on_a_skewed_trace():
    trace = zipf_markov(60, 6, 16, 2, seed=1)
    capacity = 24  # 25% of 6 x 16
    best = belady_hits(trace, capacity)
    lru = replay_hits(LRUPolicy(), trace, capacity, 16, 2)
    ours = replay_hits(NextUsePolicy(), trace, capacity, 16, 2)
    assert lru <= best and ours <= best
    assert ours > lru


def test_on_uniform_routing_the_hit_rate_is_about_the_cache_fraction():
    trace = uniform(80, 4, 16, 2, seed=2)
    rate = replay_hits(NextUsePolicy(), trace, 32, 16, 2) / len(trace)
    assert 0.3 < rate < 0.7  # 50% cache


def test_admission_keeps_a_popular_expert_over_a_one_off():
    policy = NextUsePolicy()
    policy.add_model("m", 1, 1)
    for _ in range(20):
        policy.record(("m", 0, 0))
    policy.insert(("m", 0, 0))
    policy.record(("m", 0, 9))
    assert not policy.admits(("m", 0, 9), [("m", 0, 0)])
    # a prefetch says "needed at the next visit": it wins over an expert that may not be
    assert policy.admits(("m", 0, 9), [("m", 0, 0)], prefetch=True)


def test_histogram_seeding_ranks_experts_by_their_saved_counts():
    policy = NextUsePolicy()
    policy.add_model("m", 2, 2)
    policy.seed_histogram("m", [[100, 1, 0, 50], [0, 0, 0, 0]])
    for expert in range(4):
        policy.insert(("m", 0, expert))
    assert policy.victim() == ("m", 0, 2)
    assert policy.victim(lambda k: k == ("m", 0, 2)) == ("m", 0, 1)


def test_unknown_policy_names_are_refused():
    assert make_policy("lru").name == "lru"
    with pytest.raises(ValueError, match="unknown cache policy"):
        make_policy("mru")
