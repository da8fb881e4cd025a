"""Building prefixes in a KVSpace directly (no server)."""

from __future__ import annotations

import json

import numpy as np

from pion.kvcache.layer import LayerSpec
from pion.kvcache.space import KVSpace, sides


def tokens_blob(tokens) -> bytes:
    return np.asarray(tokens, dtype="<u4").tobytes()


def register(space: KVSpace, ns: bytes, dim: int = 32, fmt: str = "fp16", **options) -> bool:
    return space.register(ns, LayerSpec(dim, fmt), options)


def fill(space: KVSpace, ns: bytes, tokens: int, layers: int = 2, dim: int = 32, start: int = 0, seq: int = 0) -> None:
    """Store rows [start, tokens) of every layer of both sides."""
    for sid in sides(ns):
        session = space.vstore.get(sid)
        for layer in range(layers):
            codec = session.spec(layer).codec()
            data = codec.encode(np.full((tokens - start, dim), layer + 1, np.float32))
            space.vstore.store(session, layer, start, tokens - start, data, seq)


def manifest(**fields) -> bytes:
    base = {"model": "m", "n_layers": 2, "n_kv_heads": 2, "head_dim": 16, "token_count": 8}
    base.update(fields)
    return json.dumps(base).encode()
