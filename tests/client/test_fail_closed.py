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


# -- defect 2: the fingerprint missed fine-tunes ---------------------------------------------------


def merged_lora(model, layers=(0, 2), rank=2, seed=5):
    """A copy of ``model`` with a rank-``rank`` LoRA merged into q_proj and v_proj of ``layers``
    (PEFT's default targets), the weights the old strided probe never read."""
    import copy

    tuned = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for index in layers:
            attn = tuned.model.layers[index].self_attn
            for proj in (attn.q_proj, attn.v_proj):
                out_f, in_f = proj.weight.shape
                proj.weight += 0.5 * torch.randn(out_f, rank, generator=gen) @ torch.randn(rank, in_f, generator=gen)
    return tuned


def test_a_merged_lora_changes_the_fingerprint_and_never_loads_the_base_k_v(url):
    base = hf_llama()
    tuned = merged_lora(base)
    ids = prompt(32)
    pc_base, pc_tuned = PionPromptCache(base, url=url), PionPromptCache(tuned, url=url)
    pc_base.get_or_prefill(ids)
    assert pc_tuned.fp_hash != pc_base.fp_hash
    got = pc_tuned.get_or_prefill(ids)
    assert pc_tuned.stats()["hits"] == 0, "the fine-tune loaded the base model's K/V"
    assert same_cache(got, pc_tuned.adapter.prefill(ids))


def test_one_model_loaded_from_two_paths_shares_its_prefixes(url):
    hub, local = hf_llama(), hf_llama()
    hub.config._name_or_path, local.config._name_or_path = "HuggingFaceTB/SmolLM2-135M", "/models/smollm2"
    ids = prompt(16)
    PionPromptCache(hub, url=url).get_or_prefill(ids)
    pc = PionPromptCache(local, url=url)
    pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1


def test_an_in_place_change_of_one_weight_is_seen_by_the_next_fingerprint(url):
    model = hf_llama()
    before = PionPromptCache(model, url=url).fp_hash
    assert PionPromptCache(model, url=url).fp_hash == before  # cached: same object, same versions
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[3, 7] += 1e-3
    assert PionPromptCache(model, url=url).fp_hash != before


def test_an_unmerged_peft_adapter_is_part_of_the_fingerprint(url):
    peft = pytest.importorskip("peft")
    base = hf_llama()
    ids = prompt(24)
    pc_base = PionPromptCache(base, url=url)
    pc_base.get_or_prefill(ids)
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    wrapped = peft.get_peft_model(hf_llama(), config).eval()
    pc_peft = PionPromptCache(wrapped, url=url)
    assert pc_peft.fp_hash != pc_base.fp_hash
    got = pc_peft.get_or_prefill(ids)
    assert pc_peft.stats()["hits"] == 0
    assert same_cache(got, pc_peft.adapter.prefill(ids))
    with wrapped.disable_adapter():  # the same bytes computing something else
        assert PionPromptCache(wrapped, url=url).fp_hash != pc_peft.fp_hash


def test_a_caller_fingerprint_skips_the_hash_and_is_the_identity(url, monkeypatch):
    from pion.client.adapters import transformers as hf_adapter

    def no_hash(self):
        raise AssertionError("the weights were hashed")

    monkeypatch.setattr(hf_adapter.TransformersAdapter, "weights_hash", no_hash)
    a = PionPromptCache(hf_llama(seed=0), url=url, fingerprint="org/model@3f2a")
    b = PionPromptCache(hf_llama(seed=0), url=url, fingerprint="org/model@3f2a")
    c = PionPromptCache(hf_llama(seed=0), url=url, fingerprint="org/model@9e1c")
    assert a.fp_hash == b.fp_hash != c.fp_hash
    assert a.fingerprint["weights"] == "caller:org/model@3f2a"


