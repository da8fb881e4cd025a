"""The pion backend: chunks stored in the server, composed by another process and after kill -9;
manifests that fail closed (another model, another stub, other tokens, another codec, the local
manifest file of another model)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pion.client.retrieval import HybridRetrievalCache, Repair
from pion.client.retrieval.entries import chunk_manifest
from tests.client import models
from tests.client.retrieval_models import CHUNKS, QUESTION, STUB, tiny
from tests.support.servers import ProcessServer

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
RUNTIMES = [pytest.param("hf", marks=pytest.mark.hf), pytest.param("mlx", marks=pytest.mark.mlx)]
ORDER = ["c3", "c0", "c2"]


def make(runtime: str, url: str, **options) -> HybridRetrievalCache:
    pytest.importorskip("mlx_lm" if runtime == "mlx" else "transformers")
    return HybridRetrievalCache(tiny(runtime), backend="pion", url=url, **options)


def filled(runtime: str, url: str, **options) -> HybridRetrievalCache:
    rc = make(runtime, url, **options)
    rc.set_shared_stub(STUB)
    for chunk_id, ids in CHUNKS.items():
        rc.ingest_pack(chunk_id, ids)
    return rc


def composed_logits(rc, order=ORDER, repair=None) -> np.ndarray:
    cache, suffix = rc.prepare_multi(order, QUESTION, repair=repair)
    return rc.adapter.forward(suffix, cache)


def run_worker(runtime: str, url: str, order, ratio: float | None = None) -> dict:
    argv = [sys.executable, "-m", "tests.client.retrieval_worker", runtime, url, ",".join(order)]
    argv += [str(ratio)] if ratio is not None else []
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_pion_backend_composes_exactly_what_inproc_composes(url, runtime):
    rc = filled(runtime, url)
    local = HybridRetrievalCache(rc.adapter.model)
    local.set_shared_stub(STUB)
    for chunk_id, ids in CHUNKS.items():
        local.ingest_pack(chunk_id, ids)
    assert np.array_equal(composed_logits(rc), composed_logits(local))
    stats = rc.stats()
    assert stats["backend"] == "pion" and stats["ingest_count"] == 5 and stats["hydrate_count"] == 3
    assert stats["local_hits"] == 3  # same host: the rows come from the mapped V.EXPORT files
    assert stats["bytes_fetched"] > 0 and stats["store_ms_total"] > 0
    socket = make(runtime, url, local_lane=False)
    socket.set_shared_stub(STUB)
    assert np.array_equal(composed_logits(socket), composed_logits(local))
    assert socket.stats()["local_hits"] == 0 and socket.stats()["hydrate_count"] == 3


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_another_process_composes_the_stored_chunks(url, runtime):
    rc = filled(runtime, url)
    expected = composed_logits(rc)
    result = run_worker(runtime, url, ORDER, ratio=0.3)  # repair needs the tokens: they come from the manifests
    stats = result["stats"]
    assert stats["ingest_count"] == 0 and stats["hydrate_count"] == 3 and stats["manifest_mismatches"] == 0
    assert result["report"]["rotated_tokens"] == len(CHUNKS["c0"]) + len(CHUNKS["c2"])
    assert np.array_equal(np.array(result["logits"], dtype=np.float32), expected)
    assert result["repaired_tokens"] > 0
    repaired = composed_logits(rc, repair=Repair.cacheblend(0.3))
    assert np.array_equal(np.array(result["repaired_logits"], dtype=np.float32), repaired)


@pytest.mark.hf
def test_chunks_survive_kill_9_and_restart(tmp_path):
    pytest.importorskip("transformers")
    srv = ProcessServer(tmp_path / "data").start()
    try:
        url = f"pion://127.0.0.1:{srv.port}"
        expected = composed_logits(filled("hf", url))
        srv.kill9()
        srv.start()
        result = run_worker("hf", url, ORDER)
        assert result["stats"]["hydrate_count"] == 3 and result["stats"]["ingest_count"] == 0, srv.log()[-2000:]
        assert np.array_equal(np.array(result["logits"], dtype=np.float32), expected)
    finally:
        srv.stop()


@pytest.mark.hf
def test_a_lone_chunk_is_found_by_id_in_a_new_cache(url):
    first = make("hf", url)
    first.ingest("doc", models.prompt(17))
    second = make("hf", url)
    assert second.has("doc")
    cache, _ = second.prepare("doc", QUESTION)
    assert second.adapter.seq_len(cache) == 17 and second.stats()["ingest_count"] == 0
    second.ingest("doc", models.prompt(17))  # already stored: nothing encoded
    assert second.stats()["ingest_count"] == 0 and second.stats()["ingest_hits"] == 1
    assert second.evict("doc")
    assert not make("hf", url).has("doc")
    assert not second.prompt_cache.client.kv_lookup(second.chunk_namespace("doc"))


@pytest.mark.hf
def test_other_tokens_under_the_same_id_replace_the_stored_chunk(url):
    first = make("hf", url)
    first.ingest("doc", models.prompt(12))
    first.ingest("doc", models.prompt(12, offset=3))  # published over the old rows in one step
    assert first.stats()["ingest_count"] == 2 and first.stats()["errors"] == 0
    other = make("hf", url)
    k, _ = other.composer.rows(other.prepare("doc", [])[0])
    assert np.array_equal(k, other.composer.rows(other.adapter.prefill(models.prompt(12, offset=3)))[0])


@pytest.mark.hf
def test_a_lossy_codec_is_another_namespace(url):
    exact = filled("hf", url)
    fp16 = make("hf", url, vquant="fp16")
    fp16.set_shared_stub(STUB)
    assert not fp16.has("c0")  # stored with another codec schema: not visible
    for chunk_id, ids in CHUNKS.items():
        fp16.ingest_pack(chunk_id, ids)
    a, b = composed_logits(exact), composed_logits(fp16)
    assert not np.array_equal(a, b) and np.abs(a - b).max() < 0.05


# -- fail closed ------------------------------------------------------------------------------


@pytest.mark.hf
def test_another_models_chunk_under_this_namespace_is_a_miss(url):
    mine = make("hf", url)
    theirs = HybridRetrievalCache(models.hf_llama(seed=1), backend="pion", url=url)
    ids = models.prompt(12)
    theirs.ingest("doc", ids)
    assert not mine.has("doc")  # the namespaces differ: a plain miss
    forge(theirs, "doc", ids, mine.chunk_namespace("doc"))  # a collision: their rows under my name
    assert not mine.has("doc")
    with pytest.raises(KeyError):
        mine.prepare("doc", QUESTION)
    assert mine.stats()["manifest_mismatches"] >= 1 and "another model" in mine.last_mismatch


@pytest.mark.hf
def test_a_pack_encoded_after_another_stub_is_a_miss(url):
    rc = filled("hf", url)
    other_stub = models.prompt(10, offset=40)
    rc.set_shared_stub(other_stub)
    assert not rc.has("c0")
    old = HybridRetrievalCache(rc.adapter.model, backend="pion", url=url)
    old.set_shared_stub(STUB)
    forge(old, "c0", CHUNKS["c0"], rc.chunk_namespace("c0", rc._stub_sha), kind="pack", encoded_at=len(STUB))
    assert not rc.has("c0") and "another stub" in rc.last_mismatch


@pytest.mark.hf
def test_rows_whose_tokens_changed_behind_the_entry_are_not_loaded(url):
    rc = make("hf", url)
    rc.ingest("doc", models.prompt(12))
    ns = rc.chunk_namespace("doc")
    rc.store.drop(ns)
    forge(rc, "doc", models.prompt(12, offset=5), ns)  # same id, same model, other tokens
    with pytest.raises(KeyError, match="no longer stored"):
        rc.prepare("doc", QUESTION)
    assert "other tokens" in rc.last_mismatch


@pytest.mark.hf
def test_a_chunk_ingested_again_from_changed_text_is_refused_as_such(url):
    # another process re-ingests "doc" from edited text (15 tokens, not 12): the rows under the
    # name are no longer this cache's entry; the refusal says so and counts a mismatch
    mine = make("hf", url)
    mine.ingest("doc", models.prompt(12))
    theirs = make("hf", url)
    theirs.ingest("doc", models.prompt(15, offset=7))
    with pytest.raises(KeyError, match="refused: .*text changed") as refused:
        mine.prepare("doc", QUESTION)
    assert "evicted" not in str(refused.value)
    assert mine.stats()["manifest_mismatches"] == 1 and "text changed" in mine.last_mismatch
    mine.store.drop(mine.chunk_namespace("doc"))  # now really gone: an eviction, said as such
    with pytest.raises(KeyError, match=r"no longer stored \(evicted\)"):
        mine.prepare("doc", QUESTION)
    assert mine.stats()["manifest_mismatches"] == 1


@pytest.mark.hf
def test_the_local_manifest_file_persists_and_refuses_another_model(url, tmp_path):
    path = tmp_path / "chunks.json"
    filled("hf", url, manifest_path=path)
    data = json.loads(path.read_text())
    assert set(data["chunks"]) == set(CHUNKS) and data["chunks"]["c1"]["encoded_at"] == len(STUB)
    again = make("hf", url, manifest_path=path)
    again.set_shared_stub(STUB)
    assert again.has("c1") and again.stats()["chunks_in_manifest"] == 4
    with pytest.raises(ValueError, match="another model"):
        HybridRetrievalCache(models.hf_llama(seed=1), backend="pion", url=url, manifest_path=path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read"):
        make("hf", url, manifest_path=path)


@pytest.mark.hf
def test_inproc_chunks_do_not_outlive_the_process_even_with_a_manifest(tmp_path):
    path = tmp_path / "chunks.json"
    model = models.hf_llama()
    HybridRetrievalCache(model, manifest_path=path).ingest("doc", models.prompt(9))
    later = HybridRetrievalCache(model, manifest_path=path)
    assert not later.has("doc")
    with pytest.raises(KeyError):
        later.prepare("doc", QUESTION)


@pytest.mark.hf
def test_namespace_prefix_and_bad_arguments(url):
    rc = make("hf", url, namespace_prefix="tenant1:")
    assert rc.ingest("doc", models.prompt(5))["namespace"].startswith("tenant1:chunk_")
    with pytest.raises(ValueError, match="backend"):
        HybridRetrievalCache(models.hf_llama(), backend="disk")
    with pytest.raises(ValueError, match="vquant"):
        HybridRetrievalCache(models.hf_llama(), vquant="int8")


def forge(rc: HybridRetrievalCache, chunk_id: str, ids, namespace: str, kind: str = "chunk", encoded_at: int = 0) -> None:
    """Store ``rc``'s encoding of ``ids`` under someone else's ``namespace`` (a simulated collision)."""
    from pion.client.retrieval.entries import ChunkEntry, digest_tokens

    k, v = rc._encode(list(ids), kind)
    entry = ChunkEntry(chunk_id, namespace, len(ids), "pion", kind, encoded_at, rc._stub_sha if kind == "pack" else "",
                       digest_tokens(ids))
    manifest = chunk_manifest(fingerprint=rc.fingerprint, fp_hash=rc.fp_hash, layout=rc.layout, codecs=rc.schema,
                              token_ids=list(ids), block_size=rc.block_size, entry=entry)
    rc.store.put(namespace, manifest, np.ascontiguousarray(k), np.ascontiguousarray(v))


@pytest.mark.hf
def test_copy_to_warms_a_server_without_encoding(url):
    local = HybridRetrievalCache(models.hf_llama())
    local.set_shared_stub(STUB)
    for chunk_id, ids in CHUNKS.items():
        local.ingest_pack(chunk_id, ids)
    remote = make("hf", url)
    assert local.copy_to(remote) == 4
    remote.set_shared_stub(STUB)  # found in the server: not encoded
    assert remote.stats()["ingest_count"] == 0
    assert np.array_equal(composed_logits(remote), composed_logits(local))
    with pytest.raises(ValueError, match="same model"):
        local.copy_to(HybridRetrievalCache(models.hf_llama(seed=1), backend="pion", url=url))
