"""HybridRetrievalCache on the inproc backend, both runtimes: the reference's methods and algorithm, and repair.

``prepare`` must hold exactly the chunk's prefill; ``prepare_multi`` must equal the reference
algorithm (stub prefill; each pack the chunk's slice of ``prefill(stub + chunk)``; K rotated by
``delta = position - encoded_at`` with split-half RoPE, V unchanged); a full repair (ratio 1)
must equal a full prefill of the composed prompt.
"""

from __future__ import annotations

import numpy as np
import pytest

from pion.client.retrieval import HybridRetrievalCache, Repair
from pion.client.retrieval import repair as repair_module
from pion.client.retrieval.compose import rel_error
from tests.client import models
from tests.client.retrieval_models import CHUNKS, QUESTION, STUB, tiny
from tests.client.test_retrieval_rope import naive_split_half

RUNTIMES = [pytest.param("hf", marks=pytest.mark.hf), pytest.param("mlx", marks=pytest.mark.mlx)]


def make_model(runtime: str):
    pytest.importorskip("mlx_lm" if runtime == "mlx" else "transformers")
    return tiny(runtime)


@pytest.fixture(params=RUNTIMES)
def rc(request):
    cache = HybridRetrievalCache(make_model(request.param))
    cache.set_shared_stub(STUB)
    for chunk_id, ids in CHUNKS.items():
        cache.ingest_pack(chunk_id, ids)
    return cache


def rows(rc, cache) -> tuple[np.ndarray, np.ndarray]:
    return rc.composer.rows(cache)


def full_logits(rc, order, question=QUESTION) -> np.ndarray:
    ids = STUB + [t for c in order for t in CHUNKS[c]] + question
    return rc.adapter.forward(ids, rc.adapter.new_cache())


def reference_prepare_multi(rc, order) -> tuple[np.ndarray, np.ndarray]:
    """The reference system's algorithm, written out independently."""
    adapter, heads = rc.adapter, rc.adapter.layout.heads[0][0]
    stub_k, stub_v = rc.composer.rows(adapter.prefill(STUB))
    keys, values, cursor = [stub_k], [stub_v], len(STUB)
    for chunk_id in order:
        k, v = rc.composer.rows(adapter.prefill(STUB + CHUNKS[chunk_id]))
        k, v = k[:, len(STUB):], v[:, len(STUB):]
        delta = cursor - len(STUB)
        keys.append(np.stack([naive_split_half(layer, heads, 16, 10000.0, delta) for layer in k]))
        values.append(v)
        cursor += k.shape[1]
    return np.concatenate(keys, axis=1), np.concatenate(values, axis=1)


# -- single chunks ---------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_ingest_has_prepare_evict(runtime):
    rc = HybridRetrievalCache(make_model(runtime))
    ids = models.prompt(21)
    entry = rc.ingest("doc-1", ids)
    assert entry["tokens"] == 21 and entry["kind"] == "chunk" and entry["namespace"].startswith("chunk_")
    assert len(entry["namespace"]) == len("chunk_") + 24
    assert rc.has("doc-1") and not rc.has("doc-2")
    rc.ingest("doc-1", ids)  # idempotent
    assert rc.stats()["ingest_count"] == 1
    cache, suffix = rc.prepare("doc-1", QUESTION)
    assert suffix == QUESTION and rc.adapter.seq_len(cache) == 21
    k, v = rows(rc, cache)
    k0, v0 = rows(rc, rc.adapter.prefill(ids))
    assert np.array_equal(k, k0) and np.array_equal(v, v0)
    logits = rc.adapter.forward(suffix, cache)
    assert rel_error(logits, rc.adapter.forward(ids + QUESTION, rc.adapter.new_cache())) < 1e-5
    with pytest.raises(ValueError, match="holds 21 tokens"):
        rc.prepare("doc-1", QUESTION, chunk_token_count=20)
    assert rc.evict("doc-1") and not rc.has("doc-1")
    with pytest.raises(KeyError):
        rc.prepare("doc-1", QUESTION)
    stats = rc.stats()
    assert stats["backend"] == "inproc" and stats["hydrate_count"] == 1 and stats["hydrate_miss_count"] == 1


@pytest.mark.hf
def test_other_tokens_under_the_same_id_replace_the_chunk():
    rc = HybridRetrievalCache(models.hf_llama())
    rc.ingest("doc", models.prompt(12))
    rc.ingest("doc", models.prompt(12, offset=3))
    assert rc.stats()["ingest_count"] == 2
    k, _ = rows(rc, rc.prepare("doc", [])[0])
    assert np.array_equal(k, rows(rc, rc.adapter.prefill(models.prompt(12, offset=3)))[0])