@pytest.mark.mlx
def test_an_mlx_lora_unmerged_or_fused_changes_the_fingerprint(url):
    pytest.importorskip("mlx_lm")
    import mlx.core as mx
    from mlx_lm.tuner.lora import LoRALinear

    from tests.client.models import mlx_llama

    base_fp = PionPromptCache(mlx_llama(), url=url).fp_hash
    model = mlx_llama()
    attn = model.model.layers[2].self_attn
    attn.v_proj = LoRALinear.from_base(attn.v_proj, r=2, scale=2.0)
    attn.v_proj.lora_b = mx.ones_like(attn.v_proj.lora_b) * 0.01
    unmerged = PionPromptCache(model, url=url).fp_hash
    assert unmerged != base_fp
    attn.v_proj.scale = 4.0
    rescaled = PionPromptCache(model, url=url).fp_hash
    assert rescaled not in (base_fp, unmerged)
    attn.v_proj = attn.v_proj.fuse()
    assert PionPromptCache(model, url=url).fp_hash not in (base_fp, unmerged, rescaled)


# -- partial reuse (mlx-lm's fetch_nearest_cache) -------------------------------------------------


def continued(pc, cache, rest, full):
    """The logits after running ``rest`` on a fetched cache, and after a cold prefill of ``full``."""
    import numpy as np

    warm = pc.adapter.forward(rest, cache)
    cold = pc.adapter.forward(full, pc.adapter.new_cache())
    return float(np.abs(warm - cold).max())


def test_a_prompt_extending_a_stored_prefix_reuses_all_of_it(url):
    pc = PionPromptCache(hf_llama(), url=url, block_size=16)
    stored, full = prompt(40), prompt(40) + prompt(10, offset=3)
    pc.get_or_prefill(stored)
    cache, rest = pc.fetch_nearest(full)
    assert len(rest) == 10, "only the block-aligned head (32 of 40 tokens) was reused"
    assert pc.stats()["partial_hits"] == 1 and pc.stats()["partial_tokens"] == 40
    assert continued(pc, cache, rest, full) < 1e-4


def test_a_prefix_shorter_than_one_block_is_found_for_a_prompt_extending_it(url):
    pc = PionPromptCache(hf_llama(), url=url)  # block_size 256
    stored = prompt(30)
    pc.get_or_prefill(stored)
    cache, rest = pc.fetch_nearest(stored + prompt(12, offset=5))
    assert len(rest) == 12 and pc.stats()["partial_tokens"] == 30


def test_a_prompt_shorter_than_a_stored_prefix_reuses_its_head(url):
    pc = PionPromptCache(hf_llama(), url=url, block_size=16)
    pc.get_or_prefill(prompt(40))
    head = prompt(40)[:35]
    cache, rest = pc.fetch_nearest(head)
    assert rest == [] and pc.stats()["partial_tokens"] == 35 and pc.adapter.seq_len(cache) == 35


def test_a_client_with_another_block_size_finds_the_prefix_and_counts_it(url):
    model = hf_llama()
    PionPromptCache(model, url=url, block_size=16).get_or_prefill(prompt(40))
    other = PionPromptCache(model, url=url, block_size=32)
    cache, rest = other.fetch_nearest(prompt(40) + prompt(8, offset=4))
    assert len(rest) == 8 and other.stats()["block_size_mismatches"] == 1


def test_a_hybrid_reuses_a_stored_prefix_of_any_length_that_the_prompt_extends(url):
    from tests.client.models import hf_lfm2

    pc = PionPromptCache(hf_lfm2(), url=url, block_size=16)
    stored = prompt(20)  # not a multiple of the block size
    pc.get_or_prefill(stored)
    full = stored + prompt(9, offset=2)
    cache, rest = pc.fetch_nearest(full)
    assert len(rest) == 9 and pc.stats()["partial_hits"] == 1
    assert continued(pc, cache, rest, full) < 1e-4
    cache, rest = pc.fetch_nearest(stored[:18] + prompt(9, offset=3))  # diverges inside: no state there
    assert cache is None and pc.stats()["hybrid_partial_skips"] == 1


