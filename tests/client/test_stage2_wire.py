"""``Stage2Wire``: every ATTEND.PREFIX command with numpy in and out, counted; COLDMISS rehydrated."""

from __future__ import annotations

import numpy as np
import pytest

from pion.client import ColdMiss, PionClient
from pion.client.stage2_wire import Stage2Wire
from tests.server.attend_support import TOL, prefix, reference, tokens_major
from tests.unit.attention import reference as ref


@pytest.fixture
def wire(url):
    client = PionClient(url)
    yield Stage2Wire(client)
    client.close()


def test_store_query_lookup_and_counters(wire):
    rng = np.random.default_rng(0)
    k, v = prefix(rng, 2, 200, 32)
    wire.store("s", 0, k, v)
    assert wire.lookup("s", 0) == "HIT" and wire.lookup("s", 1) == "MISS"
    q = rng.standard_normal((4, 3, 32)).astype(np.float32)
    out, lse = wire.query("s", 0, q)
    want_out, want_lse = reference(q, k, v, [0, 0, 1, 1])
    assert ref.rel_err(out, want_out) < TOL and ref.rel_err(lse, want_lse) < TOL
    one, none = wire.query("s", 0, q[:, :1], fa_window=50, scale=0.1)
    assert none is None and ref.rel_err(one, reference(q[:, :1], k[:, 150:], v[:, 150:], [0, 0, 1, 1], 0.1)[0]) < TOL
    ids = [np.array([0, 3]), np.array([7]), np.array([1, 2, 199]), np.array([5])]
    sparse = wire.query_sparse("s", 0, q[:2, :1], ids[:2])
    assert sparse.shape == (2, 1, 32)
    c = wire.counters
    assert c["round_trips"] == 6 and c["bytes_sent"] > k.nbytes * 2 and c["bytes_received"] > 0
    assert wire.info()["queries"] == 3


def test_sparse_auto_with_and_without_suffix(wire):
    rng = np.random.default_rng(1)
    k, v = prefix(rng, 2, 900, 32)
    wire.store("s", 0, k, v)
    q = rng.standard_normal((2, 1, 32)).astype(np.float32)
    tokens = ref.select(q[:, 0], tokens_major(k), [0, 1], 64, 3, 1)
    want, _ = ref.attention(q, tokens_major(k)[tokens], tokens_major(v)[tokens], [0, 1], 32 ** -0.5)
    got = wire.query_sparse_auto("s", 0, q, block=64, k_top=3, kv_heads=2, selector=1)
    assert ref.rel_err(got, want) < TOL
    suffix = rng.standard_normal((2, 2, 32)).astype(np.float32)
    fused = wire.query_sparse_auto("s", 0, q, block=64, k_top=3, kv_heads=2, selector=1, k_suf=suffix, v_suf=suffix)
    want, _ = ref.prefix_and_suffix(q, tokens_major(k)[tokens], tokens_major(v)[tokens], suffix, suffix, [0, 1],
                                    32 ** -0.5)
    assert ref.rel_err(fused, want) < TOL


def test_coldmiss_raises_or_rehydrates_once(wire):
    rng = np.random.default_rng(2)
    k, v = prefix(rng, 2, 100, 32)
    wire.store("s", 0, k, v)
    wire.client.redis.config_set("attention-warm-bytes", "1")
    q = rng.standard_normal((2, 1, 32)).astype(np.float32)
    with pytest.raises(ColdMiss):
        wire.query("s", 0, q)
    wire.client.redis.config_set("attention-warm-bytes", "1gb")
    out, _ = wire.query("s", 0, q, rehydrate=("s", 2, 32))
    assert wire.counters["cold_rehydrates"] == 1
    assert ref.rel_err(out, reference(q, k, v, [0, 1])[0]) < TOL
    assert wire.warm("s", 4, 32) == "0 skipped_dim=1"