# -- multi-chunk -----------------------------------------------------------------------------


def test_prepare_multi_equals_the_reference_algorithm(rc):
    order = ["c2", "c0", "c3"]
    cache, suffix = rc.prepare_multi(order, QUESTION)
    k, v = rows(rc, cache)
    ref_k, ref_v = reference_prepare_multi(rc, order)
    assert k.shape == ref_k.shape and rc.adapter.seq_len(cache) == len(STUB) + sum(len(CHUNKS[c]) for c in order)
    assert rel_error(v, ref_v) < 2e-5 and rel_error(k, ref_k) < 2e-5
    report = rc.last_prepare
    assert report["segments"] == [(10, 30), (30, 44), (44, 67)]
    assert report["rotated_tokens"] == 14 + 23  # the first pack is already in place
    assert suffix == QUESTION


def test_one_pack_is_the_prefix_itself(rc):
    cache, _ = rc.prepare_multi(["c1"], QUESTION)
    logits = rc.adapter.forward(QUESTION, cache)
    assert rc.last_prepare["rotated_tokens"] == 0
    assert rel_error(logits, full_logits(rc, ["c1"])) < 1e-4
    cache, _ = rc.prepare("c1", QUESTION)  # prepare of a pack composes stub + pack
    assert rc.adapter.seq_len(cache) == len(STUB) + len(CHUNKS["c1"])


def test_prepare_multi_refusals(rc):
    with pytest.raises(ValueError, match="max_packs is 2"):
        rc.prepare_multi(["c0", "c1", "c2"], QUESTION, max_packs=2)
    rc.prepare_multi(["c0", "c1", "c2"], QUESTION, max_packs=2, allow_fine_grain=True)
    with pytest.raises(KeyError, match="not stored"):
        rc.prepare_multi(["c0", "nope"], QUESTION)
    rc.ingest("alone", models.prompt(9))
    with pytest.raises(KeyError, match="ingested alone"):
        rc.prepare_multi(["c0", "alone"], QUESTION)
    with pytest.raises(TypeError):
        rc.prepare_multi(["c0"], QUESTION, repair="epic")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_packs_need_the_stub(runtime):
    rc = HybridRetrievalCache(make_model(runtime))
    with pytest.raises(RuntimeError, match="set_shared_stub"):
        rc.ingest_pack("c", models.prompt(5))
    with pytest.raises(RuntimeError, match="set_shared_stub"):
        rc.prepare_multi(["c"], QUESTION)
    assert rc.set_shared_stub(STUB)["stub_tokens"] == len(STUB)


def test_packs_of_another_stub_are_not_composed(rc):
    rc.set_shared_stub(models.prompt(10, offset=50))
    assert not rc.has("c0")
    with pytest.raises(KeyError):
        rc.prepare_multi(["c0"], QUESTION)
    rc.ingest_pack("c0", CHUNKS["c0"])
    rc.prepare_multi(["c0"], QUESTION)


@pytest.mark.hf
def test_models_with_recurrent_state_are_refused():
    with pytest.raises(NotImplementedError, match="recurrent-state"):
        HybridRetrievalCache(models.hf_lfm2())


# -- repair ----------------------------------------------------------------------------------


def test_full_recompute_equals_a_full_prefill(rc):
    order = ["c3", "c1", "c0", "c2"]
    cache, _ = rc.prepare_multi(order, QUESTION, repair=Repair(ratio=1.0))
    assert rc.last_prepare["repair"]["recompute_fraction"] == 1.0
    k, v = rows(rc, cache)
    k0, v0 = rows(rc, rc.adapter.prefill(STUB + [t for c in order for t in CHUNKS[c]]))
    assert rel_error(k, k0) < 1e-4 and rel_error(v, v0) < 1e-4
    assert rel_error(rc.adapter.forward(QUESTION, cache), full_logits(rc, order)) < 1e-4


def test_first_k_repairs_exactly_the_first_tokens_of_each_chunk(rc):
    order = ["c0", "c2", "c1"]
    plain_k, plain_v = rows(rc, rc.prepare_multi(order, QUESTION)[0])
    cache, _ = rc.prepare_multi(order, QUESTION, repair=Repair.epic(4))
    report = rc.last_prepare["repair"]
    starts = [s for s, _ in rc.last_prepare["segments"]]
    expected = [p for s in starts for p in range(s, s + 4)]
    assert report["positions"] == expected and report["checked_tokens"] == 0
    k, v = rows(rc, cache)
    untouched = np.setdiff1d(np.arange(k.shape[1]), expected)
    assert np.array_equal(k[:, untouched], plain_k[:, untouched]) and np.array_equal(v[:, untouched], plain_v[:, untouched])
    assert not np.array_equal(v[1:, expected[4:]], plain_v[1:, expected[4:]])