def test_an_explicit_namespace_reused_for_a_changed_prompt_warns_once_and_can_be_replaced(url):
    pc = PionPromptCache(hf_llama(), url=url)
    old, new = prompt(20), prompt(20, offset=7)
    pc.get_or_prefill(old, namespace="system-prompt")
    with pytest.warns(RuntimeWarning, match="holds another prefix.*replace=True"):
        pc.get_or_prefill(new, namespace="system-prompt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per namespace
        pc.get_or_prefill(new, namespace="system-prompt")
    assert pc.stats()["namespace_conflicts"] == 2 and pc.stats()["hits"] == 0
    cold_new = pc.get_or_prefill(new, namespace="system-prompt", replace=True)
    assert pc.stats()["replaced"] == 1
    warm = pc.get_or_prefill(new, namespace="system-prompt")
    assert pc.stats()["hits"] == 1 and same_cache(warm, cold_new)


def interleave_after_manifest(pc, between):
    """Make ``pc``'s next fetch pipeline run in two halves with ``between()`` in the middle: what
    the server does when it serves other clients while ours waits (its replies backed up)."""
    send = pc.client.pipeline_execute

    def split(commands, **kwargs):
        commands = list(commands)
        if commands[0][0] != "KV.PREFIX.LOOKUP":
            return send(commands, **kwargs)
        pc.client.pipeline_execute = send  # once
        cut = next(i for i, c in enumerate(commands) if c[0] == "KV.PREFIX.MANIFEST") + 1
        head = send(commands[:cut], **kwargs)
        between()
        return head + send(commands[cut:], **kwargs)

    pc.client.pipeline_execute = split


@pytest.mark.parametrize("lane", [False, True], ids=["socket", "local-lane"])
def test_a_prefix_replaced_while_a_reader_fetches_it_is_a_miss_never_a_mix(url, lane):
    model = hf_llama()
    reader, writer = PionPromptCache(model, url=url, local_lane=lane), PionPromptCache(model, url=url)
    assert reader.local_lane is lane
    old, new = prompt(24), prompt(24, offset=5)
    cold_old, cold_new = reader.adapter.prefill(old), writer.adapter.prefill(new)
    assert reader.put(old, cold_old, namespace="fixed")
    interleave_after_manifest(reader, lambda: writer.put(new, cold_new, namespace="fixed", replace=True))
    got = quietly(reader.get_or_prefill, old, namespace="fixed")  # read the old manifest, then the new rows
    assert reader.stats()["hits"] == 0, "the reader loaded the replacement's rows under the old manifest"
    assert same_cache(got, cold_old) and not same_cache(got, cold_new)
    assert same_cache(writer.get_or_prefill(new, namespace="fixed"), cold_new) and writer.stats()["hits"] == 1


def test_a_prefix_replaced_between_match_and_fetch_is_a_miss_never_another_prompt_s_head(url):
    """MATCH compared the tokens; a partial hit's manifest cannot say which tokens its head holds,
    so the fetch must read the entry MATCH answered (its generation), not whatever is there now."""
    model = hf_llama()
    reader, writer = PionPromptCache(model, url=url), PionPromptCache(model, url=url)
    old, new = prompt(40), prompt(40, offset=9)
    cold_old, cold_new = reader.adapter.prefill(old), writer.adapter.prefill(new)
    assert reader.put(old, cold_old, namespace="fixed")
    match = reader.client.kv_match_tokens

    def then_replace(*args, **kwargs):
        found = match(*args, **kwargs)
        writer.put(new, cold_new, namespace="fixed", replace=True)
        return found

    reader.client.kv_match_tokens = then_replace
    cache, rest = reader.fetch_nearest(old[:30])  # MATCH finds old's head in "fixed", then it is replaced
    assert cache is None and rest == old[:30], "the reader took the replacement's rows as the old prompt's head"
    assert reader.stats()["partial_hits"] == 0
    reader.client.kv_match_tokens = match
    cache, rest = reader.fetch_nearest(new[:30])
    assert reader.stats()["partial_hits"] == 1 and rest == []
    assert all(torch.equal(got.keys, full.keys[:, :, :30]) for got, full in zip(cache.layers, cold_new.layers,
                                                                                 strict=True))


# -- the portable prefix artifact -------------------------------------------------------------


def test_export_then_import_into_an_empty_server_hits_with_identical_logits(make_server, tmp_path):
    import numpy as np

    from tests.client.models import hf_lfm2

    for make in (hf_llama, hf_lfm2):  # plain attention, and a hybrid with recurrent state
        model = make()
        ids, suffix = prompt(30), prompt(4, offset=6)
        first = make_server()
        pc = PionPromptCache(model, url=f"pion://127.0.0.1:{first.port}", vquant="int8" if make is hf_llama else "auto")
        pc.get_or_prefill(ids)
        expected = pc.adapter.forward(suffix, pc.get_or_prefill(ids))  # what a hit on the first server gives
        path = tmp_path / f"{make.__name__}.safetensors"
        assert pc.export(ids, path) == path.stat().st_size
        pc.close()
        first.stop()
        second = make_server()  # another, empty data directory
        fresh = PionPromptCache(model, url=f"pion://127.0.0.1:{second.port}", vquant=pc.vquant)
        assert fresh.import_(path) == fresh.namespace(ids)
        warm = fresh.get_or_prefill(ids)
        assert fresh.stats()["hits"] == 1
        assert np.array_equal(fresh.adapter.forward(suffix, warm), expected)


def test_a_damaged_truncated_or_foreign_artifact_is_refused_with_the_reason(url, tmp_path):
    import redis

    from pion.client import ArtifactRefused

    pc = PionPromptCache(hf_llama(), url=url)
    ids = prompt(24)
    pc.get_or_prefill(ids)
    good = tmp_path / "good.safetensors"
    pc.export(ids, good)
    data = good.read_bytes()
    flipped, truncated = tmp_path / "flipped", tmp_path / "truncated"
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(damaged))
    truncated.write_bytes(data[:-100])
    other = PionPromptCache(hf_llama(seed=3), url=url)
    pc.drop(ids)
    for path, why in ((flipped, "checksum does not match"), (truncated, "checksum does not match"),
                      (good, "not for this model: another model")):
        with pytest.raises(ArtifactRefused, match=why):
            other.import_(path) if path is good else pc.import_(path)
    r = redis.Redis(port=int(url.rsplit(":", 1)[1]))
    for blob, why in ((bytes(damaged), "checksum does not match"), (data[:-100], "checksum does not match"),
                      (b"junk", "not a prefix artifact")):
        with pytest.raises(redis.ResponseError, match=f"KV.PREFIX.IMPORT: .*{why}"):
            r.execute_command("KV.PREFIX.IMPORT", blob)  # the server checks too
    assert not pc.client.kv_lookup(pc.namespace(ids))
    assert pc.import_(good) == pc.namespace(ids) and pc.client.kv_lookup(pc.namespace(ids))
    with pytest.raises(Exception, match="holds another prefix"):
        r.execute_command("KV.PREFIX.IMPORT", other_artifact(other, tmp_path, ns=pc.namespace(ids)))


