"""Where chunk K/V lives: in this process (``InprocStore``) or in a Pion server (``PionStore``).

Both keep, per namespace, the chunk manifest and the K and V rows of every attention layer,
stacked as ``(layers, tokens, width)`` arrays in the model's dtype (or the codec's, decoded).
The Pion store writes with the prompt cache's one-pipeline store (``transfer.store``:
``KV.PREFIX.REGISTER ... MANIFEST`` then ``V.STOREBATCH`` per layer and side) and reads with
its one-round-trip fetch (``KV.PREFIX.LOOKUP``, ``KV.PREFIX.MANIFEST``, ``V.FETCH``; on the
server's own host ``V.EXPORT`` instead, whose file is mapped: the prompt cache's local lane), so the
server needs nothing new and every guarantee of a prefix (a HIT only when every row is stored
and durable; a changed manifest refused) holds for chunks. All server writes go through
``PionStore.put``: the one place to follow when the store protocol changes.
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np

from pion.client import transfer
from pion.client.blocks import chain_seed
from pion.client.errors import PionError
from pion.client.local_lane import EXPORT_DTYPE, can_export, export_args, is_local, open_export
from pion.client.manifest import encode_manifest, parse_manifest


class InprocStore:
    """Chunks kept as numpy arrays in this process (gone when it exits)."""

    backend = "inproc"

    def __init__(self) -> None:
        self._items: dict[str, tuple[dict, np.ndarray, np.ndarray]] = {}
        self.ms = {"fetch_ms_total": 0.0, "store_ms_total": 0.0}

    def put(self, ns: str, manifest: dict, k: np.ndarray, v: np.ndarray, replace: bool = False) -> None:
        self._items[ns] = (manifest, k, v)

    def manifest(self, ns: str) -> dict | None:
        item = self._items.get(ns)
        return item[0] if item is not None else None

    def get(self, ns: str, n_tokens: int) -> tuple[dict, np.ndarray, np.ndarray] | None:
        item = self._items.get(ns)
        if item is None or item[1].shape[1] != n_tokens:
            return None
        return item

    def drop(self, ns: str) -> bool:
        return self._items.pop(ns, None) is not None

    def __len__(self) -> int:
        return len(self._items)


class PionStore:
    """Chunks stored as registered prefixes in a Pion server, through a ``PionPromptCache``'s
    client, adapter and codec schema (so codecs, fingerprints and transfers are the prompt cache's)."""

    backend = "pion"

    def __init__(self, prompt_cache, local_lane: bool | str = "auto") -> None:
        self.pc = prompt_cache
        self.ms = {"fetch_ms_total": 0.0, "store_ms_total": 0.0}
        self.bytes_fetched = 0
        layout = prompt_cache.adapter.layout
        wanted = is_local(prompt_cache.client.url) if local_lane == "auto" else bool(local_lane)
        #: map the server's V.EXPORT file instead of receiving rows (same host); off for good on failure
        self.local_lane = wanted and can_export(layout)
        self.local_hits = 0

    def put(self, ns: str, manifest: dict, k: np.ndarray, v: np.ndarray, replace: bool = False) -> None:
        """Register ``ns`` with ``manifest`` and store its rows, all or nothing (raises the server's
        error). ``replace``: the new chunk takes the place of the one stored there in one step
        (``PUBLISH`` refuses to overwrite otherwise; an identical concurrent store is accepted)."""
        started = time.perf_counter()
        try:
            token_ids = _tokens(manifest)
            raw = encode_manifest(manifest)
            kv = [(k[layer], v[layer]) for layer in range(k.shape[0])]
            seed = chain_seed(f"{self.pc.fp_hash}|{self.pc.schema_tag}|{ns}")
            layout = self.pc.adapter.layout
            after = [export_args(*transfer.sides(ns), len(token_ids), layout)] if self.local_lane else []
            replies = transfer.store(self.pc.client, ns, token_ids, kv, {}, self.pc.schema, raw, self.pc.block_size,
                                     None, after=after, seed=seed, replace=replace)  # the export file is written ahead of the first load
            if replies and isinstance(replies[0], PionError):
                self.local_lane = False
                warnings.warn(f"chunk cache: local lane off, the server refused V.EXPORT ({replies[0]})",
                              RuntimeWarning, stacklevel=3)
        finally:
            self.ms["store_ms_total"] += (time.perf_counter() - started) * 1000

    def manifest(self, ns: str) -> dict | None:
        return parse_manifest(self.pc.client.kv_manifest(ns))

    def get(self, ns: str, n_tokens: int) -> tuple[dict, np.ndarray, np.ndarray] | None:
        """Manifest and stacked rows of ``ns``, or None on a miss (not stored, evicted, incomplete)."""
        started = time.perf_counter()
        try:
            layout = self.pc.adapter.layout
            if self.local_lane:
                found = self._get_local(ns, n_tokens, layout)
                if found is not False:
                    return found
            got = transfer.fetch(self.pc.client, ns, n_tokens, layout)
            if got is None:
                return None
            manifest = parse_manifest(got.manifest)
            if manifest is None or manifest.get("token_count") != n_tokens:
                return None
            kv = transfer.decode(got, n_tokens, self.pc.schema, layout)
            self.bytes_fetched += got.nbytes
            return manifest, np.stack([k for k, _ in kv]), np.stack([v for _, v in kv])
        finally:
            self.ms["fetch_ms_total"] += (time.perf_counter() - started) * 1000

    def _get_local(self, ns: str, n_tokens: int, layout):
        """The local lane's answer: rows from the mapped export, None on a miss, False to use the socket."""
        pk, pv = transfer.sides(ns)
        got = transfer.fetch_export(self.pc.client, ns, n_tokens, layout, export_args(pk, pv, n_tokens, layout))
        if got is None:
            return None
        manifest = parse_manifest(got.manifest)
        if manifest is None or manifest.get("token_count") != n_tokens:
            return None
        heads, dim, _ = layout.heads[0]
        try:
            if isinstance(got.path, PionError):
                raise OSError(f"the server refused V.EXPORT ({got.path})")
            kv = open_export(got.path, len(layout.attn), (1, heads, n_tokens, dim), EXPORT_DTYPE[layout.dtype])
        except (OSError, ValueError) as exc:
            self.local_lane = False
            warnings.warn(f"chunk cache: local lane off, chunks come through the socket: {exc}", RuntimeWarning,
                          stacklevel=4)
            return False
        self.local_hits += 1
        k = np.stack([a[0].transpose(1, 0, 2).reshape(n_tokens, heads * dim) for a, _ in kv])
        v = np.stack([b[0].transpose(1, 0, 2).reshape(n_tokens, heads * dim) for _, b in kv])
        self.bytes_fetched += k.nbytes + v.nbytes
        return manifest, k, v

    def drop(self, ns: str) -> bool:
        try:
            return self.pc.client.kv_drop(ns) > 0
        except PionError:
            return False


def _tokens(manifest: dict) -> list[int]:
    from pion.client.retrieval.entries import manifest_tokens

    tokens = manifest_tokens(manifest)
    if tokens is None:
        raise ValueError(f"chunk manifest without token ids: {json.dumps(manifest)[:200]}")
    return tokens
