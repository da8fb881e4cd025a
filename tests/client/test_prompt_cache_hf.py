"""``PionPromptCache`` with transformers (5.x) models: tiny Llama and a tiny LFM2 hybrid."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from pion.client import PionClient, PionPromptCache
from tests.client.models import hf_lfm2, hf_llama, prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.hf


def assert_same_cache(a, b):
    assert len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert type(la) is type(lb)
        if getattr(la, "keys", None) is not None:
            assert la.keys.dtype == lb.keys.dtype and torch.equal(la.keys, lb.keys)
            assert torch.equal(la.values, lb.values)
        for i in getattr(la, "conv_states", {}):
            assert torch.equal(la.conv_states[i], lb.conv_states[i])
            assert la.has_previous_state[i] == lb.has_previous_state[i]


def greedy(model, cache, ids, steps=8):
    out = model.generate(torch.tensor([ids]), cache=copy.deepcopy(cache), max_new_tokens=steps,
                         do_sample=False, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_warm_cache_equals_cold_cache_tensor_for_tensor(url, dtype):
    model = hf_llama(dtype=dtype)
    pc = PionPromptCache(model, url=url)
    ids = prompt(37)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["misses"] == 1 and pc.stats()["hits"] == 1
    assert_same_cache(cold, warm)
    assert pc.schema["k"][0] == {"float32": "fp32", "bfloat16": "bf16"}[dtype]


def test_generate_from_the_warm_cache_equals_generate_from_the_cold_one(url):
    model = hf_llama()
    pc = PionPromptCache(model, url=url)
    ids, suffix = prompt(40), prompt(6, offset=1)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert greedy(model, warm, ids + suffix) == greedy(model, cold, ids + suffix)
    plain = model.generate(torch.tensor([ids + suffix]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert greedy(model, warm, ids + suffix) == plain[0, len(ids + suffix):].tolist()


def test_stats_report_hits_misses_times_and_bytes(url):
    pc = PionPromptCache(hf_llama(), url=url)
    ids = prompt(20)
    pc.get_or_prefill(ids)
    pc.get_or_prefill(ids)
    stats = pc.stats()
    assert stats["hit_rate"] == 0.5 and stats["last_prefill_ms"] > 0
    assert stats["fetch_ms_total"] > 0 and stats["store_ms_total"] > 0
    assert stats["bytes_fetched"] == 2 * 4 * 20 * 32 * 4  # sides x layers x tokens x kv_dim x fp32
    receipt = pc.client.stats()
    assert receipt["kvprefix_hits"] == 1 and receipt["kvprefix_prefill_us_measured"] > 0


def test_a_prefix_of_another_model_under_the_same_namespace_is_a_counted_miss(url):
    ids = prompt(16)
    first = PionPromptCache(hf_llama(seed=0), url=url)
    first.get_or_prefill(ids, namespace="shared-ns")
    other = PionPromptCache(hf_llama(seed=1), url=url)  # same config, other weights
    cache = other.get_or_prefill(ids, namespace="shared-ns")
    assert other.stats()["manifest_mismatches"] == 1 and other.stats()["hits"] == 0
    assert "another model" in other.last_mismatch
    assert_same_cache(cache, other.adapter.prefill(ids))  # its own prefill, not the stored rows
    bigger = PionPromptCache(hf_llama(num_hidden_layers=2), url=url)
    bigger.get_or_prefill(ids, namespace="shared-ns")
    assert bigger.stats()["manifest_mismatches"] == 1


def test_other_tokens_under_a_reused_namespace_are_a_counted_miss(url):
    pc = PionPromptCache(hf_llama(), url=url)
    pc.get_or_prefill(prompt(16), namespace="reused")
    pc.get_or_prefill(prompt(16, offset=3), namespace="reused")
    assert pc.stats()["manifest_mismatches"] == 1 and "other tokens" in pc.last_mismatch
    assert pc.stats()["errors"] == 0  # the taken namespace is not overwritten


def test_other_codec_schema_gets_its_own_namespace(url):
    model = hf_llama()
    exact = PionPromptCache(model, url=url)
    lossy = PionPromptCache(model, url=url, vquant="fp16")
    ids = prompt(24)
    exact.get_or_prefill(ids)
    lossy.get_or_prefill(ids)
    assert lossy.stats()["misses"] == 1 and exact.namespace(ids) != lossy.namespace(ids)


@pytest.mark.parametrize("vquant,atol", [("fp16", 2e-3), ("bf16", 2e-2), ("int8", 0.05), ("turbo4", 0.5)])
def test_lossy_codecs_round_trip_within_their_error(url, vquant, atol):
    model = hf_llama()
    pc = PionPromptCache(model, url=url, vquant=vquant)
    ids = prompt(30)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1
    for lc, lw in zip(cold.layers, warm.layers, strict=True):
        assert lw.keys.dtype == torch.float32
        assert torch.allclose(lc.keys, lw.keys, atol=atol) and torch.allclose(lc.values, lw.values, atol=atol)


def test_boundary_protect_registers_a_per_layer_schema(url):
    model = hf_llama()
    pc = PionPromptCache(model, url=url, vquant="int8", boundary_protect=1)
    ids = prompt(20)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1
    ns = pc.namespace(ids)
    info = pc.client.v_info(f"{ns}_pv")
    assert info["schema"] == "heterogeneous"
    assert [info[f"layer_{i}_fmt"] for i in range(4)] == ["fp16", "int8", "int8", "fp16"]
    assert pc.client.v_info(f"{ns}_pk")["layer_1_fmt"] == "fp16"
    edge_k = cold.layers[0].keys
    assert torch.allclose(edge_k, warm.layers[0].keys, atol=2e-3)


def test_a_codec_that_cannot_take_the_width_is_refused_before_any_prefill(url):
    with pytest.raises(ValueError, match="divisible by 32"):
        PionPromptCache(hf_llama(head_dim=12, num_key_value_heads=1), url=url, vquant="turbo4")


def common(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_fetch_nearest_reuses_every_stored_token_the_request_shares(url):
    model = hf_llama()
    pc = PionPromptCache(model, url=url, block_size=8)
    stored = prompt(30)
    pc.get_or_prefill(stored)
    request = stored[:21] + prompt(5, offset=9)
    shared = common(stored, request)
    assert shared >= 21
    cache, rest = pc.fetch_nearest(request)
    assert cache.get_seq_length() == shared and rest == request[shared:]  # not only the 16 of whole blocks
    assert pc.stats()["partial_hits"] == 1
    warm_logits = pc.adapter.forward(rest, cache)
    cold_logits = pc.adapter.forward(request, pc.adapter.new_cache())
    assert np.allclose(warm_logits, cold_logits, atol=1e-4)
    exact, rest = pc.fetch_nearest(stored)
    assert rest == [] and exact.get_seq_length() == 30
    none, rest = pc.fetch_nearest(prompt(12, offset=5))
    assert none is None and rest == prompt(12, offset=5)


def test_admission_threshold_stores_on_the_nth_miss(url):
    pc = PionPromptCache(hf_llama(), url=url, admission_threshold=2)
    ids = prompt(12)
    pc.get_or_prefill(ids)
    assert pc.stats()["admission_skips"] == 1 and not pc.client.kv_lookup(pc.namespace(ids))
    pc.get_or_prefill(ids)
    pc.get_or_prefill(ids)
    assert pc.stats()["misses"] == 2 and pc.stats()["hits"] == 1 and pc.stats()["admission_skips"] == 1


def test_hybrid_model_keeps_recurrent_state_in_ssm_prefix_and_attention_in_the_v_store(url):
    model = hf_lfm2()
    pc = PionPromptCache(model, url=url)
    assert pc.adapter.layout.state == (0, 2) and pc.adapter.layout.attn == (1, 3)
    ids, suffix = prompt(25), prompt(4, offset=2)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1
    assert_same_cache(cold, warm)
    ns = pc.namespace(ids)
    assert pc.client.ssm_fetch(ns, 0) is not None and pc.client.v_info(f"{ns}_pk")["num_layers"] == 2
    assert greedy(model, warm, ids + suffix, 6) == greedy(model, cold, ids + suffix, 6)


def test_hybrid_partial_reuse_only_where_the_state_was_saved(url):
    pc = PionPromptCache(hf_lfm2(), url=url, block_size=8)
    aligned, unaligned = prompt(16), prompt(20, offset=4)
    pc.get_or_prefill(aligned)
    pc.get_or_prefill(unaligned)
    cache, rest = pc.fetch_nearest(aligned + [9, 9])
    assert cache is not None and rest == [9, 9]
    cache, rest = pc.fetch_nearest(unaligned[:17] + [9])
    assert cache is None and pc.stats()["hybrid_partial_skips"] == 1 and pc.stats()["manifest_mismatches"] == 0
    cache, rest = pc.fetch_nearest(unaligned + [9, 9])  # 20 tokens: not a block multiple, still reused
    assert cache is not None and rest == [9, 9]


def test_an_unreachable_server_degrades_to_plain_prefill():
    from tests.support.servers import free_port

    model = hf_llama()
    pc = PionPromptCache(model, client=PionClient(f"pion://127.0.0.1:{free_port()}", socket_timeout=2))
    with pytest.warns(RuntimeWarning, match="Pion prompt cache"):
        cache = pc.get_or_prefill(prompt(10))
    assert cache.get_seq_length() == 10 and pc.stats()["errors"] >= 1


def test_fetch_nearest_never_offers_another_models_prefix_of_the_same_tokens(url):
    ids = prompt(48)
    a = PionPromptCache(hf_llama(seed=0), url=url, block_size=16)
    b = PionPromptCache(hf_llama(seed=1), url=url, block_size=16)
    a.get_or_prefill(ids[:32])
    assert a.chain_seed != b.chain_seed
    cache, rest = b.fetch_nearest(ids)
    assert cache is None and rest == ids
    assert b.stats()["manifest_mismatches"] == 0  # MATCH never named a's namespace: the chains differ
    cache, rest = a.fetch_nearest(ids)
    assert cache.get_seq_length() == 32 and rest == ids[32:]
