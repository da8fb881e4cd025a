"""A small deterministic text embedder for search tests: each word maps to a fixed random unit
direction (seeded by its hash), a text is the normalised sum of its words. Texts that share words
are close; nothing is downloaded. ``minilm`` in test_search_minilm.py is the real model."""

from __future__ import annotations

import hashlib

import numpy as np

DIM = 32


def embed(text: str, dim: int = DIM) -> list[float]:
    vector = np.zeros(dim, dtype=np.float32)
    for word in text.lower().split():
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
        vector += np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    norm = float(np.linalg.norm(vector))
    return (vector / norm if norm else vector).tolist()


def blob(text: str, dim: int = DIM) -> bytes:
    return np.asarray(embed(text, dim), dtype=np.float32).tobytes()
