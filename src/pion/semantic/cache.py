"""The semantic cache (AI.SEMANTIC_CACHE): LLM answers found again by the meaning of the prompt.

**The threshold rule, stated once:** a lookup hits when the cosine similarity between the
embedded query and the embedded prompt of the nearest entry (among those carrying every
``FILTER`` tag) is at least the threshold: ``hit <=> similarity >= threshold``, similarity in
-1..1 (1 = same direction), **and** the verifier (``pion.semantic.verify``, ``VERIFY off|lexical|model``)
accepts it: the nearest entries above the threshold are tried in order, the first verified one is
the hit. Every path uses ``is_hit`` on the similarity the server computed:
AI.SEMANTIC_CACHE GET, EXPLAIN, the client's sync and async methods and the MCP tool all pass the
threshold through unchanged, so none of them can read it on another scale (the anchors' users
found sync and async paths disagreeing: redis-vl-python#407, langchain-redis#98).

Entries are hashes ``__pion:sc:<sha256 of prompt and tags>`` (one entry per prompt and tag set:
SET again replaces it) with ``prompt``, ``response``, ``tags``, ``created``, ``workspace`` and the
vector ``v``, indexed by the hidden FLAT index ``__pion:semcache`` (exact scan: a cache never
misses an entry an approximate graph would skip). A TTL is the key's own expiry.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.semantic.owned import OwnedIndex, allowed_docs, field_text, nearest, vector_blob

INDEX_NAME = "__pion:semcache"
PREFIX = b"__pion:sc:"


def create_argv(dim: int) -> list[bytes]:
    return [b"FT.CREATE", INDEX_NAME.encode(), b"ON", b"HASH", b"PREFIX", b"1", PREFIX, b"SCHEMA",
            b"prompt", b"TEXT", b"tags", b"TAG", b"SEPARATOR", b",", b"CASESENSITIVE",
            b"created", b"NUMERIC", b"v", b"VECTOR", b"FLAT", b"6", b"TYPE", b"FLOAT32", b"DIM", str(dim).encode(),
            b"DISTANCE_METRIC", b"COSINE"]


OWNED = OwnedIndex(INDEX_NAME, PREFIX, b"__pion:semcache", create_argv, "the semantic cache")


def is_hit(similarity: float, threshold: float) -> bool:
    """The threshold rule (module docstring): a hit when similarity >= threshold."""
    return similarity >= threshold


def entry_key(prompt: str, tags: list[str]) -> bytes:
    digest = hashlib.sha256(prompt.encode() + b"\0" + ",".join(sorted(tags)).encode()).hexdigest()[:32]
    return PREFIX + digest.encode()


def parse_tags(raw: bytes) -> list[str]:
    """``a,b,c`` -> tags (commas separate, blanks are dropped); ValueError for a tag with control bytes."""
    tags = [t.strip() for t in bytes(raw).decode("utf-8", "replace").split(",")]
    return sorted({t for t in tags if t})


@dataclass
class CacheEntry:
    key: bytes
    prompt: str
    response: bytes
    similarity: float
    workspace: bytes | None = None
    tags: list[str] = field(default_factory=list)


def set_writes(key: bytes, prompt: str, response: bytes, vector: np.ndarray, tags: list[str],
               workspace: bytes | None, ttl_ms: int, now_ms: int | None = None) -> list[list[bytes]]:
    """The commands that store an entry: replace the hash whole, then its expiry (absolute, as logged)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    fields = [b"prompt", prompt.encode(), b"response", bytes(response), b"created", str(now).encode(),
              b"v", vector_blob(vector)]
    if tags:
        fields += [b"tags", ",".join(tags).encode()]
    if workspace is not None:
        fields += [b"workspace", bytes(workspace)]
    writes = [[b"DEL", key], [b"HSET", key, *fields]]
    if ttl_ms:
        writes.append([b"PEXPIREAT", key, str(now + ttl_ms).encode()])
    return writes


#: how many of the nearest entries the verifier may look at (the first it accepts is the hit)
CANDIDATES = 8


def candidates(index: Any, query: np.ndarray, tags: list[str], values: Any, k: int = CANDIDATES) -> list[CacheEntry]:
    """The ``k`` nearest entries carrying every tag in ``tags``, most similar first (empty: the cache
    has none); the caller decides hit or miss with ``is_hit`` and the verifier."""
    allowed = allowed_docs(index, [("tags", tags, True)]) if tags else None
    out = []
    for doc_id, sim in nearest(index, query, k, allowed):
        key = index.docs[doc_id]
        fields = getattr(values(key), "fields", None)
        if fields is None:
            continue
        workspace = fields.get(b"workspace")
        out.append(CacheEntry(key=key, prompt=field_text(fields, b"prompt"),
                              response=bytes(fields.get(b"response", b"")), similarity=sim,
                              workspace=None if workspace is None else bytes(workspace),
                              tags=[t for t in field_text(fields, b"tags").split(",") if t]))
    return out


def lookup(index: Any, query: np.ndarray, tags: list[str], values: Any) -> CacheEntry | None:
    """The nearest entry carrying every tag in ``tags`` (None: the cache has none)."""
    found = candidates(index, query, tags, values, 1)
    return found[0] if found else None


def keys_with_prompt(index: Any, prompt: str, values: Any) -> list[bytes]:
    """Every entry whose stored prompt is exactly ``prompt`` (any tags): what DEL removes."""
    out = []
    for key in index.docs.values():
        fields = getattr(values(key), "fields", None)
        if fields is not None and field_text(fields, b"prompt") == prompt:
            out.append(key)
    return out
