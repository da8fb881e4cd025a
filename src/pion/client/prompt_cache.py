"""``PionPromptCache``: a model's prompt cache that lives in Pion, shared across processes and restarts.

``get_or_prefill(prefix_ids)`` returns what the runtime's own prompt-cache API returns (a
transformers ``DynamicCache``, or mlx-lm's ``make_prompt_cache`` list) with the prefix inside.
On a hit it costs one round trip (manifest, K rows, V rows and recurrent state in one
pipeline), then a local decode. When the server is on this host, the rows do not cross the
socket at all: the same round trip asks for ``V.EXPORT`` and the client maps the file it names
(``pion.client.local_lane``). On a miss it prefills locally, returns the cache, and stores it
(unless the namespace has not yet been missed ``admission_threshold`` times), as a staged
store the server publishes whole or not at all. ``fetch_nearest(token_ids)`` reuses every token
a stored prefix shares with a longer (or shorter) prompt. ``export``/``import_`` move a prefix
between servers as a checksummed file.

Every hit is checked against the stored manifest (model fingerprint: every weight hashed;
layout, codecs, tokens): a mismatch is a miss, counted, never loaded (fail closed; docs/client.md,
"The fail-closed contract").
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections import Counter

from pion.client import allocator, transfer, worker_state
from pion.client.adapters import adapter_for
from pion.client.blocks import DEFAULT_BLOCK_SIZE, block_hashes, chain_seed, hash_blob, token_blob
from pion.client.client import DEFAULT_URL, PionClient
from pion.client.errors import PionConnectionError, PionError
from pion.client.fingerprint import Background
from pion.client.local_lane import EXPORT_DTYPE, can_export, export_args, is_local, open_export
from pion.client.manifest import build_manifest, encode_manifest, mismatch, parse_manifest
from pion.client.namespace import fingerprint_hash, prefix_namespace, tokenizer_hash
from pion.client.rows import check_schema, make_schema
from pion.client.tiers import open_client

STAT_KEYS = ("hits", "misses", "partial_hits", "partial_tokens", "local_hits", "streamed_hits", "stream_discards",
             "admission_skips",
             "manifest_mismatches", "namespace_conflicts", "replaced", "hybrid_partial_skips",
             "block_size_mismatches", "errors")


class PionPromptCache:
    """A prompt-prefix cache for one model, stored in a Pion server.

    Args:
        model: a transformers ``PreTrainedModel`` (PyTorch) or an mlx-lm model.
        url: the server (``pion://host:1974``, ``pions://`` for TLS, ``unix:///path``), or many:
            ``pion+cluster://h1:p1,h2:p2`` (Pion cluster nodes) or ``redis+cluster://...`` (a Redis
            or Valkey Cluster as the storage tier); docs/scale-out.md.
        vquant: codec of the stored K/V: ``"auto"`` (the model's own dtype, exact), or one of
            the K/V engine's codecs (``fp16 bf16 fp32 int8 fp8 turbo4 turbo3 turbo2 mlx4g32``).
        boundary_protect: N > 0 keeps K in fp16 everywhere and V in fp16 on the first and last
            N layers, ``vquant`` in between.
        admission_threshold: a prefix is stored on its Nth miss (1 = the first).
        block_size: tokens per block of the hash chain that ``fetch_nearest`` matches on.
        tokenizer: the tokenizer (or a hash string): part of the model fingerprint.
        adapter_id: the LoRA/adapter in use, if any: part of the model fingerprint.
        model_id: the model's name, a label for logs and the demo (defaults to the runtime's own, e.g.
            ``config._name_or_path``); it is not part of the fingerprint, so one model loaded from a
            hub id and from a local directory shares its prefixes.
        warm_up_tokens: N > 0 calls ``warm_up(N)`` now: the first hit of a prefix up to N tokens in
            this process then costs what later hits cost (a one-time touch of that much memory).
            0 (default) warms up for the largest prefix a worker of this model served on this
            host before (``pion.client.worker_state``), if any.
        fingerprint: your own identity of the weights (e.g. a hub id with its commit hash, or a
            checkpoint digest): it replaces the hash of every weight (``pion.client.fingerprint``),
            which is then skipped. Contract: it must change whenever any weight or adapter changes.
            Without it every weight is hashed in a background thread started here; the first
            request waits for it only if it is not done yet, and gets its error if it failed.
        client: an existing ``PionClient`` (then ``url`` is ignored).
        keep_freed_memory: let glibc keep freed heap memory (``pion.client.allocator``), so
            the runtime's per-hit K/V buffers reuse mapped pages instead of page-faulting fresh
            ones (20-30 ms for a 94 MB prefix on a small machine). Process-wide; ``False`` leaves
            the allocator alone, as do glibc's own ``MALLOC_*`` variables when set.
        local_lane: on a hit, map the server's ``V.EXPORT`` file instead of receiving the rows
            over the socket: ``"auto"`` (default) when the server is on this host (a unix socket
            or a loopback address), ``True``/``False`` to force. Falls back to the socket, with
            one warning, when the file cannot be opened (the server runs in another container).
        stream: on the socket lane, ``forward(prefix, suffix)`` streams the prefix layer by layer
            into the suffix's forward (``pion.client.streamed``; transformers, attention-only
            models); ``False`` receives every row first, as ``get_or_prefill`` always does.
    """

    def __init__(self, model, url: str = DEFAULT_URL, vquant: str = "auto", boundary_protect: int = 0,
                 admission_threshold: int = 1, block_size: int = DEFAULT_BLOCK_SIZE, *, tokenizer=None,
                 adapter_id: str = "", model_id: str | None = None, client: PionClient | None = None,
                 local_lane: bool | str = "auto", keep_freed_memory: bool = True,
                 fingerprint: str | None = None, warm_up_tokens: int = 0, stream: bool = True) -> None:
        if admission_threshold < 1:
            raise ValueError("admission_threshold must be >= 1")
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.adapter = adapter_for(model, **({"model_id": model_id} if model_id else {}))
        #: is glibc keeping freed memory for the next hit (see ``keep_freed_memory``)?
        self.allocator_tuned = allocator.keep_freed_memory() if keep_freed_memory else False
        self.client = client or open_client(url)
        #: a cluster client gives namespaces a hash tag (their keys then share one slot)
        self._tag = getattr(self.client, "tag", None)
        #: a Redis Cluster tier stores and fetches with plain Redis commands (pion.client.redis_tier)
        self._store = getattr(self.client, "store_prefix", transfer.store)
        self._fetch = getattr(self.client, "fetch_prefix", transfer.fetch)
        self.vquant = vquant.lower()
        self.boundary_protect = boundary_protect
        self.admission_threshold = admission_threshold
        self.block_size = block_size
        layout = self.adapter.layout
        if len(set(layout.k_dims) | set(layout.v_dims)) > 1:
            raise NotImplementedError("layers of different K/V widths cannot be registered as one prefix yet")
        self.layout = layout.describe()
        self.schema = make_schema(len(layout.attn), layout.dtype, self.vquant, boundary_protect)
        check_schema(self.schema, layout.k_dims, layout.v_dims)
        self.schema_tag = "k=" + ",".join(self.schema["k"]) + ";v=" + ",".join(self.schema["v"])
        tok_hash, weights = tokenizer_hash(tokenizer), {"weights": str(fingerprint)} if fingerprint is not None else {}

        def identity() -> tuple[dict, str, bytes]:
            fp = {**self.adapter.fingerprint(**weights), "tokenizer": tok_hash, "adapter": adapter_id}
            fp_hash = fingerprint_hash(fp)
            return fp, fp_hash, chain_seed(f"{fp_hash}|{self.schema_tag}")

        #: the fingerprint, hashed off the request path (``pion.client.fingerprint.Background``)
        self._identity = Background(identity)
        self._misses_seen: Counter[str] = Counter()
        self._counts: Counter[str] = Counter()
        self._ms = {"fetch_ms_total": 0.0, "store_ms_total": 0.0, "last_prefill_ms": 0.0}
        self._bytes_fetched = 0
        if local_lane not in ("auto", True, False):
            raise ValueError("local_lane must be 'auto', True or False")
        wanted = (is_local(self.client.url) and self._tag is None) if local_lane == "auto" else bool(local_lane)
        #: is the local lane on? (it turns itself off for good when the server's files are out of reach)
        self.local_lane = wanted and can_export(layout)
        #: may ``forward`` stream a socket-lane hit into the suffix's forward?
        self.stream = bool(stream) and hasattr(self.adapter, "streamed_cache") and not layout.state \
            and isinstance(self.client, PionClient) and self._fetch is transfer.fetch
        #: why the last manifest check failed (for logs and tests)
        self.last_mismatch = ""
        self._warned: set[str] = set()
        #: the key of this model's prefix sizes in the worker state file (a size hint, no identity)
        self._seen_key = "|".join((self.adapter.model_id, json.dumps(self.layout, sort_keys=True), self.schema_tag))
        self._seen = worker_state.seen_tokens(self._seen_key)
        #: the bytes prefaulted at construction (``warm_up_tokens``, else the sizes served before)
        self.warmed_bytes = self.warm_up(warm_up_tokens or self._seen) if (warm_up_tokens or self._seen) else 0
        self._connect()

    # -- identity --------------------------------------------------------------------------

    @property
    def fingerprint(self) -> dict:
        """What makes this model's K/V its own (every weight hashed unless ``fingerprint=``)."""
        return self._identity.result()[0]

    @property
    def fp_hash(self) -> str:
        """The digest of ``fingerprint``: what manifests and namespaces carry."""
        return self._identity.result()[1]

    @property
    def chain_seed(self) -> bytes:
        """The root of this model's block chains: another model (or codec schema) storing the same
        token ids builds other hashes, so MATCH never offers it this one's prefixes."""
        return self._identity.result()[2]

    # -- public API ----------------------------------------------------------------------

    def namespace(self, token_ids) -> str:
        """The namespace this model and codec schema give to exactly these tokens."""
        ns = prefix_namespace(self.fp_hash, self.schema_tag, [int(t) for t in token_ids])
        return self._tag(ns) if self._tag is not None else ns

    def _given(self, namespace: str | None) -> str | None:
        """A caller's namespace, with a hash tag on a cluster."""
        return self._tag(namespace) if namespace and self._tag is not None else namespace

    def get_or_prefill(self, prefix_ids, namespace: str | None = None, *, replace: bool = False):
        """The runtime's cache holding ``prefix_ids``: fetched on a hit, prefilled (and stored) on a miss.

        ``namespace``: your own name for the prefix. If it already holds another prefix (other
        tokens, another model), this is a miss that never overwrites it: warned once per
        namespace and counted in ``namespace_conflicts``; ``replace=True`` stores this one in its
        place instead (atomically: readers see the old prefix or the new one, never a mix).
        """
        ids = [int(t) for t in prefix_ids]
        if not ids:
            raise ValueError("prefix_ids is empty")
        namespace = self._given(namespace)
        ns = namespace or self.namespace(ids)
        cache, outcome = self._try_fetch(ns, ids, len(ids), exact=True)
        if cache is not None:
            self._counts["hits"] += 1
            return cache
        return self._miss(ns, ids, outcome, explicit=namespace is not None, replace=replace)

    def forward(self, prefix_ids, suffix_ids, namespace: str | None = None):
        """``(cache, logits)``: the prefix from Pion (prefilled and stored on a miss, as
        ``get_or_prefill``), then ``suffix_ids`` run on it; the cache holds both, ``logits`` are the
        last position's (float32 numpy). What a request's time to first token is made of.

        On the socket lane (``stream=True``, transformers, attention-only models) a hit is
        streamed: each layer's update in the suffix's forward waits only for that layer's rows,
        so the rows of layer L arrive while layer L-1 runs (``pion.client.streamed``). The
        closing generation check comes after the forward: if the entry changed meanwhile (or a
        layer's rows were dropped), the forward is thrown away, counted in ``stream_discards``,
        and the request is served as a miss (the prefix computed here, not stored: another
        client is changing that entry): never logits of a mix.
        """
        ids, suffix = [int(t) for t in prefix_ids], [int(t) for t in suffix_ids]
        if not ids or not suffix:
            raise ValueError("prefix_ids and suffix_ids must not be empty")
        given = self._given(namespace)
        if self.stream and not self.local_lane:
            done = self._forward_streamed(given or self.namespace(ids), ids, suffix, explicit=given is not None)
            if done is not None:
                return done
        cache = self.get_or_prefill(ids, namespace=namespace)
        return cache, self.adapter.forward(suffix, cache)

    def _forward_streamed(self, ns: str, ids: list[int], suffix: list[int], explicit: bool):
        """``forward``'s streamed socket hit; on a miss the miss path's answer; None when the
        stream could not start (an error, already counted: ``get_or_prefill`` takes over)."""
        from pion.client.streamed import StreamBroken, StreamedFetch

        started = time.perf_counter()
        n = len(ids)
        try:
            stream = StreamedFetch(self.client.redis, ns, n, self.adapter.layout, self.schema, spare=len(suffix))
        except PionError as exc:
            self._error("fetch", exc)
            return None
        try:
            try:
                hit, _, manifest = stream.head()
            except PionError as exc:
                self._error("fetch", exc)
                return None
            if isinstance(hit, PionError):
                self._error("fetch", hit)
                return None
            if transfer.text(hit).upper() != "HIT" or not isinstance(manifest, bytes | bytearray):
                outcome = "miss"
            elif not self._verify(ns, bytes(manifest), ids, n, exact=True):
                outcome = "mismatch"
            else:
                cache = self.adapter.streamed_cache(stream.layer, n, self.schema)
                try:
                    logits = self.adapter.forward(suffix, cache)
                    for layer in cache.layers:
                        getattr(layer, "materialize", lambda: None)()  # a layer the forward did not update
                    kept = stream.finish()
                except StreamBroken:
                    kept = False
                except PionError as exc:
                    self._error("fetch", exc)
                    kept = False
                if kept:
                    self._counts["hits"] += 1
                    self._counts["streamed_hits"] += 1
                    self._bytes_fetched += stream.nbytes
                    self._served(n)
                    return cache, logits
                self._counts["stream_discards"] += 1  # the entry changed under the stream: a miss
                outcome = "discarded"
        finally:
            stream.close()
            self._ms["fetch_ms_total"] += (time.perf_counter() - started) * 1000
        cache = self._miss(ns, ids, outcome, explicit=explicit, replace=False)
        return cache, self.adapter.forward(suffix, cache)

    def _miss(self, ns: str, ids: list[int], outcome: str, *, explicit: bool, replace: bool):
        """A miss: prefill here, then store (unless another prefix holds the namespace or the
        admission threshold is not reached yet); the prefilled cache."""
        self._counts["misses"] += 1
        started = time.perf_counter()
        cache = self.adapter.prefill(ids)
        self._ms["last_prefill_ms"] = prefill_ms = (time.perf_counter() - started) * 1000
        self._misses_seen[ns] += 1
        if outcome == "mismatch" and not replace:
            self._conflict(ns, explicit=explicit)  # never overwrite another prefix
        elif outcome == "discarded":
            pass  # another client changed this entry while we streamed it: leave it to them
        elif self._misses_seen[ns] < self.admission_threshold and outcome != "mismatch":
            self._counts["admission_skips"] += 1
        else:
            self.put(ids, cache, namespace=ns, prefill_ms=prefill_ms, replace=replace)
        return cache

    def fetch_nearest(self, token_ids):
        """``(cache, remaining_ids)``: the longest stored prefix of ``token_ids`` and what is left to run.

        An exact stored prefix gives ``(cache, [])``. Otherwise the server (``KV.PREFIX.MATCH ...
        WITHTOKENS``) finds the stored prefix holding the most leading tokens: a prompt extending
        a stored prefix reuses all of it (600 of 700 tokens, not the 512 of whole blocks), and a
        prompt shorter than a stored one reuses its head. A hybrid model's recurrent state exists
        only at the stored prefix's end, so for it only a prompt that extends a whole stored
        prefix is a partial hit (``hybrid_partial_skips`` counts the others). With nothing
        usable, ``(None, token_ids)``, as mlx-lm's ``LRUPromptCache.fetch_nearest_cache``.
        """
        ids = [int(t) for t in token_ids]
        if not ids:
            return None, []
        cache, _ = self._try_fetch(self.namespace(ids), ids, len(ids), exact=True)
        if cache is not None:
            self._counts["hits"] += 1
            return cache, []
        found = self._match(ids)
        if found is not None:
            ns, used, stored, generation = found
            cache, _ = self._try_fetch(ns, ids[:used], used, exact=used == stored, generation=generation)
            if cache is not None:
                self._counts["partial_hits"] += 1
                self._counts["partial_tokens"] += used
                return cache, ids[used:]
        self._counts["misses"] += 1
        return None, ids

    def put(self, prefix_ids, cache, namespace: str | None = None, prefill_ms: float | None = None, *,
            replace: bool = False) -> bool:
        """Store ``cache`` (holding exactly ``prefix_ids``) under its namespace; False if the server
        failed or refused (the namespace holds another prefix and ``replace`` is False)."""
        ids = [int(t) for t in prefix_ids]
        ns = self._given(namespace) or self.namespace(ids)
        started = time.perf_counter()
        try:
            kv, states = self.adapter.export(cache)
            if kv and kv[0][0].shape[0] != len(ids):
                raise ValueError(f"the cache holds {kv[0][0].shape[0]} tokens, prefix_ids has {len(ids)}")
            manifest = build_manifest(fingerprint=self.fingerprint, fp_hash=self.fp_hash, layout=self.layout,
                                      codecs=self.schema, token_ids=ids, block_size=self.block_size)
            layout = self.adapter.layout
            after = [export_args(*transfer.sides(ns), len(ids), layout)] if self.local_lane else []
            replies = self._store(self.client, ns, ids, kv, states, self.schema, encode_manifest(manifest),
                                     self.block_size, prefill_ms, after=after, seed=self.chain_seed, replace=replace)
            if replies and isinstance(replies[0], PionError):
                self._lane_off(f"the server refused V.EXPORT ({replies[0]})")
            self._counts["replaced"] += int(replace)
            self._served(len(ids))
            return True
        except PionError as exc:
            self._error("store", exc)
            return False
        finally:
            self._ms["store_ms_total"] += (time.perf_counter() - started) * 1000

    def warm_up(self, n_tokens: int) -> int:
        """Prepare this process for fast hits of prefixes up to ``n_tokens``; the bytes prefaulted.

        A fresh process's first hit pays for memory the runtime touches for the first time: the
        cache tensors it builds from the prefix (transformers concatenates every layer into new
        buffers). With ``keep_freed_memory`` in force, this touches that much heap once and
        gives it back, so the first hit reuses faulted pages as later ones do (docs/client.md,
        "First hit in a fresh process"). Call it at start-up, before serving (or pass
        ``warm_up_tokens=``); without ``keep_freed_memory`` it does nothing.
        """
        layout = self.adapter.layout
        itemsize = {"float32": 4, "float16": 2, "bfloat16": 2}.get(layout.dtype, 4)
        per_token = sum(k + v for k, v in zip(layout.k_dims, layout.v_dims, strict=True)) * itemsize
        return allocator.prefault(int(per_token * (n_tokens + 1) * 1.25))

    def export(self, prefix_ids, path, namespace: str | None = None) -> int:
        """Write the stored prefix of ``prefix_ids`` to ``path`` as a portable artifact (a
        safetensors file with the manifest and a checksum, ``pion.client.portable``); its size.
        Raises ``PionError`` when the server has no complete prefix there."""
        from pion.client.portable import export_prefix

        return export_prefix(self, namespace or self.namespace(prefix_ids), path)

    def import_(self, path, replace: bool = False) -> str:
        """Store the artifact at ``path`` (made by ``export``, here or on another machine); its namespace.

        Refused with ``ArtifactRefused`` and the reason, before anything is sent, when the file
        is damaged or truncated or is another model's (fingerprint, layout, codec schema); the
        server checks the checksum again and refuses a namespace holding another prefix unless
        ``replace``."""
        from pion.client.portable import import_prefix

        return import_prefix(self, path, replace)

    def drop(self, prefix_ids=None, namespace: str | None = None) -> bool:
        """Remove a stored prefix (K/V and recurrent state)."""
        ns = self._given(namespace) or self.namespace(prefix_ids)
        dropped = self.client.kv_drop(ns) > 0
        for slot in self.adapter.layout.state:
            self.client.ssm_drop(ns, slot)
        return dropped

    def stats(self) -> dict:
        lookups = self._counts["hits"] + self._counts["partial_hits"] + self._counts["misses"]
        hits = self._counts["hits"] + self._counts["partial_hits"]
        return {
            **{key: self._counts[key] for key in STAT_KEYS},
            "hit_rate": hits / lookups if lookups else 0.0,
            **{key: round(value, 3) for key, value in self._ms.items()},
            "fingerprint_ms": round(self._identity.ms, 3),
            "fingerprint_cpu_ms": round(self._identity.cpu_ms, 3),
            "fingerprint_wait_ms": round(self._identity.waited_ms, 3),
            "bytes_fetched": self._bytes_fetched,
            "admission_threshold": self.admission_threshold,
        }

    def enable_stage2(self, model=None, *, sparse: dict | None = None, lane: str = "server"):
        """Let the server compute attention over stored prefixes (``pion.client.stage2``); the ``Stage2``."""
        from pion.client.adapters import enable_stage2

        return enable_stage2(self, model, sparse=sparse, lane=lane)

    def close(self) -> None:
        self.client.close()

    # -- internals -----------------------------------------------------------------------

    def _try_fetch(self, ns: str, ids: list[int], n_tokens: int, *, exact: bool, generation: int | None = None):
        """``(runtime cache or None, "hit" | "miss" | "mismatch" | "error")`` for the first ``n_tokens`` of ``ns``.

        ``generation``: the entry MATCH compared the tokens of; a partial hit's manifest cannot
        say which tokens its head holds, so another entry there now (replaced meanwhile) is a miss.
        """
        started = time.perf_counter()
        try:
            if self.local_lane:
                found = self._fetch_local(ns, ids, n_tokens, exact, generation)
                if found is not None:
                    return found
            got = self._fetch(self.client, ns, n_tokens, self.adapter.layout, partial=not exact,
                              generation=generation)
            if got is None:
                return None, "miss"
            if not self._verify(ns, got.manifest, ids, n_tokens, exact):
                return None, "mismatch"
            kv = transfer.decode(got, n_tokens, self.schema, self.adapter.layout)
            self._bytes_fetched += got.nbytes
            self._served(n_tokens)
            return self.adapter.build(kv, got.states), "hit"
        except PionError as exc:
            self._error("fetch", exc)
            return None, "error"
        finally:
            self._ms["fetch_ms_total"] += (time.perf_counter() - started) * 1000

    def _fetch_local(self, ns: str, ids: list[int], n_tokens: int, exact: bool, generation: int | None):
        """The local lane's answer, or None to go on with the socket (the lane just turned off)."""
        layout = self.adapter.layout
        pk, pv = transfer.sides(ns)
        got = transfer.fetch_export(self.client, ns, n_tokens, layout, export_args(pk, pv, n_tokens, layout),
                                    partial=not exact, generation=generation)
        if got is None:
            return None, "miss"
        if not self._verify(ns, got.manifest, ids, n_tokens, exact):
            return None, "mismatch"
        if isinstance(got.path, PionError):
            self._lane_off(f"the server refused V.EXPORT ({got.path})")
            return None
        heads, dim, _ = layout.heads[0]
        try:
            kv = open_export(got.path, len(layout.attn), (1, heads, n_tokens, dim), EXPORT_DTYPE[layout.dtype])
        except (OSError, ValueError) as exc:
            self._lane_off(f"cannot map the server's export file ({exc})")
            return None
        self._counts["local_hits"] += 1
        self._bytes_fetched += sum(k.nbytes + v.nbytes for k, v in kv)
        self._served(n_tokens)
        return self.adapter.build_heads(kv, got.states), "hit"

    def _verify(self, ns: str, raw_manifest: bytes, ids: list[int], n_tokens: int, exact: bool) -> bool:
        """Is the stored manifest this model's, this codec schema's and these tokens'? Counted if not."""
        manifest = parse_manifest(raw_manifest)
        why = mismatch(manifest, fp_hash=self.fp_hash, layout=self.layout, codecs=self.schema,
                       token_ids=ids if exact else None, min_tokens=n_tokens)
        if why is None and not exact and self.adapter.layout.state and manifest.get("token_count") != n_tokens:
            why = "its recurrent state is at another position"
        if why is None:
            return True
        self._counts["manifest_mismatches"] += 1
        self.last_mismatch = f"{ns}: {why}"
        return False

    def _connect(self) -> None:
        """Open the connection now, not in the first request (a server down now is the first
        request's error, counted and warned there as always). A cluster client opens a node's
        connection when a key first routes there."""
        if isinstance(self.client, PionClient):
            try:
                self.client.ping()
            except PionError:
                pass

    def _served(self, n_tokens: int) -> None:
        """Remember the largest prefix served, for the next worker's warm-up (written when it grows)."""
        if n_tokens > self._seen:
            self._seen = n_tokens  # written off the request path
            threading.Thread(target=worker_state.record_seen, args=(self._seen_key, n_tokens), daemon=True).start()

    def _lane_off(self, why: str) -> None:
        self.local_lane = False
        warnings.warn(f"Pion prompt cache: local lane off, hits go through the socket: {why}", RuntimeWarning,
                      stacklevel=4)

    def _match(self, ids: list[int]) -> tuple[str, int, int, int] | None:
        """``(namespace, tokens it holds of ids, tokens it stores, its generation)`` of the best stored prefix."""
        hashes = block_hashes(ids, self.block_size, root=self.chain_seed)
        try:
            found = self.client.kv_match_tokens(self.block_size, hash_blob(hashes), token_blob(ids), self.chain_seed)
        except PionError as exc:
            self._error("match", exc)
            return None
        if found is None:
            return None
        ns, held, size, stored, generation = found
        if size != self.block_size:
            self._counts["block_size_mismatches"] += 1  # found although stored with another block_size
        if self.adapter.layout.state and held != stored:
            self._counts["hybrid_partial_skips"] += 1  # its recurrent state is at another position
            return None
        return ns, min(held, len(ids)), stored, generation

    def _conflict(self, ns: str, explicit: bool) -> None:
        """A namespace holding another prefix: counted, and warned once when it was the caller's."""
        self._counts["namespace_conflicts"] += 1
        if explicit and ns not in self._warned:
            self._warned.add(ns)
            warnings.warn(f"Pion prompt cache: namespace {ns!r} holds another prefix ({self.last_mismatch}); every "
                          "request for it misses without storing. Pass replace=True to store this one instead.",
                          RuntimeWarning, stacklevel=3)

    def _error(self, what: str, exc: PionError) -> None:
        """Count and warn; a cache that cannot reach its server degrades to plain prefill."""
        self._counts["errors"] += 1
        if not isinstance(exc, PionConnectionError) or self._counts["errors"] == 1:
            warnings.warn(f"Pion prompt cache {what} failed: {exc}", RuntimeWarning, stacklevel=3)
