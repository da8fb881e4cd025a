"""The transformers adapter with a model on a CUDA device (skipped where there is none).

CI has no GPU; these run on an accelerator machine (``make test-gpu``). They check what a CPU
run cannot: the fetched K/V lands on the model's device in its dtype, on both lanes, and the
warm cache continues exactly as the cold one.
"""

from __future__ import annotations

import copy

import pytest

from pion.client import PionPromptCache
from tests.client.models import hf_lfm2, hf_llama, prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = [pytest.mark.hf, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture
def url(server):
    return f"pion://127.0.0.1:{server.port}"


def assert_same_cache_on(device, a, b):
    for la, lb in zip(a.layers, b.layers, strict=True):
        if getattr(la, "keys", None) is not None:
            assert lb.keys.device.type == device and lb.values.device.type == device
            assert la.keys.dtype == lb.keys.dtype and torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)
        for i in getattr(la, "conv_states", {}):
            assert lb.conv_states[i].device.type == device and torch.equal(la.conv_states[i], lb.conv_states[i])


@pytest.mark.parametrize("lane", ["auto", False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_cuda_model_gets_its_cache_back_on_its_device(url, dtype, lane):
    model = hf_llama(dtype=dtype).to("cuda")
    pc = PionPromptCache(model, url=url, local_lane=lane)
    ids, suffix = prompt(70), prompt(5, offset=2)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1 and pc.stats()["local_hits"] == (1 if lane == "auto" else 0)
    assert_same_cache_on("cuda", cold, warm)
    kw = pc.adapter._cache_kw  # "cache" in transformers >= 5.2x, "past_key_values" before
    run = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    tokens = torch.tensor([ids + suffix], device="cuda")
    assert torch.equal(model.generate(tokens, **{kw: copy.deepcopy(warm)}, **run),
                       model.generate(tokens, **{kw: copy.deepcopy(cold)}, **run))


def test_a_cuda_hybrid_model_round_trips_state_and_k_v(url):
    model = hf_lfm2().to("cuda")
    pc = PionPromptCache(model, url=url)
    ids = prompt(40)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert_same_cache_on("cuda", cold, warm)
    suffix = prompt(3, offset=1)
    assert (pc.adapter.forward(suffix, cold) == pc.adapter.forward(suffix, warm)).all()


def test_a_cache_stored_from_the_gpu_is_a_hit_for_the_same_model_on_the_cpu(url):
    gpu = PionPromptCache(hf_llama().to("cuda"), url=url)
    cpu = PionPromptCache(hf_llama(), url=url)
    ids = prompt(50)
    stored = gpu.get_or_prefill(ids)
    assert gpu.fp_hash == cpu.fp_hash  # the device is not part of the fingerprint
    loaded = cpu.get_or_prefill(ids)
    assert cpu.stats()["hits"] == 1
    for a, b in zip(stored.layers, loaded.layers, strict=True):
        assert b.keys.device.type == "cpu" and torch.equal(a.keys.cpu(), b.keys)
