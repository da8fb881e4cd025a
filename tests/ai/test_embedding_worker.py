"""The embedding worker subprocess with the real packaged all-MiniLM-L6-v2: the similarities
sentence-transformers gives for the same model, a local sentence-transformers directory, a killed
worker coming back, and a missing extra named in the error (and the worker not respawned)."""

from __future__ import annotations

import os
import signal
import textwrap

import numpy as np
import pytest

from pion.embedding.providers import EmbeddingError, EmbeddingUnavailable
from pion.embedding.worker_client import WorkerProvider

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse.",
             "The new movie is awesome", "The new movie is so great"]
#: cosine similarities from sentence-transformers 6.2 (SentenceTransformer on the same weights,
#: normalize_embeddings=True), measured once: the worker must reproduce them
KNOWN = {(0, 1): 0.755337, (0, 2): 0.247401, (3, 4): 0.893904, (0, 3): -0.040166}


@pytest.fixture(scope="module")
def minilm_worker():
    worker = WorkerProvider("minilm", threads=1, timeout=120)
    yield worker
    worker.close()


def test_packaged_minilm_matches_sentence_transformers(minilm_worker):
    vectors = minilm_worker.embed(SENTENCES)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    for (i, j), expected in KNOWN.items():
        assert float(vectors[i] @ vectors[j]) == pytest.approx(expected, abs=1e-4)
    assert minilm_worker.name == "all-MiniLM-L6-v2" and minilm_worker.dim == 384
    assert minilm_worker.embed([]).shape == (0, 384)


def test_a_killed_worker_is_started_again(minilm_worker):
    minilm_worker.embed(["warm"])
    os.kill(minilm_worker.pid(), signal.SIGKILL)
    minilm_worker.proc.wait(10)
    again = minilm_worker.embed([SENTENCES[0], SENTENCES[1]])  # a fresh worker answers
    assert float(again[0] @ again[1]) == pytest.approx(KNOWN[(0, 1)], abs=1e-4)
    assert minilm_worker.crashes == 1 and minilm_worker.starts == 2


def test_a_sentence_transformers_directory(tmp_path, minilm_worker):
    import all_minilm_l6_v2

    path = all_minilm_l6_v2.extract_model(str(tmp_path))
    worker = WorkerProvider("sentence-transformers", str(path), timeout=120)
    try:
        local = worker.embed(SENTENCES[:2])
        assert worker.dim == 384
        assert np.allclose(local, minilm_worker.embed(SENTENCES[:2]), atol=1e-5)
    finally:
        worker.close()
    with pytest.raises(EmbeddingError, match="does not exist"):
        WorkerProvider("sentence-transformers", str(tmp_path / "nope")).embed(["x"])


def test_a_missing_extra_is_named_and_not_retried(tmp_path, monkeypatch):
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # as if the [embed] extra were not installed
    """))
    monkeypatch.setenv("PYTHONPATH", f"{blocker}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    worker = WorkerProvider("minilm", timeout=60)
    with pytest.raises(EmbeddingUnavailable, match=r"torch not installed.*pip install 'pion\[embed\]'"):
        worker.embed(["x"])
    with pytest.raises(EmbeddingUnavailable):
        worker.embed(["y"])
    assert worker.starts == 1  # the second request is answered without spawning again
