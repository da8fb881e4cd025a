"""Issue 12: the prompt cache never serves a wrong cache. One test (or more) per defect, each
reproducing the failure as a user met it with a tiny transformers Llama and a real server."""

from __future__ import annotations

import threading
import warnings

import pytest

from pion.client import PionPromptCache
from tests.client.models import hf_llama, prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.hf


def same_cache(a, b) -> bool:
    return all(torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)
               for la, lb in zip(a.layers, b.layers, strict=True))


def quietly(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


# -- defect 1: a refused store still wrote its rows ----------------------------------------------


def test_a_refused_put_under_a_fixed_namespace_leaves_the_stored_prefix_intact(url):
    pc = PionPromptCache(hf_llama(), url=url)
    first, second = prompt(24), prompt(24, offset=1)
    cold_first, cold_second = pc.adapter.prefill(first), pc.adapter.prefill(second)
    assert pc.put(first, cold_first, namespace="fixed")
    assert quietly(pc.put, second, cold_second, namespace="fixed") is False  # refused: another prefix
    warm = pc.get_or_prefill(first, namespace="fixed")
    assert pc.stats()["hits"] == 1
    assert same_cache(warm, cold_first), "the refused store's rows were served under the first manifest"


def test_another_model_storing_after_a_race_cannot_overwrite_the_namespace(url):
    a, b = PionPromptCache(hf_llama(seed=0), url=url), PionPromptCache(hf_llama(seed=1), url=url)
    ids = prompt(30)
    cold_a, cold_b = a.adapter.prefill(ids), b.adapter.prefill(ids)
    assert a.put(ids, cold_a, namespace="shared")
    quietly(b.put, ids, cold_b, namespace="shared")  # B missed before A stored, then stores
    warm = a.get_or_prefill(ids, namespace="shared")
    assert a.stats()["hits"] == 1 and same_cache(warm, cold_a)
    mine = quietly(b.get_or_prefill, ids, namespace="shared")
    assert b.stats()["hits"] == 0 and b.stats()["manifest_mismatches"] == 1 and same_cache(mine, cold_b)


def test_two_models_missing_on_one_namespace_at_once_never_get_the_other_s_rows(url):
    models = [hf_llama(seed=0), hf_llama(seed=1)]
    caches = [PionPromptCache(model, url=url) for model in models]
    ids = prompt(40)
    colds = [pc.adapter.prefill(ids) for pc in caches]
    wrong = 0
    for race in range(6):
        ns = f"race-{race}"
        barrier = threading.Barrier(2)

        def miss(pc, ns=ns, barrier=barrier):
            barrier.wait()
            quietly(pc.get_or_prefill, ids, namespace=ns)

        threads = [threading.Thread(target=miss, args=(pc,)) for pc in caches]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for pc, cold in zip(caches, colds, strict=True):
            hits = pc.stats()["hits"]
            got = quietly(pc.get_or_prefill, ids, namespace=ns)
            if pc.stats()["hits"] > hits and not same_cache(got, cold):
                wrong += 1
        owners = sum(1 for pc in caches if pc.client.kv_manifest(ns) is not None
                     and pc.fp_hash in pc.client.kv_manifest(ns).decode())
        assert owners == 1, "exactly one complete, self-consistent entry"
    assert wrong == 0, f"{wrong} wrong hits in 6 races"


# -- defect 3: one oversized prefix wiped the K/V cache ------------------------------------------


def test_one_oversized_prefix_is_refused_up_front_and_wipes_nothing(make_server):
    srv = make_server(kv_maxmemory=400_000)
    pc = PionPromptCache(hf_llama(), url=f"pion://127.0.0.1:{srv.port}")
    small = [prompt(50, offset=i) for i in range(4)]  # 51,200 bytes each (4 layers, 2 sides, 32 fp32 values)
    for ids in small:
        pc.get_or_prefill(ids)
    before = pc.client.kv_info()
    big = prompt(512, offset=9)  # 524,288 bytes
    quietly(pc.get_or_prefill, big)
    assert pc.stats()["errors"] == 1
    assert all(pc.client.kv_lookup(pc.namespace(ids)) for ids in small), "valid prefixes were evicted"
    after = pc.client.kv_info()
    assert after["vstore_bytes"] == before["vstore_bytes"] and after["vstore_sessions"] == before["vstore_sessions"]
    assert not pc.client.kv_lookup(pc.namespace(big))


# -- defect 4: pure-recurrent models never hit ---------------------------------------------------


def test_a_pure_recurrent_transformers_model_hits_with_its_exact_state(url):
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    from tests.client.models import hf_mamba

    model = hf_mamba()
    pc = PionPromptCache(model, url=url)
    assert pc.adapter.layout.attn == () and pc.adapter.layout.state == (0, 1)
    ids, suffix = prompt(20), prompt(3, offset=2)
    cold = pc.get_or_prefill(ids)
    expected = pc.adapter.forward(suffix, cold)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1 and pc.stats()["misses"] == 1
    assert (pc.adapter.forward(suffix, warm) == expected).all()


@pytest.mark.mlx
def test_a_pure_recurrent_mlx_model_hits_with_its_exact_state(url):
    pytest.importorskip("mlx_lm")
    import numpy as np

    from tests.client.models import mlx_mamba

    pc = PionPromptCache(mlx_mamba(), url=url)
    assert pc.adapter.layout.attn == () and len(pc.adapter.layout.state) == 2
    ids, suffix = prompt(20), prompt(3, offset=2)
    cold = pc.get_or_prefill(ids)
    expected = pc.adapter.forward(suffix, cold)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1 and pc.stats()["misses"] == 1
    assert np.array_equal(pc.adapter.forward(suffix, warm), expected)
