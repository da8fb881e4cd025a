"""``PionLlamaCache``: llama-cpp-python's prompt cache, kept in Pion instead of RAM or a local disk.

A drop-in for ``LlamaRAMCache`` / ``LlamaDiskCache``::

    llm = Llama("model.gguf", n_ctx=4096)
    llm.set_cache(PionLlamaCache(llm, url="pion://127.0.0.1:1974"))

``Llama.create_completion`` asks ``cache[prompt_tokens]`` for the stored state sharing the
longest head with the prompt, loads it, and evaluates only the rest; after the completion it
stores ``cache[prompt + completion] = llm.save_state()``. Here each state is one Pion prefix:
the state blob (``SSM.PREFIX.STORE``), a manifest and a block chain over the key's tokens
(``KV.PREFIX.REGISTER ... CHAIN ... MANIFEST``), all in one round trip. So the states are
shared by every process and machine using the server, and survive restarts and ``kill -9``.

Lookup: the exact key first (one round trip), then the longest stored block-aligned head
(``KV.PREFIX.MATCH``, ``block_size`` tokens per block, default 16; the RAM cache matches at
single-token granularity, so a stored state sharing fewer than ``block_size`` tokens with the
prompt is not offered here, and ``block_size=1`` gives exactly the RAM cache's matching).
llama-cpp-python then finds the exact common prefix itself and re-evaluates the rest. Every hit is checked against the manifest, fail closed: a state made by
another GGUF, another llama-cpp-python or other context settings (``LlamaCppAdapter.fingerprint``)
is a miss, counted in ``manifest_mismatches``, never loaded.

``capacity_bytes``: the server's own memory limits and eviction govern what it keeps. Given a
number, this cache also drops the oldest states *it* stored once they add up to more (it does
not know what other processes stored). ``stats()`` has ``PionPromptCache.stats()``'s keys.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter, OrderedDict
from collections.abc import Sequence

import numpy as np

from pion.client import transfer
from pion.client.adapters.layout import require
from pion.client.adapters.llama_cpp import LAYOUT, SCHEMA, LlamaCppAdapter, token_rows
from pion.client.blocks import block_hashes, chain_seed, hash_blob, token_blob
from pion.client.client import DEFAULT_URL, PionClient
from pion.client.errors import PionConnectionError, PionError
from pion.client.manifest import build_manifest, encode_manifest, mismatch, parse_manifest
from pion.client.namespace import fingerprint_hash, prefix_namespace

_llama_cache = require("llama_cpp.llama_cache", "llama")
STAT_KEYS = ("hits", "misses", "partial_hits", "local_hits", "admission_skips", "manifest_mismatches", "errors")
SCHEMA_TAG = "llama-state-v1"
DEFAULT_LLAMA_BLOCK = 16


class PionLlamaCache(_llama_cache.BaseLlamaCache):
    """``Llama.set_cache`` target whose states live in a Pion server (see the module docstring).

    Args:
        llama: the ``llama_cpp.Llama`` this cache serves (its GGUF and context settings are
            the fingerprint every stored state is checked against).
        url: the server (``pion://host:1974``, ``pions://``, ``unix://``).
        capacity_bytes: None (default) leaves retention to the server; a number also makes
            this cache drop its own oldest states beyond that many bytes.
        block_size: tokens per block of the chain that partial matches use.
        model_id: the name stored in the fingerprint (default: the GGUF's ``general.name``).
        client: an existing ``PionClient`` (then ``url`` is ignored).
    """

    def __init__(self, llama, url: str = DEFAULT_URL, capacity_bytes: int | None = None, *,
                 block_size: int = DEFAULT_LLAMA_BLOCK, model_id: str | None = None,
                 client: PionClient | None = None) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        if capacity_bytes is not None and capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0 or None")
        super().__init__(capacity_bytes if capacity_bytes is not None else 0)
        self.capacity_bytes = capacity_bytes
        self.adapter = LlamaCppAdapter(llama, model_id=model_id)
        self.client = client or PionClient(url)
        self.block_size = block_size
        self.layout = LAYOUT.describe()
        self.schema = SCHEMA
        self.fingerprint = self.adapter.fingerprint()
        self.fp_hash = fingerprint_hash(self.fingerprint)
        self.chain_seed = chain_seed(f"{self.fp_hash}|{SCHEMA_TAG}")
        self._counts: Counter[str] = Counter()
        self._ms = {"fetch_ms_total": 0.0, "store_ms_total": 0.0, "last_prefill_ms": 0.0}
        self._bytes_fetched = 0
        #: namespaces this cache stored, oldest first, with their sizes (for capacity_bytes)
        self._stored: OrderedDict[str, int] = OrderedDict()
        self.last_mismatch = ""

    # -- the LlamaCache protocol ---------------------------------------------------------

    @property
    def cache_size(self) -> int:
        """Bytes of the states this cache stored (and has not dropped) in this process."""
        return sum(self._stored.values())

    def namespace(self, key: Sequence[int]) -> str:
        return prefix_namespace(self.fp_hash, SCHEMA_TAG, [int(t) for t in key])

    def __getitem__(self, key: Sequence[int]):
        found = self._lookup([int(t) for t in key], load=True)
        if found is None:
            raise KeyError("Key not found")
        return found

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._lookup([int(t) for t in key], load=False) is not None

    def __setitem__(self, key: Sequence[int], value) -> None:
        ids = [int(t) for t in key]
        if not ids:
            return
        ns = self.namespace(ids)
        started = time.perf_counter()
        try:
            blob = self.adapter.pack(value)
            manifest = build_manifest(fingerprint=self.fingerprint, fp_hash=self.fp_hash, layout=self.layout,
                                      codecs=self.schema, token_ids=ids, block_size=self.block_size)
            transfer.store(self.client, ns, ids, token_rows(ids), {LAYOUT.state[0]: blob}, self.schema,
                           encode_manifest(manifest), self.block_size, None, seed=self.chain_seed)
        except PionError as exc:
            self._error("store", exc)
            return
        finally:
            self._ms["store_ms_total"] += (time.perf_counter() - started) * 1000
        self._stored.pop(ns, None)
        self._stored[ns] = len(blob)
        self._trim()

    # -- Pion extras ---------------------------------------------------------------------

    def drop(self, key: Sequence[int]) -> bool:
        """Remove the state stored under exactly ``key``."""
        ns = self.namespace(key)
        self._stored.pop(ns, None)
        self.client.ssm_drop(ns)
        return self.client.kv_drop(ns) > 0

    def stats(self) -> dict:
        lookups = self._counts["hits"] + self._counts["partial_hits"] + self._counts["misses"]
        hits = self._counts["hits"] + self._counts["partial_hits"]
        return {
            **{key: self._counts[key] for key in STAT_KEYS},
            "hit_rate": hits / lookups if lookups else 0.0,
            **{key: round(value, 3) for key, value in self._ms.items()},
            "bytes_fetched": self._bytes_fetched,
            "admission_threshold": 1,
        }

    def close(self) -> None:
        self.client.close()

    # -- internals -----------------------------------------------------------------------

    def _lookup(self, ids: list[int], *, load: bool):
        """The stored state (``load``) or True for the longest stored head of ``ids``; None if none."""
        if not ids:
            return None
        started = time.perf_counter()
        try:
            found = self._fetch(self.namespace(ids), ids, len(ids), exact=True, load=load)
            kind = "hits"
            if found is None:
                match = self._match(ids)
                found = match and self._fetch(match[0], ids, match[1], exact=False, load=load)
                kind = "partial_hits"
        except PionError as exc:
            self._error("fetch", exc)
            found = None
        finally:
            self._ms["fetch_ms_total"] += (time.perf_counter() - started) * 1000
        if load:
            self._counts[kind if found is not None else "misses"] += 1
        return found

    def _fetch(self, ns: str, ids: list[int], n_match: int, *, exact: bool, load: bool):
        if not load:
            raw = self.client.kv_manifest(ns)
            return True if raw is not None and self._verify(ns, raw, ids, n_match, exact) else None
        got = transfer.fetch(self.client, ns, n_match, LAYOUT, partial=not exact)
        if got is None or not self._verify(ns, got.manifest, ids, n_match, exact):
            return None
        try:
            state = self.adapter.unpack(got.states[LAYOUT.state[0]])
            (stored, _), = transfer.decode(got, n_match, self.schema, LAYOUT)
        except (ValueError, KeyError, PionError) as exc:
            return self._reject(ns, f"unreadable state prefix ({exc})")
        head = min(n_match, int(state.n_tokens))
        if stored[:, 0].astype(np.int64).tolist() != ids[:n_match] or state.input_ids[:head].tolist() != ids[:head]:
            return self._reject(ns, "its tokens differ from the prompt's")
        self._bytes_fetched += got.nbytes
        return state

    def _verify(self, ns: str, raw_manifest: bytes, ids: list[int], n_match: int, exact: bool) -> bool:
        why = mismatch(parse_manifest(raw_manifest), fp_hash=self.fp_hash, layout=self.layout, codecs=self.schema,
                       token_ids=ids if exact else None, min_tokens=n_match)
        if why is None:
            return True
        self._reject(ns, why)
        return False

    def _reject(self, ns: str, why: str) -> None:
        self._counts["manifest_mismatches"] += 1
        self.last_mismatch = f"{ns}: {why}"
        return None

    def _match(self, ids: list[int]) -> tuple[str, int] | None:
        hashes = block_hashes(ids, self.block_size, root=self.chain_seed)
        if not hashes:
            return None
        found = self.client.kv_match(self.block_size, hash_blob(hashes), token_blob(ids))
        if found is None:
            return None
        ns, blocks = found
        return ns, min(blocks * self.block_size, len(ids))

    def _trim(self) -> None:
        if self.capacity_bytes is None:
            return
        while self._stored and self.cache_size > self.capacity_bytes:
            ns, _ = self._stored.popitem(last=False)
            try:
                self.client.ssm_drop(ns)
                self.client.kv_drop(ns)
            except PionError as exc:
                self._error("drop", exc)

    def _error(self, what: str, exc: PionError) -> None:
        """Count and warn; a cache that cannot reach its server degrades to plain prefill."""
        self._counts["errors"] += 1
        if not isinstance(exc, PionConnectionError) or self._counts["errors"] == 1:
            warnings.warn(f"Pion llama cache {what} failed: {exc}", RuntimeWarning, stacklevel=3)