def test_first_k_covering_the_second_chunk_makes_two_chunks_exact(rc):
    """The first pack sits where it was encoded; recomputing all of the second makes the whole prompt exact."""
    order = ["c1", "c0"]
    cache, _ = rc.prepare_multi(order, QUESTION, repair=Repair.epic(len(CHUNKS["c0"])))
    assert rel_error(rc.adapter.forward(QUESTION, cache), full_logits(rc, order)) < 1e-4


@pytest.mark.parametrize(("measure", "block"), [("v", 512), ("k", 512), ("kv", 512), ("kv", 6)])
def test_deviation_repair_picks_the_tokens_whose_kv_moved_most(rc, measure, block, monkeypatch):
    """CacheBlend's selection: the top-ratio chunk tokens by |V_full - V_cached|^2 (or K, LMCache's
    diff_k, or both scaled by their means) on the check layer; the same in blocks of ``block``."""
    monkeypatch.setattr(repair_module, "BLOCK", block)
    order = ["c2", "c3", "c0"]
    plain_k, plain_v = rows(rc, rc.prepare_multi(order, QUESTION)[0])
    full_k, full_v = rows(rc, rc.adapter.prefill(STUB + [t for c in order for t in CHUNKS[c]]))
    cache, _ = rc.prepare_multi(order, QUESTION, repair=Repair.cacheblend(0.25, check_layer=1, measure=measure))
    report = rc.last_prepare["repair"]
    chunk_positions = np.arange(len(STUB), plain_v.shape[1])
    dev_v = ((full_v[1, chunk_positions] - plain_v[1, chunk_positions]) ** 2).sum(axis=-1)
    dev_k = ((full_k[1, chunk_positions] - plain_k[1, chunk_positions]) ** 2).sum(axis=-1)
    deviation = {"v": dev_v, "k": dev_k, "kv": dev_k / dev_k.mean() + dev_v / dev_v.mean()}[measure]
    count = int(np.ceil(0.25 * len(chunk_positions)))
    expected = set(chunk_positions[np.argsort(-deviation)[:count]].tolist())
    assert set(report["positions"]) == expected
    assert report["checked_tokens"] == len(chunk_positions) and report["recomputed"] == count
    # the check pass recomputed layers 0..1 of every chunk token exactly
    v = rows(rc, cache)[1]
    assert rel_error(v[:2, chunk_positions], full_v[:2, chunk_positions]) < 1e-4
    assert rc.stats()["repaired_tokens"] == count


def test_deviation_repair_recomputes_exactly_the_selected_tokens(rc):
    """Past the check layer only the chosen rows change; the check layers are exact for every chunk
    token; the stub and the first pack (where they were encoded) never change."""
    order = ["c1", "c3", "c0", "c2"]
    plain_k, plain_v = rows(rc, rc.prepare_multi(order, QUESTION)[0])
    full_k, full_v = rows(rc, rc.adapter.prefill(STUB + [t for c in order for t in CHUNKS[c]]))
    cache, _ = rc.prepare_multi(order, QUESTION, repair=Repair.cacheblend(0.2, check_layer=1, first_k=2))
    report = rc.last_prepare["repair"]
    chosen = np.array(report["positions"])
    n_chunk = plain_k.shape[1] - len(STUB)
    assert len(chosen) == int(np.ceil(0.2 * n_chunk)) == report["recomputed"]
    starts = [s for s, _ in rc.last_prepare["segments"]]
    assert {p for s in starts for p in (s, s + 1)} <= set(chosen.tolist())  # the first-k share of the budget
    k, v = rows(rc, cache)
    others = np.setdiff1d(np.arange(plain_k.shape[1]), chosen)
    for side, plain, full in ((k, plain_k, full_k), (v, plain_v, full_v)):
        assert np.array_equal(side[2:, others], plain[2:, others])  # untouched past the check layer
        assert rel_error(side[:2], full[:2]) < 1e-4  # layers 0..1: every token recomputed exactly
        assert not np.array_equal(side[2:, chosen], plain[2:, chosen])
    first = slice(0, rc.last_prepare["segments"][0][1])  # the stub and the first pack were already exact
    assert rel_error(k[:, first], full_k[:, first]) < 1e-4 and rel_error(v[:, first], full_v[:, first]) < 1e-4


