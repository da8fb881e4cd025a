"""A transformers MoE model with its experts on the server generates what the in-memory model does."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pion.client.adapters.moe_transformers import load_paged_moe  # noqa: E402
from pion.client.adapters.moe_weights import is_expert_tensor  # noqa: E402
from tests.support.moe_models import dequantized_copy, hf_moe, save_hf  # noqa: E402

pytestmark = pytest.mark.hf
PROMPT = [[5, 17, 42, 99, 7, 3, 250, 11]]


@pytest.fixture
def moe_server(make_server, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    srv = make_server(moe_cache=str(root), moe_cache_mib=64)
    srv.root = root
    srv.url = f"pion://127.0.0.1:{srv.port}"
    return srv


def greedy(model, n=12):
    with torch.no_grad():
        out = model.generate(torch.tensor(PROMPT), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(PROMPT[0]):].tolist()


def reference_tokens(directory, impl):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), experts_implementation=impl).eval()
    return greedy(model)


@pytest.mark.parametrize("arch,layout", [("mixtral", "original"), ("qwen2_moe", "original"), ("qwen3_moe", "fused")])
@pytest.mark.parametrize("impl", ["eager", "grouped_mm"])
def test_paged_model_generates_the_in_memory_models_tokens(moe_server, arch, layout, impl):
    directory = moe_server.root / f"{arch}-{layout}"
    save_hf(hf_moe(arch), directory, layout)
    want = reference_tokens(directory, impl)
    expert_bytes = 3 * 64 * 96 * 4
    paged = load_paged_moe(directory, moe_server.url, cache_mib=6 * expert_bytes / 2**20, experts_implementation=impl)
    try:
        assert greedy(paged.model) == want
        stats = paged.stats()
        assert stats["misses"] > 0 and stats["evictions"] > 0  # 6 of 24 experts fit: it really paged
        assert stats["cache_bytes"] <= stats["cache_budget"]
    finally:
        paged.close()


@pytest.mark.parametrize("lane", ["local", "resp"])
def test_both_lanes_and_a_dense_only_client_copy(moe_server, tmp_path, lane):
    directory = moe_server.root / "mix"
    save_hf(hf_moe("mixtral", seed=3), directory, "fused")
    want = reference_tokens(directory, None)
    client_copy = tmp_path / "client-copy"  # what a client needs: config and dense tensors only
    client_copy.mkdir()
    shutil.copy(directory / "config.json", client_copy)
    from safetensors.numpy import load_file, save_file

    for shard in directory.glob("*.safetensors"):
        dense = {k: v for k, v in load_file(str(shard)).items() if not is_expert_tensor(k)}
        if dense:
            save_file(dense, str(client_copy / shard.name))
    paged = load_paged_moe(client_copy, moe_server.url, server_dir="mix", cache_mib=0.5, lane=lane)
    try:
        assert greedy(paged.model) == want
        assert paged.stats()["lane"] == lane and paged.stats()["bytes_fetched"] > 0
    finally:
        paged.close()


def test_quantized_stacked_experts_are_dequantized_on_the_client(moe_server):
    model = hf_moe("qwen3_moe", seed=5)
    directory = moe_server.root / "q4"
    save_hf(model, directory, "stacked-q4")
    want = greedy(dequantized_copy(model))
    paged = load_paged_moe(directory, moe_server.url, cache_mib=1)
    try:
        assert paged.source.info["bits"] == 4 and paged.source.info["storage"] == "stacked"
        assert greedy(paged.model) == want
    finally:
        paged.close()


def test_prefetch_predicts_next_layers_and_stats_add_up(moe_server, tmp_path):
    directory = moe_server.root / "pf"
    save_hf(hf_moe("mixtral", seed=1), directory, "original")
    want = reference_tokens(directory, None)
    paged = load_paged_moe(directory, moe_server.url, cache_mib=1, prefetch=True, record_trace=True)
    try:
        assert greedy(paged.model) == want
        stats = paged.stats()
        assert stats["prefetches"] > 0 and paged.predicted == stats["prefetches"]
        assert stats["hits"] + stats["misses"] == len(paged.cache.stats.trace)
        assert stats["stall_ms"] >= 0 and stats["hit_rate"] > 0
        import numpy as np

        from pion.paging import belady_hits

        assert 0.0 <= stats["prediction_accuracy"] <= 1.0
        paged.scored, paged.accuracy = 100, 0.0  # predictions that keep missing stop fetching
        before = paged.cache.stats.prefetches
        paged.cache.clear()
        paged.predict_next(0)
        assert paged.gated == 1 and paged.cache.stats.prefetches == before
        assert paged.save_trace(tmp_path / "trace.npy") == len(paged.cache.stats.trace)
        keys = np.load(tmp_path / "trace.npy")
        assert keys.max() < 3 * 8 and belady_hits(keys, 6) >= 0
    finally:
        paged.close()


def test_a_config_that_disagrees_with_the_server_is_refused(moe_server, tmp_path):
    save_hf(hf_moe("mixtral", n_experts=8), moe_server.root / "eight", "fused")
    other = tmp_path / "four"
    save_hf(hf_moe("mixtral", n_experts=4), other, "fused")
    with pytest.raises(ValueError, match="8 experts a layer, this config 4"):
        load_paged_moe(other, moe_server.url, server_dir="eight")


def test_a_missing_dense_tensor_is_refused(moe_server, tmp_path):
    directory = moe_server.root / "gap"
    save_hf(hf_moe("mixtral"), directory, "fused")
    from safetensors.numpy import load_file, save_file

    for shard in directory.glob("*.safetensors"):
        tensors = load_file(str(shard))
        tensors.pop("model.norm.weight", None)
        save_file(tensors, str(shard))
    with pytest.raises(ValueError, match="no checkpoint tensor for 1 dense parameters"):
        load_paged_moe(directory, moe_server.url)


def test_pruned_experts_are_routed_around_as_the_router_would(moe_server):
    import redis

    from pion.client.adapters.moe_transformers import route_around

    directory = moe_server.root / "pruned"
    save_hf(hf_moe("qwen3_moe", seed=2), directory, "fused")
    admin = redis.Redis(port=moe_server.port)
    admin.execute_command("MOE.EXPERT.LOAD", "pruned")
    for layer, expert in ((0, 3), (2, 5)):
        admin.execute_command("MOE.EXPERT.PRUNE", "pruned", layer, expert)
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    route_around(reference.model.layers[0].mlp.gate, [3])
    route_around(reference.model.layers[2].mlp.gate, [5])
    paged = load_paged_moe(directory, moe_server.url, cache_mib=1, record_trace=True)
    try:
        assert greedy(paged.model) == greedy(reference)
        assert (0, 3) not in paged.cache.stats.trace and (2, 5) not in paged.cache.stats.trace
    finally:
        paged.close()
        admin.close()
