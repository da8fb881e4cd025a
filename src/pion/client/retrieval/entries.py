"""Chunk entries: their namespaces, the manifest stored with each one, and the local manifest file.

A chunk's K/V is only right for one model (fingerprint: config, weights, dtype, tokenizer),
one codec schema, its exact tokens and, for a *pack*, the stub it was encoded after (its
tokens attended to that stub, at the positions after it). All four go into the namespace
(so another model or stub simply misses) and into the manifest stored beside the rows, which
the reader checks before loading anything (so a collision or a reused id is a miss, counted,
never loaded: fail closed, as the prompt cache does). The manifest also carries the chunk's
token ids, which another process needs to repair a composed prompt.

The local manifest file (``manifest_path``) remembers ``chunk_id -> entry`` across restarts;
it is written atomically (temp file, fsync, rename) and refuses, at load, a file written for
another model or codec schema rather than mixing entries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pion.client.manifest import FORMAT, build_manifest, mismatch, tokens_sha256

CHUNK_FORMAT = "pion-chunk-v1"
FILE_FORMAT = "pion-chunk-manifest-v1"
#: the entry kinds: a chunk encoded alone from position 0, a pack encoded after the stub, the stub
KINDS = ("chunk", "pack", "stub")


@dataclass
class ChunkEntry:
    """What the cache knows about one stored chunk (one line of the local manifest)."""

    chunk_id: str
    namespace: str
    tokens: int
    backend: str
    kind: str = "chunk"
    #: position of the chunk's first token when it was encoded (the stub's length for a pack)
    encoded_at: int = 0
    #: sha256 of the stub's tokens the chunk was encoded after ("" when none)
    stub_sha256: str = ""
    tokens_sha256: str = ""

    def describe(self) -> dict:
        return asdict(self)


def digest_tokens(token_ids) -> str:
    return tokens_sha256([int(t) for t in token_ids]) if len(token_ids) else ""


def chunk_namespace(fp_hash: str, schema_tag: str, chunk_id: str, stub_sha256: str = "", prefix: str = "") -> str:
    """``chunk_`` + 24 hex chars (the reference's shape), over everything that makes the K/V right."""
    text = "|".join(("chunk", fp_hash, schema_tag, stub_sha256, chunk_id))
    return f"{prefix}chunk_{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def stub_namespace(fp_hash: str, schema_tag: str, stub_sha256: str, prefix: str = "") -> str:
    text = "|".join(("stub", fp_hash, schema_tag, stub_sha256))
    return f"{prefix}chunk_{hashlib.sha256(text.encode()).hexdigest()[:24]}"


# -- the manifest stored with the rows --------------------------------------------------------


def chunk_manifest(*, fingerprint: dict, fp_hash: str, layout: dict, codecs: dict, token_ids: list[int],
                   block_size: int, entry: ChunkEntry) -> dict:
    """The prompt-cache manifest fields (which the server reads) plus the chunk's own."""
    manifest = build_manifest(fingerprint=fingerprint, fp_hash=fp_hash, layout=layout, codecs=codecs,
                              token_ids=token_ids, block_size=block_size)
    manifest["format"] = CHUNK_FORMAT
    manifest["chunk"] = {
        "id": entry.chunk_id, "kind": entry.kind, "encoded_at": entry.encoded_at, "stub_sha256": entry.stub_sha256,
        "token_ids": base64.b64encode(np.asarray(token_ids, dtype="<u4").tobytes()).decode(),
    }
    return manifest


def chunk_mismatch(manifest: dict | None, *, fp_hash: str, layout: dict, codecs: dict, chunk_id: str, kind: str,
                   stub_sha256: str, token_ids: list[int] | None = None) -> str | None:
    """Why this stored manifest must not be loaded for this chunk; None when it may."""
    if not isinstance(manifest, dict):
        return "no manifest"
    if manifest.get("format") != CHUNK_FORMAT:
        return f"not a chunk manifest ({manifest.get('format')!r})"
    # the prompt cache's own checks (model fingerprint, layout, codecs, token count)
    why = mismatch({**manifest, "format": FORMAT}, fp_hash=fp_hash, layout=layout, codecs=codecs, token_ids=None)
    if why is not None:
        return why
    chunk = manifest.get("chunk")
    if not isinstance(chunk, dict) or chunk.get("id") != chunk_id:
        return "another chunk id"
    if chunk.get("kind") != kind:
        return f"stored as a {chunk.get('kind')!r}, wanted a {kind!r}"
    if chunk.get("stub_sha256") != stub_sha256:
        return "encoded after another stub"
    stored = manifest_tokens(manifest)
    if stored is None or manifest.get("tokens_sha256") != digest_tokens(stored):
        return "token ids missing or inconsistent"
    if token_ids is not None and stored != [int(t) for t in token_ids]:
        return "other tokens"
    return None


def manifest_tokens(manifest: dict) -> list[int] | None:
    try:
        raw = base64.b64decode(manifest["chunk"]["token_ids"], validate=True)
    except (KeyError, TypeError, ValueError):
        return None
    if len(raw) % 4 or len(raw) // 4 != manifest.get("token_count"):
        return None
    return np.frombuffer(raw, dtype="<u4").astype(np.int64).tolist()


def entry_from_manifest(manifest: dict, namespace: str, backend: str) -> ChunkEntry:
    chunk = manifest["chunk"]
    return ChunkEntry(chunk["id"], namespace, int(manifest["token_count"]), backend, chunk["kind"],
                      int(chunk["encoded_at"]), chunk["stub_sha256"], manifest["tokens_sha256"])


# -- the local manifest file ----------------------------------------------------------------


class ManifestFile:
    """``chunk_id -> ChunkEntry`` kept in a JSON file, for one model and codec schema."""

    def __init__(self, path: str | os.PathLike | None, *, fp_hash: str, schema_tag: str) -> None:
        self.path = Path(path) if path is not None else None
        self.fp_hash, self.schema_tag = fp_hash, schema_tag
        self.entries: dict[str, ChunkEntry] = {}
        if self.path is not None and self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"chunk manifest {self.path} cannot be read ({exc}); move it away or pass another path") from None
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise ValueError(f"{self.path} is not a Pion chunk manifest (format {data.get('format') if isinstance(data, dict) else None!r})")
        if data.get("model") != self.fp_hash or data.get("codecs") != self.schema_tag:
            raise ValueError(
                f"chunk manifest {self.path} was written for another model or codec schema; "
                "its chunks cannot be used with this one (pass another manifest_path)"
            )
        fields = set(ChunkEntry.__dataclass_fields__)
        for chunk_id, raw in (data.get("chunks") or {}).items():
            if isinstance(raw, dict) and fields >= set(raw) and raw.get("chunk_id") == chunk_id and raw.get("kind") in KINDS:
                self.entries[chunk_id] = ChunkEntry(**raw)

    def save(self) -> None:
        if self.path is None:
            return
        data = {"format": FILE_FORMAT, "model": self.fp_hash, "codecs": self.schema_tag,
                "chunks": {cid: e.describe() for cid, e in sorted(self.entries.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def put(self, entry: ChunkEntry) -> None:
        self.entries[entry.chunk_id] = entry
        self.save()

    def pop(self, chunk_id: str) -> ChunkEntry | None:
        entry = self.entries.pop(chunk_id, None)
        if entry is not None:
            self.save()
        return entry