def other_artifact(pc, tmp_path, ns):
    """Another model's artifact stored under ``ns``."""
    ids = prompt(24)
    pc.put(ids, pc.adapter.prefill(ids), namespace="elsewhere")
    pc.export(ids, tmp_path / "other.safetensors", namespace="elsewhere")
    from pion.codecs.artifact import pack, unpack

    art = unpack((tmp_path / "other.safetensors").read_bytes())
    art.ns = ns.encode()
    return pack(art)


def test_an_imported_prefix_survives_kill_9(tmp_path):
    from tests.support.servers import ProcessServer

    model = hf_llama()
    ids = prompt(20)
    source = ProcessServer(tmp_path / "a").start()
    target = ProcessServer(tmp_path / "b").start()
    try:
        pc = PionPromptCache(model, url=f"pion://127.0.0.1:{source.port}")
        pc.get_or_prefill(ids)
        pc.export(ids, tmp_path / "p.safetensors")
        into = PionPromptCache(model, url=f"pion://127.0.0.1:{target.port}")
        into.import_(tmp_path / "p.safetensors")
        into.close()
        target.kill9()
        target.start()
        again = PionPromptCache(model, url=f"pion://127.0.0.1:{target.port}")
        again.get_or_prefill(ids)
        assert again.stats()["hits"] == 1
    finally:
        source.stop()
        target.stop()


# -- first hit in a fresh process ---------------------------------------------------------------


def test_warm_up_prefaults_the_first_hit_s_memory_and_changes_no_result(url):
    model = hf_llama()
    ids = prompt(40)
    PionPromptCache(model, url=url).get_or_prefill(ids)
    pc = PionPromptCache(model, url=url, warm_up_tokens=64)
    per_token = 4 * 2 * 32 * 4  # 4 layers, K and V, 32 values, fp32
    expected = -(-int(per_token * 65 * 1.25) // (1 << 20)) * (1 << 20)
    assert pc.warm_up(64) == (expected if pc.allocator_tuned else 0)
    cold = pc.adapter.prefill(ids)
    assert same_cache(pc.get_or_prefill(ids), cold) and pc.stats()["hits"] == 1
