"""``PionPromptCache`` with mlx-lm models (mlx[cpu] on Linux: tiny configs only)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from pion.client import PionPromptCache
from tests.client.models import mlx_lfm2, mlx_llama, prompt

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
pytestmark = pytest.mark.mlx


def assert_same_cache(a, b):
    assert [type(x).__name__ for x in a] == [type(x).__name__ for x in b]
    for ca, cb in zip(a, b, strict=True):
        if type(ca).__name__ == "KVCache":
            assert ca.offset == cb.offset
            for x, y in ((ca.keys, cb.keys), (ca.values, cb.values)):
                live_x, live_y = x[..., : ca.offset, :], y[..., : cb.offset, :]
                assert live_x.dtype == live_y.dtype and mx.array_equal(live_x, live_y).item()
        else:
            for x, y in zip(ca.cache, cb.cache, strict=True):
                assert (x is None and y is None) or mx.array_equal(x, y).item()


def greedy(model, cache, suffix, steps=8):
    from mlx_lm.generate import generate_step

    out = []
    for token, _ in generate_step(mx.array(suffix), model, prompt_cache=copy.deepcopy(cache), max_tokens=steps):
        out.append(int(token))
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_warm_cache_equals_cold_cache_tensor_for_tensor(url, dtype):
    pc = PionPromptCache(mlx_llama(dtype=dtype), url=url)
    ids = prompt(37)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1 and isinstance(warm, list)
    assert_same_cache(cold, warm)
    assert pc.stats()["local_hits"] == 1  # a loopback server: the V.EXPORT file was mapped
    socket = PionPromptCache(pc.adapter.model, url=url, local_lane=False)
    assert_same_cache(cold, socket.get_or_prefill(ids))
    assert socket.stats()["hits"] == 1 and socket.stats()["local_hits"] == 0


def test_generate_step_from_the_warm_cache_equals_the_cold_one(url):
    model = mlx_llama()
    pc = PionPromptCache(model, url=url)
    ids, suffix = prompt(40), prompt(5, offset=1)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert greedy(model, warm, suffix) == greedy(model, cold, suffix)


def test_fetch_nearest_and_admission(url):
    model = mlx_llama()
    pc = PionPromptCache(model, url=url, block_size=8, admission_threshold=2)
    stored = prompt(26)
    pc.get_or_prefill(stored)
    assert pc.stats()["admission_skips"] == 1
    pc.get_or_prefill(stored)
    request = stored[:19] + prompt(3, offset=7)
    shared = next(i for i, (a, b) in enumerate(zip(stored, request, strict=False)) if a != b)
    cache, rest = pc.fetch_nearest(request)
    assert cache[0].offset == shared and rest == request[shared:]  # every shared token, not 16
    warm = pc.adapter.forward(rest, cache)
    cold = pc.adapter.forward(request, pc.adapter.new_cache())
    assert np.allclose(warm, cold, atol=1e-4)


def test_other_model_under_the_same_namespace_is_a_counted_miss(url):
    ids = prompt(16)
    PionPromptCache(mlx_llama(seed=0), url=url).get_or_prefill(ids, namespace="mlx-shared")
    other = PionPromptCache(mlx_llama(seed=1), url=url)
    other.get_or_prefill(ids, namespace="mlx-shared")
    assert other.stats()["manifest_mismatches"] == 1 and other.stats()["hits"] == 0


def test_hybrid_arrays_cache_goes_through_ssm_prefix(url):
    model = mlx_lfm2()
    pc = PionPromptCache(model, url=url)
    assert pc.adapter.layout.state == (0, 2) and pc.adapter.layout.attn == (1, 3)
    ids, suffix = prompt(21), prompt(4, offset=3)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1
    assert_same_cache(cold, warm)
    assert pc.client.ssm_fetch(pc.namespace(ids), 2) is not None
    assert greedy(model, warm, suffix, 5) == greedy(model, cold, suffix, 5)


def test_the_same_prefix_is_shared_between_runtimes_only_by_manifest_rules(url):
    """An mlx cache and a transformers cache of one prompt never load each other's rows."""
    pytest.importorskip("torch")
    from tests.client.models import hf_llama

    ids = prompt(12)
    PionPromptCache(mlx_llama(), url=url).get_or_prefill(ids, namespace="cross-runtime")
    hf = PionPromptCache(hf_llama(), url=url)
    hf.get_or_prefill(ids, namespace="cross-runtime")
    assert hf.stats()["manifest_mismatches"] == 1
