"""AI.EMBED over the wire: blob shapes in RESP2 and RESP3, argument errors, transactions and
scripts refused, the reference's AI.* names refused with the reason, INFO ``# Embedding``; the real
model in a worker process (the server itself never maps torch); and a server without the extra
starting and naming it."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
import redis

from tests.ai.conftest import connect
from tests.support.servers import ProcessServer


def test_embed_answers_one_unit_blob_per_text(both):
    blobs = both.execute_command("AI.EMBED", "red apple pie", "green tea", "red apple")
    vectors = [np.frombuffer(b, dtype="<f4") for b in blobs]
    assert [v.shape for v in vectors] == [(384,)] * 3
    assert np.allclose([np.linalg.norm(v) for v in vectors], 1.0, atol=1e-5)
    assert vectors[0] @ vectors[2] > vectors[0] @ vectors[1]
    again = both.execute_command("AI.EMBED", "red apple pie")
    assert again[0] == blobs[0]


def test_embed_blobs_feed_ft_search(ai):
    ai.execute_command("FT.CREATE", "docs", "ON", "HASH", "PREFIX", "1", "d:", "SCHEMA", "t", "TEXT",
                       "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "384", "DISTANCE_METRIC", "COSINE")
    texts = ["the cat sat on the mat", "stock markets fell", "a cat and a dog"]
    for i, (text, blob) in enumerate(zip(texts, ai.execute_command("AI.EMBED", *texts), strict=True)):
        ai.hset(f"d:{i}", mapping={"t": text, "v": blob})
    query = ai.execute_command("AI.EMBED", "cat")[0]
    reply = ai.execute_command("FT.SEARCH", "docs", "*=>[KNN 2 @v $q AS d]", "PARAMS", "2", "q", query,
                               "SORTBY", "d", "RETURN", "1", "t", "DIALECT", "2")
    assert reply[0] == 2 and {reply[2][1], reply[4][1]} == {b"the cat sat on the mat", b"a cat and a dog"}


def test_embed_errors(ai):
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        ai.execute_command("AI.EMBED")
    with pytest.raises(redis.ResponseError, match="UTF-8"):
        ai.execute_command("AI.EMBED", b"\xff\xfe")
    with pytest.raises(redis.ResponseError, match="at most 4096"):
        ai.execute_command("AI.EMBED", *["x"] * 4097)
    pipe = ai.pipeline(transaction=True)
    pipe.execute_command("AI.EMBED", "x")
    with pytest.raises(redis.ResponseError, match="not allowed|EXECABORT"):
        pipe.execute()
    with pytest.raises(redis.ResponseError, match="not allowed from script|This Redis command is not allowed"):
        ai.eval("return redis.call('AI.EMBED', 'x')", 0)
    assert ai.ping()


@pytest.mark.parametrize("name", ["AI.COMPLETE", "AI.CHAT", "AI.GENERATE", "AI.LOADMODEL"])
def test_reference_ai_commands_are_refused_with_the_reason(ai, name):
    with pytest.raises(redis.ResponseError, match=f"{name} is not offered by Pion: .+"):
        ai.execute_command(name, "hello")


def test_info_has_an_embedding_section(ai):
    ai.execute_command("AI.EMBED", "a", "b")
    info = ai.info("embedding")
    assert info["embedding_provider"] == "hash" and info["embedding_dim"] == 384
    assert info["embedding_texts"] == 2 and info["embedding_batches"] == 1


def test_minilm_runs_in_a_worker_and_the_server_never_maps_torch(tmp_path):
    proc = ProcessServer(tmp_path / "data").start()
    try:
        client = connect(proc.port, 2)
        food, bread = (np.frombuffer(b, dtype="<f4") for b in
                       client.execute_command("AI.EMBED", "A man is eating food.", "A man is eating a piece of bread."))
        assert float(food @ bread) == pytest.approx(0.755337, abs=1e-4)
        info = client.info("embedding")
        assert info["embedding_model"] == "all-MiniLM-L6-v2" and info["embedding_worker_pid"] > 0
        assert info["embedding_worker_pid"] != proc.proc.pid
        maps = open(f"/proc/{proc.proc.pid}/maps").read()
        assert "libtorch" not in maps and "torch/lib" not in maps  # the model lives in the worker only
        worker_maps = open(f"/proc/{info['embedding_worker_pid']}/maps").read()
        assert "libtorch" in worker_maps
        client.close()
    finally:
        proc.stop()


def test_without_the_extra_the_server_starts_and_names_it(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import sys
        for name in ("torch", "transformers", "all_minilm_l6_v2"):
            sys.modules[name] = None  # as on a machine without the [embed] extra
    """))
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = ProcessServer(tmp_path / "data").start()
    try:
        client = connect(proc.port, 2)
        assert client.set("k", "v") and client.get("k") == b"v"
        for argv in (("AI.EMBED", "x"), ("AI.SEMANTIC_CACHE", "GET", "x"), ("AI.MEMORY", "ADD", "s", "user", "x")):
            with pytest.raises(redis.ResponseError, match=r"not installed.*pip install 'pion\[embed\]'"):
                client.execute_command(*argv)
        assert client.ping()
        client.close()
    finally:
        proc.stop()
