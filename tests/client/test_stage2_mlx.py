"""Stage 2 through mlx-lm's SDPA (patched): greedy decode equals mlx-lm's own decode on a tiny Llama."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.models import VOCAB, mlx_llama

pytestmark = pytest.mark.mlx

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")


def greedy(model, cache, tokens, steps):
    out, logits = [], []
    step = model(mx.array([tokens]), cache=cache)[0, -1]
    for _ in range(steps):
        logits.append(np.array(step.astype(mx.float32)))
        token = int(mx.argmax(step).item())
        out.append(token)
        step = model(mx.array([[token]]), cache=cache)[0, -1]
    return out, logits


@pytest.mark.parametrize("lane", ["server", "inproc"])
def test_dense_stage2_greedy_decode_equals_mlx_lm(url, lane):
    from mlx_lm.models.cache import make_prompt_cache

    from pion.client import PionPromptCache
    from pion.client.adapters import stage2_mlx

    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(3, VOCAB, 300)]
    suffix = [int(t) for t in rng.integers(3, VOCAB, 5)]
    model = mlx_llama(seed=1)
    want, want_logits = greedy(model, make_prompt_cache(model), prefix + suffix, 16)
    stage2 = PionPromptCache(model, url=url, vquant="fp32").enable_stage2(lane=lane)
    try:
        cache = stage2.cache_for(prefix)
        assert cache[0].offset == 300
        got, logits = greedy(model, cache, suffix, 16)
        assert got == want
        np.testing.assert_allclose(np.array(logits), np.array(want_logits), atol=2e-4)
        assert cache[0].offset == 300 + 5 + 16 and cache[0].local.offset == 21
        assert stage2.stats()["queries"] == 4 * 17
        assert greedy(model, make_prompt_cache(model), prefix + suffix, 4)[0] == want[:4]  # other caches: unchanged
    finally:
        stage2.disable()
    from mlx_lm.models import llama

    assert llama.scaled_dot_product_attention is stage2_mlx._original


def test_sparse_decode_on_mlx_matches_the_transformers_lane_algorithm(url):
    from pion.client import PionPromptCache

    rng = np.random.default_rng(1)
    prefix = [int(t) for t in rng.integers(3, VOCAB, 700)]
    results = {}
    for lane in ("server", "inproc"):
        model = mlx_llama(seed=2)
        stage2 = PionPromptCache(model, url=url, vquant="fp32").enable_stage2(
            sparse={"block": 64, "budget": 256, "selector": "block-mean"}, lane=lane)
        try:
            results[lane] = greedy(model, stage2.cache_for(prefix), [4, 5], 5)
            assert stage2.stats()["sparse_queries"] == 4 * 5
        finally:
            stage2.disable()
    assert results["server"][0] == results["inproc"][0]
    np.testing.assert_allclose(np.array(results["server"][1]), np.array(results["inproc"][1]), atol=1e-4)


def test_mlx_lm_generate_step_runs_on_a_stage2_cache(url):
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    from pion.client import PionPromptCache

    rng = np.random.default_rng(2)
    prefix = [int(t) for t in rng.integers(3, VOCAB, 200)]
    suffix = [7, 8, 9]
    model = mlx_llama(seed=3)
    want = [int(t) for t, _ in generate_step(mx.array(prefix + suffix), model, max_tokens=6,
                                             prompt_cache=make_prompt_cache(model))]
    stage2 = PionPromptCache(model, url=url, vquant="fp32").enable_stage2()
    try:
        cache = stage2.cache_for(prefix)
        got = [int(t) for t, _ in generate_step(mx.array(suffix), model, max_tokens=6, prompt_cache=cache)]
    finally:
        stage2.disable()
    assert got == want
