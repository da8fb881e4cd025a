"""``HybridRetrievalCache``: retrieved chunks' K/V kept by chunk id and composed into a prompt.

RAG prompts are ``stub + chunk_1 + ... + chunk_k + question``; the chunks come from a corpus
and recur across requests in any order. Prefilling them costs most of the time to first
token. This cache encodes each chunk once (``ingest_pack``: after the shared instruction stub,
whose K/V is kept too) and, per request, composes the stub and the retrieved chunks into one
runtime cache (``prepare_multi``): each chunk's K exactly re-rotated from where it was encoded
to where it now sits (``rope.RopeSpec``), V as stored, then optionally repaired
(``repair.Repair``: EPIC's first-k tokens, CacheBlend's deviating tokens) so chunks see each
other. The question runs on top, with the runtime's own ``generate``/``forward``.

Backends: ``"inproc"`` keeps the K/V in this process; ``"pion"`` stores it in a Pion server
(shared by every process and machine using that server, surviving restarts). Runtimes:
transformers and mlx-lm, through the prompt cache's adapters.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

import numpy as np

from pion.client.adapters import adapter_for
from pion.client.client import DEFAULT_URL
from pion.client.errors import PionError
from pion.client.namespace import fingerprint_hash, tokenizer_hash
from pion.client.retrieval.compose import Composer
from pion.client.retrieval.entries import (
    ChunkEntry,
    ManifestFile,
    chunk_manifest,
    chunk_mismatch,
    chunk_namespace,
    digest_tokens,
    entry_from_manifest,
    manifest_tokens,
    stub_namespace,
)
from pion.client.retrieval.stores import InprocStore, PionStore
from pion.client.rows import make_schema

BACKENDS = ("inproc", "pion")


class HybridRetrievalCache:
    """A chunk K/V cache for one model (see the module doc).

    Args:
        model: a transformers ``PreTrainedModel`` or an mlx-lm model.
        backend: ``"inproc"`` or ``"pion"``.
        url: the Pion server (``pion`` backend).
        vquant: codec of the stored K/V on the ``pion`` backend (``"auto"``: the model's dtype,
            exact; or a K/V codec such as ``fp16``, ``int8``, ``turbo4``). ``inproc`` keeps the
            runtime's own K/V and accepts only ``"auto"``.
        manifest_path: a JSON file remembering ``chunk_id -> entry`` across restarts.
        tokenizer: the tokenizer (or a hash string): part of the model fingerprint.
        model_id: the model's name, when the runtime does not carry one.
        namespace_prefix: put before every namespace (a tenant's required key prefix).
        client: an existing ``PionClient`` for the ``pion`` backend.
        local_lane: on the server's host, map its ``V.EXPORT`` files instead of receiving the rows
            (``"auto"``: when the URL is loopback or a unix socket; ``True``/``False`` to force).
    """

    def __init__(self, model, backend: str = "inproc", url: str = DEFAULT_URL, vquant: str = "auto",
                 manifest_path=None, *, tokenizer=None, model_id: str | None = None, namespace_prefix: str = "",
                 client=None, local_lane: bool | str = "auto") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        self.backend = backend
        if backend == "pion":
            from pion.client.prompt_cache import PionPromptCache

            self.prompt_cache = PionPromptCache(model, url=url, vquant=vquant, tokenizer=tokenizer, model_id=model_id,
                                                client=client, local_lane=False)
            self.adapter = self.prompt_cache.adapter
            self.fingerprint, self.fp_hash = self.prompt_cache.fingerprint, self.prompt_cache.fp_hash
            self.schema, self.layout = self.prompt_cache.schema, self.prompt_cache.layout
            self.block_size = self.prompt_cache.block_size
            self.store: InprocStore | PionStore = PionStore(self.prompt_cache, local_lane)
        else:
            if vquant.lower() != "auto":
                raise ValueError("the inproc backend keeps the runtime's own K/V: vquant must be 'auto' "
                                 "(codecs apply to the pion backend)")
            self.prompt_cache = None
            self.adapter = adapter_for(model, **({"model_id": model_id} if model_id else {}))
            layout = self.adapter.layout
            self.fingerprint = {**self.adapter.fingerprint(), "tokenizer": tokenizer_hash(tokenizer), "adapter": ""}
            self.fp_hash = fingerprint_hash(self.fingerprint)
            self.schema = make_schema(len(layout.attn), layout.dtype, "auto")
            self.layout = layout.describe()
            self.block_size = 16
            self.store = InprocStore()
        if self.layout["state"]:
            raise NotImplementedError(
                "chunk caches need an attention-only model: recurrent-state layers (Mamba, GatedDeltaNet, short "
                "conv) carry everything before a chunk and cannot be composed; PionPromptCache stores their prefixes"
            )
        self.schema_tag = "k=" + ",".join(self.schema["k"]) + ";v=" + ",".join(self.schema["v"])
        self.namespace_prefix = namespace_prefix
        self.manifest = ManifestFile(manifest_path, fp_hash=self.fp_hash, schema_tag=self.schema_tag)
        self.composer = Composer(self.adapter)
        self._counts: Counter[str] = Counter()
        self._ms = Counter()
        self._stub_ids: list[int] = []
        self._stub_sha = ""
        self._stub_kv: tuple[np.ndarray, np.ndarray] | None = None
        #: what the last prepare/prepare_multi did (chunks, positions, rotation, repair, times)
        self.last_prepare: dict = {}
        #: why the last stored manifest was refused (for logs and tests)
        self.last_mismatch = ""
        self._miss: str | None = None  # why the last fetch missed (None: nothing stored: evicted)

    # -- namespaces ----------------------------------------------------------------------

    def chunk_namespace(self, chunk_id: str, stub_sha256: str = "") -> str:
        """The namespace of ``chunk_id`` for this model and codecs (a pack: after the stub ``stub_sha256``)."""
        return chunk_namespace(self.fp_hash, self.schema_tag, str(chunk_id), stub_sha256, self.namespace_prefix)

    # -- single chunks -------------------------------------------------------------------

    def ingest(self, chunk_id: str, token_ids) -> dict:
        """Encode ``token_ids`` alone (positions 0...) and keep them as ``chunk_id``; an entry dict.

        Idempotent for the same tokens (another process's store counts: nothing is recomputed);
        other tokens under the same id replace the old chunk.
        """
        ids = _ids(token_ids)
        return self._ingest(str(chunk_id), ids, "chunk", stub_sha="", encoded_at=0).describe()

    def has(self, chunk_id: str) -> bool:
        """Is ``chunk_id`` stored (as a chunk, or as a pack of the current stub) and loadable here?

        Asks the backend (one ``KV.PREFIX.MANIFEST`` on ``pion``) and checks the manifest; the rows
        can still be evicted before a later ``prepare``, which then raises KeyError."""
        entry = self._entry(str(chunk_id))
        if entry is None:
            return False
        try:
            stored = self.store.manifest(entry.namespace)
        except PionError:
            self._counts["errors"] += 1
            return False
        why = "not stored" if stored is None else chunk_mismatch(
            stored, fp_hash=self.fp_hash, layout=self.layout, codecs=self.schema, chunk_id=entry.chunk_id,
            kind=entry.kind, stub_sha256=entry.stub_sha256)
        if why is None and stored.get("tokens_sha256") != entry.tokens_sha256:
            why = "other tokens than this cache's entry (the chunk's text changed)"
        if why is not None and stored is not None:
            self._mismatch(entry.namespace, why)
        return why is None

    def evict(self, chunk_id: str) -> bool:
        """Forget ``chunk_id`` here and in the backend (every form of it this cache can name)."""
        chunk_id = str(chunk_id)
        entry = self.manifest.pop(chunk_id)
        names = {self.chunk_namespace(chunk_id), *([self.chunk_namespace(chunk_id, self._stub_sha)] if self._stub_sha else [])}
        if entry is not None:
            names.add(entry.namespace)
        dropped = [self.store.drop(ns) for ns in names]
        return entry is not None or any(dropped)

    def prepare(self, chunk_id: str, suffix_ids, chunk_token_count: int | None = None):
        """``(cache, suffix_ids)``: a fresh runtime cache holding the chunk (a pack: the stub and
        the chunk), its offset at the end so the suffix continues the positions. KeyError when
        the chunk is unknown or its K/V is gone."""
        entry = self._entry(str(chunk_id))
        if entry is None:
            self._counts["hydrate_miss_count"] += 1
            raise KeyError(f"chunk {chunk_id!r} is not stored")
        if chunk_token_count is not None and chunk_token_count != entry.tokens:
            raise ValueError(f"chunk {chunk_id!r} holds {entry.tokens} tokens, not {chunk_token_count}")
        if entry.kind == "pack":
            return self.prepare_multi([chunk_id], suffix_ids)
        started = time.perf_counter()
        _, k, v = self._load(entry)
        cache = self.composer.build([(k, v)])
        self.last_prepare = {"chunks": [entry.chunk_id], "context_tokens": entry.tokens, "rotated_tokens": 0,
                             "compose_ms": round((time.perf_counter() - started) * 1000, 3)}
        return cache, _ids(suffix_ids)

    # -- the stub and packs -------------------------------------------------------------

    def set_shared_stub(self, stub_ids) -> dict:
        """Encode the shared instruction stub once (it carries ``<bos>``; chunks should be
        tokenized without special tokens). Packs are encoded after it and composed behind it."""
        ids = _ids(stub_ids)
        if not ids:
            raise ValueError("stub_ids is empty")
        sha = digest_tokens(ids)
        ns = stub_namespace(self.fp_hash, self.schema_tag, sha, self.namespace_prefix)
        entry = ChunkEntry("<stub>", ns, len(ids), self.backend, "stub", 0, "", sha)
        got = self._fetch_verified(entry, ids)
        if got is None:
            k, v = self.composer.rows(self.adapter.prefill(ids))
            self._counts["ingest_count"] += 1
            self._put(entry, ids, k, v)
        else:
            _, k, v = got
        self._stub_ids, self._stub_sha, self._stub_kv = ids, sha, (k, v)
        return {"stub_tokens": len(ids), "stub_sha256": sha}

    def ingest_pack(self, chunk_id: str, token_ids) -> dict:
        """Encode ``token_ids`` after the shared stub and keep only the chunk's part (RuntimeError without a stub)."""
        if not self._stub_ids:
            raise RuntimeError("ingest_pack needs the shared stub: call set_shared_stub(stub_ids) first")
        ids = _ids(token_ids)
        return self._ingest(str(chunk_id), ids, "pack", stub_sha=self._stub_sha, encoded_at=len(self._stub_ids)).describe()

    def prepare_multi(self, chunk_ids, suffix_ids, max_packs: int = 8, allow_fine_grain: bool = False, repair=None):
        """``(cache, suffix_ids)``: the stub, then each pack with its K re-rotated to where it now
        sits (V as stored), optionally repaired (a ``Repair``). Refuses more than ``max_packs``
        packs unless ``allow_fine_grain``. KeyError for a chunk that is not a stored pack of
        the current stub."""
        from pion.client.retrieval.repair import Repair, run_repair

        chunk_ids = [str(c) for c in chunk_ids]
        if not self._stub_ids:
            raise RuntimeError("prepare_multi needs the shared stub: call set_shared_stub(stub_ids) first")
        if not chunk_ids:
            raise ValueError("chunk_ids is empty")
        if len(chunk_ids) > max_packs and not allow_fine_grain:
            raise ValueError(f"{len(chunk_ids)} packs requested, max_packs is {max_packs} "
                             "(pass allow_fine_grain=True to compose more)")
        if repair is not None and not isinstance(repair, Repair):
            raise TypeError("repair must be a pion.client.retrieval.Repair or None")
        started = time.perf_counter()
        packs = []
        for chunk_id in chunk_ids:
            entry = self._entry(chunk_id)
            if entry is None or entry.kind != "pack":
                self._counts["hydrate_miss_count"] += 1
                why = "is not stored" if entry is None else "was ingested alone (ingest), not after the stub (ingest_pack)"
                raise KeyError(f"chunk {chunk_id!r} {why}")
            manifest, k, v = self._load(entry)
            packs.append((entry, manifest_tokens(manifest), k, v))
        loaded = time.perf_counter()
        composed = self.composer.compose(self._stub_kv, len(self._stub_ids),
                                         [(e.encoded_at, k, v) for e, _, k, v in packs])
        cache = self.composer.build([composed.kv])
        built = time.perf_counter()
        report = {"chunks": chunk_ids, "context_tokens": composed.total, "segments": composed.segments,
                  "rotated_tokens": composed.rotated, "load_ms": round((loaded - started) * 1000, 3),
                  "rotate_ms": round(composed.rotate_ms, 3), "build_ms": round((built - loaded) * 1000 - composed.rotate_ms, 3)}
        if repair is not None and repair.active:
            ids = np.array(self._stub_ids + [t for _, tokens, _, _ in packs for t in tokens], dtype=np.int64)
            report["repair"] = run_repair(self.composer.runtime, cache, ids, composed.segments, repair)
            self._counts["repaired_tokens"] += report["repair"]["recomputed"]
        report["prepare_ms"] = round((time.perf_counter() - started) * 1000, 3)
        self._counts["compose_count"] += 1
        self._counts["chunks_composed"] += len(chunk_ids)
        self._counts["rotated_tokens"] += composed.rotated
        self.last_prepare = report
        return cache, _ids(suffix_ids)

    # -- stats ---------------------------------------------------------------------------

    def stats(self) -> dict:
        keys = ("ingest_count", "ingest_hits", "hydrate_count", "hydrate_miss_count", "compose_count",
                "chunks_composed", "rotated_tokens", "repaired_tokens", "manifest_mismatches", "errors")
        out = {"backend": self.backend, **{k: self._counts[k] for k in keys},
               "chunks_in_manifest": len(self.manifest.entries),
               "chunks_in_inproc": len(self.store) if isinstance(self.store, InprocStore) else 0,
               **{k: round(v, 3) for k, v in self.store.ms.items()}}
        if isinstance(self.store, PionStore):
            out["bytes_fetched"] = self.store.bytes_fetched
            out["local_hits"] = self.store.local_hits
        out["rope"] = self.composer.runtime.rope.describe() if self.composer.has_rope else None
        return out

    def copy_to(self, other: HybridRetrievalCache, chunk_ids=None) -> int:
        """Copy this cache's stored chunks (default: all it knows) and its stub into ``other``,
        a cache of the same model on another backend (e.g. warm a server from this process),
        without encoding anything again; ``other``'s codecs apply. The number copied."""
        if other.fp_hash != self.fp_hash:
            raise ValueError("copy_to needs a cache of the same model (the fingerprints differ)")
        wanted = list(self.manifest.entries) if chunk_ids is None else [str(c) for c in chunk_ids]
        if self._stub_ids:
            entry = ChunkEntry("<stub>", stub_namespace(self.fp_hash, self.schema_tag, self._stub_sha,
                                                        self.namespace_prefix), len(self._stub_ids), self.backend,
                               "stub", 0, "", self._stub_sha)
            target = stub_namespace(other.fp_hash, other.schema_tag, self._stub_sha, other.namespace_prefix)
            other._put(replace(entry, namespace=target, backend=other.backend), self._stub_ids, *self._stub_kv)
        copied = 0
        for chunk_id in wanted:
            entry = self._entry(chunk_id)
            if entry is None:
                raise KeyError(f"chunk {chunk_id!r} is not stored")
            manifest, k, v = self._load(entry)
            moved = replace(entry, namespace=other.chunk_namespace(chunk_id, entry.stub_sha256), backend=other.backend)
            other._put(moved, manifest_tokens(manifest), k, v)
            other.manifest.put(moved)
            copied += 1
        return copied

    def close(self) -> None:
        if self.prompt_cache is not None:
            self.prompt_cache.close()

    # -- internals -----------------------------------------------------------------------

    def _ingest(self, chunk_id: str, ids: list[int], kind: str, *, stub_sha: str, encoded_at: int) -> ChunkEntry:
        if not ids:
            raise ValueError("token_ids is empty")
        ns = self.chunk_namespace(chunk_id, stub_sha)
        entry = ChunkEntry(chunk_id, ns, len(ids), self.backend, kind, encoded_at, stub_sha, digest_tokens(ids))
        stored = self.store.manifest(ns)
        if stored is not None:
            if chunk_mismatch(stored, fp_hash=self.fp_hash, layout=self.layout, codecs=self.schema, chunk_id=chunk_id,
                              kind=kind, stub_sha256=stub_sha, token_ids=ids) is None:
                self._counts["ingest_hits"] += 1
                self.manifest.put(entry)
                return entry
        k, v = self._encode(ids, kind)
        self._counts["ingest_count"] += 1
        self._put(entry, ids, k, v, replace=stored is not None)  # other tokens (or a stale store): replaced whole
        self.manifest.put(entry)
        return entry

    def _encode(self, ids: list[int], kind: str) -> tuple[np.ndarray, np.ndarray]:
        """Stacked K/V rows of ``ids``: alone from position 0, or (a pack) after the stub, sliced."""
        if kind != "pack":
            return self.composer.rows(self.adapter.prefill(ids))
        cache = self.composer.build([self._stub_kv])
        self.adapter.forward(ids, cache)
        k, v = self.composer.rows(cache)
        return k[:, len(self._stub_ids):], v[:, len(self._stub_ids):]

    def _put(self, entry: ChunkEntry, ids: list[int], k: np.ndarray, v: np.ndarray, replace: bool = False) -> None:
        manifest = chunk_manifest(fingerprint=self.fingerprint, fp_hash=self.fp_hash, layout=self.layout,
                                  codecs=self.schema, token_ids=ids, block_size=self.block_size, entry=entry)
        try:
            self.store.put(entry.namespace, manifest, np.ascontiguousarray(k), np.ascontiguousarray(v), replace=replace)
        except PionError:
            self._counts["errors"] += 1
            raise

    def _entry(self, chunk_id: str) -> ChunkEntry | None:
        """The entry for ``chunk_id`` usable now: known here, or found stored (a pack of the current
        stub first, then a lone chunk) and verified."""
        entry = self.manifest.entries.get(chunk_id)
        if entry is not None and (entry.kind == "chunk" or entry.stub_sha256 == self._stub_sha):
            return entry
        candidates = ([("pack", self._stub_sha)] if self._stub_sha else []) + [("chunk", "")]
        for kind, stub in candidates:
            ns = self.chunk_namespace(chunk_id, stub)
            try:
                stored = self.store.manifest(ns)
            except PionError:
                self._counts["errors"] += 1
                return None
            if stored is None:
                continue
            why = chunk_mismatch(stored, fp_hash=self.fp_hash, layout=self.layout, codecs=self.schema,
                                 chunk_id=chunk_id, kind=kind, stub_sha256=stub)
            if why is not None:
                self._mismatch(ns, why)
                continue
            entry = entry_from_manifest(stored, ns, self.backend)
            self.manifest.put(entry)
            return entry
        return None

    def _load(self, entry: ChunkEntry) -> tuple[dict, np.ndarray, np.ndarray]:
        """Manifest and stacked K/V rows of ``entry``; KeyError when the backend lost them."""
        got = self._fetch_verified(entry, None)
        if got is None:
            self._counts["hydrate_miss_count"] += 1
            if self._miss is None:
                raise KeyError(f"chunk {entry.chunk_id!r}: its K/V is no longer stored (evicted)")
            raise KeyError(f"chunk {entry.chunk_id!r}: its K/V is no longer stored as ingested, refused: "
                           f"{self._miss}")
        self._counts["hydrate_count"] += 1
        return got

    def _fetch_verified(self, entry: ChunkEntry, ids: list[int] | None):
        """The verified rows of ``entry``, or None; ``self._miss`` then says why (None: evicted)."""
        self._miss = None
        try:
            got = self.store.get(entry.namespace, entry.tokens)
        except PionError:
            self._counts["errors"] += 1
            return None
        if got is None:
            # a miss by size: rows stored under this name for another token count (the chunk was
            # ingested again from changed text) are a mismatch, not an eviction
            self._miss = self._stored_mismatch(entry, ids)
            return None
        manifest, k, v = got
        why = self._entry_mismatch(manifest, entry, ids)
        if why is not None:
            self._mismatch(entry.namespace, why)
            self._miss = f"{entry.namespace}: {why}"
            return None
        return manifest, k, v

    def _entry_mismatch(self, manifest: dict, entry: ChunkEntry, ids: list[int] | None) -> str | None:
        why = chunk_mismatch(manifest, fp_hash=self.fp_hash, layout=self.layout, codecs=self.schema,
                             chunk_id=entry.chunk_id, kind=entry.kind, stub_sha256=entry.stub_sha256, token_ids=ids)
        if why is None and manifest.get("tokens_sha256") != entry.tokens_sha256:
            why = "other tokens than this cache's entry (the chunk's text changed)"
        return why

    def _stored_mismatch(self, entry: ChunkEntry, ids: list[int] | None) -> str | None:
        """After a miss: is something else stored under the entry's name? (the reason, counted)"""
        try:
            manifest = self.store.manifest(entry.namespace)
        except PionError:
            self._counts["errors"] += 1
            return None
        if manifest is None:
            return None
        why = self._entry_mismatch(manifest, entry, ids)
        if why is None and manifest.get("token_count") != entry.tokens:
            why = f"{manifest.get('token_count')} tokens stored, the entry has {entry.tokens}"
        if why is None:
            return None
        self._mismatch(entry.namespace, why)
        return f"{entry.namespace}: {why}"

    def _mismatch(self, ns: str, why: str) -> None:
        self._counts["manifest_mismatches"] += 1
        self.last_mismatch = f"{ns}: {why}"


def _ids(token_ids) -> list[int]:
    return [int(t) for t in token_ids]