@pytest.mark.parametrize("block", [512, 7])
def test_full_recompute_logits_equal_a_full_prefill_with_every_selector(rc, block, monkeypatch):
    """Also when the passes run as several in-place forwards (``repair.BLOCK`` tokens each)."""
    monkeypatch.setattr(repair_module, "BLOCK", block)
    order = ["c2", "c0", "c3", "c1"]
    expected = full_logits(rc, order)
    for plan in (Repair(ratio=1.0, measure="k"), Repair(first_k=2, ratio=1.0), Repair.cacheblend(1.0, 1, 3, 1.0)):
        cache, _ = rc.prepare_multi(order, QUESTION, repair=plan)
        assert rc.last_prepare["repair"]["recompute_fraction"] == 1.0
        got = rc.adapter.forward(QUESTION, cache)
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * np.abs(expected).max())
        assert int(np.argmax(got)) == int(np.argmax(expected))


@pytest.mark.parametrize("plan", [Repair.cacheblend(0.2), Repair.cacheblend(0.2, 1, 2, 0.5, measure="kv"),
                                  Repair.cacheblend(0.3, first_k=2, measure="k")], ids=["v1", "funnel-kv", "sinks-k"])
def test_the_one_forward_funnel_equals_the_staged_passes(rc, plan):
    """transformers runs a funnel's deeper stages and the recompute as one narrowing forward
    (CacheBlend's progressive filtering: the unselected tokens' hidden states dropped at each
    stage); it must choose and compute what separate passes do."""
    from pion.client.retrieval.repair import run_repair

    order = ["c2", "c3", "c0", "c1"]
    ids = np.array(STUB + [t for c in order for t in CHUNKS[c]])
    got = []
    for one_pass in (True, False):
        cache, _ = rc.prepare_multi(order, QUESTION)
        report = run_repair(rc.composer.runtime, cache, ids, rc.last_prepare["segments"], plan, one_pass=one_pass)
        got.append((report, rows(rc, cache), rc.adapter.forward(QUESTION, cache)))
    (one, (k1, v1), logits1), (staged, (k2, v2), logits2) = got
    assert one["positions"] == staged["positions"] and one["recomputed"] == staged["recomputed"]
    assert one["compute"] <= staged["compute"]
    assert rel_error(k1, k2) < 1e-5 and rel_error(v1, v2) < 1e-5 and rel_error(logits1, logits2) < 1e-5
    if rc.adapter.runtime == "hf" and plan.refine_layer is not None:
        assert one["passes"] == 2 < staged["passes"] and one["compute"] < staged["compute"]


def test_repair_validation(rc):
    with pytest.raises(ValueError):
        Repair(ratio=1.5)
    with pytest.raises(ValueError):
        Repair(first_k=-1)
    with pytest.raises(ValueError, match="measure"):
        Repair(ratio=0.1, measure="q")
    with pytest.raises(ValueError, match="attention layers"):
        rc.prepare_multi(["c0", "c1"], QUESTION, repair=Repair(ratio=0.1, check_layer=9))


def test_the_deviation_funnel_reranks_the_preselected_tokens_on_a_deeper_layer(rc):
    order = ["c2", "c3", "c0"]
    plain_v = rows(rc, rc.prepare_multi(order, QUESTION)[0])[1]
    full_v = rows(rc, rc.adapter.prefill(STUB + [t for c in order for t in CHUNKS[c]]))[1]
    rc.prepare_multi(order, QUESTION, repair=Repair.cacheblend(0.2, check_layer=1, refine_layer=3, preselect=0.5))
    report = rc.last_prepare["repair"]
    chunk_positions = np.arange(len(STUB), plain_v.shape[1])
    n = len(chunk_positions)
    deviation = ((full_v[1, chunk_positions] - plain_v[1, chunk_positions]) ** 2).sum(axis=-1)
    preselected = set(chunk_positions[np.argsort(-deviation)[: int(np.ceil(0.5 * n))]].tolist())
    assert set(report["positions"]) <= preselected and report["recomputed"] == int(np.ceil(0.2 * n))
    pre = int(np.ceil(0.5 * n))
    if report["passes"] == 2:  # layers 0-1 for all, then one narrowing forward of the preselected from layer 0
        expected = (n * 2 + pre * 4) / (n * 4)
    else:  # a pass per stage from layer 0, then the chosen through every layer
        assert report["passes"] == 3
        expected = (n * 2 + pre * 4 + report["recomputed"] * 4) / (n * 4)
    assert report["compute"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="deeper"):
        Repair.cacheblend(0.2, check_layer=2, refine_layer=1)
    with pytest.raises(ValueError, match="preselect"):
        Repair(ratio=0.3, refine_layer=3, preselect=0.1)
