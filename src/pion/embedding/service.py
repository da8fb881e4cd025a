"""The ``Embedder`` component: one provider per server, batching of concurrent requests, a small
cache, counters, and the component hooks (start, stop, cron, info, metrics, dump/load).

Why a batcher: a transformer embeds 32 short texts in about the time of 4 single ones, so the
requests that arrive while a batch is running are sent together as the next batch (up to
``batch_size`` texts). Callers block in ``embed`` (from a worker thread, never the event loop:
the server's commands wait in ``wait_pool``, a pool of their own, so waiting on the model never
occupies the threads FT.SEARCH and V.* use). The provider is created at once but started lazily,
on the first request (or at ``start`` when ``preload`` is set), so the server starts without the
extra and without loading a model it may never use.

The cache maps (scope, text) to its vector, least recently used out first; the scope (the
tenant) keeps one tenant's texts from warming, and so revealing themselves to, another's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from pion.embedding.factory import make_provider
from pion.embedding.providers import EmbeddingError, parse_spec

log = logging.getLogger("pion.embedding")

#: a text longer than this (UTF-8 bytes) is refused: models read their first few hundred tokens only
MAX_TEXT_BYTES = 1 << 20
#: threads that may wait on the model at once (they only wait; the batcher does the work)
WAIT_THREADS = 32


@dataclass(frozen=True, slots=True)
class EmbedConfig:
    provider: str = "minilm"
    url: str = ""
    model: str = ""
    api_key: str = ""
    dim: int = 0
    batch_size: int = 64
    threads: int = 1
    timeout: float = 60.0
    cache_entries: int = 4096
    preload: bool = False

    def __post_init__(self) -> None:
        parse_spec(self.provider)  # ValueError with the accepted forms
        if not 1 <= self.batch_size <= 4096:
            raise ValueError("embed-batch-size must be 1..4096")
        if not 0 <= self.dim <= 32768:
            raise ValueError("embed-dim must be 0..32768")
        if self.timeout <= 0:
            raise ValueError("embed-timeout must be positive")


class _Request:
    __slots__ = ("texts", "done", "vectors", "error")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.done = threading.Event()
        self.vectors: np.ndarray | None = None
        self.error: BaseException | None = None


class Embedder:
    def __init__(self, config: EmbedConfig, provider: Any = None) -> None:
        self.config = config
        self.spec = parse_spec(config.provider)
        self.provider = provider or make_provider(self.spec, url=config.url, model=config.model, api_key=config.api_key,
                                                  dim=config.dim, threads=config.threads, timeout=config.timeout)
        self._queue: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._cache: OrderedDict[tuple[bytes, str], np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._wait_pool: ThreadPoolExecutor | None = None
        self.stats = {"requests": 0, "texts": 0, "batches": 0, "max_batch": 0, "cache_hits": 0, "errors": 0,
                      "embed_us": 0}
        self.last_error = ""

    # -- what the model is ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.provider.name)

    @property
    def dim(self) -> int:
        """The vectors' width (0 until an endpoint of unknown width has answered once)."""
        return int(self.provider.dim or 0)

    @property
    def wait_pool(self) -> ThreadPoolExecutor:
        if self._wait_pool is None:
            self._wait_pool = ThreadPoolExecutor(max_workers=WAIT_THREADS, thread_name_prefix="pion-embed-wait")
        return self._wait_pool

    # -- embedding ------------------------------------------------------------------------------

    def embed(self, texts: list[str], scope: bytes = b"") -> np.ndarray:
        """``(len(texts), dim)`` float32 unit rows. Blocks: call it from a worker thread.

        Raises ``EmbeddingError`` (``EmbeddingUnavailable`` when embeddings are off or the extra is
        missing) with a message fit for the client."""
        for text in texts:
            if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
                raise EmbeddingError(f"a text to embed is longer than {MAX_TEXT_BYTES} bytes")
        self.stats["requests"] += 1
        self.stats["texts"] += len(texts)
        rows: list[np.ndarray | None] = [self._cached(scope, t) for t in texts]
        missing = [i for i, row in enumerate(rows) if row is None]
        self.stats["cache_hits"] += len(texts) - len(missing)
        if missing:
            request = _Request([texts[i] for i in missing])
            self._submit(request)
            request.done.wait()
            if request.error is not None:
                raise request.error
            assert request.vectors is not None
            for i, vector in zip(missing, request.vectors, strict=True):
                rows[i] = vector
                self._remember(scope, texts[i], vector)
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(rows)  # type: ignore[arg-type]

    def lookup(self, texts: list[str], scope: bytes = b"") -> np.ndarray | None:
        """The texts' vectors when every one is in the cache (counted as ``embed`` counts a
        request), else None: a caller on the event loop answers a repeated query at once, with
        no hand-off to a waiting thread and the batcher and back."""
        if not texts or not self.config.cache_entries:
            return None
        with self._cache_lock:
            rows = [self._cache.get((scope, t)) for t in texts]
            if any(row is None for row in rows):
                return None
            for t in texts:
                self._cache.move_to_end((scope, t))
        self.stats["requests"] += 1
        self.stats["texts"] += len(texts)
        self.stats["cache_hits"] += len(texts)
        return np.stack(rows)  # type: ignore[arg-type]

    def _cached(self, scope: bytes, text: str) -> np.ndarray | None:
        if not self.config.cache_entries:
            return None
        with self._cache_lock:
            vector = self._cache.get((scope, text))
            if vector is not None:
                self._cache.move_to_end((scope, text))
            return vector

    def _remember(self, scope: bytes, text: str, vector: np.ndarray) -> None:
        if not self.config.cache_entries:
            return
        with self._cache_lock:
            self._cache[(scope, text)] = vector
            while len(self._cache) > self.config.cache_entries:
                self._cache.popitem(last=False)

    def _submit(self, request: _Request) -> None:
        with self._wake:
            if self._stopping:
                raise EmbeddingError("the server is shutting down")
            self._queue.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pion-embed-batcher", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _take(self) -> list[_Request] | None:
        """The next batch: every queued request that fits in ``batch_size`` texts (at least one)."""
        with self._wake:
            while not self._queue and not self._stopping:
                self._wake.wait()
            if self._stopping and not self._queue:
                return None
            batch = [self._queue.popleft()]
            size = len(batch[0].texts)
            while self._queue and size + len(self._queue[0].texts) <= self.config.batch_size:
                request = self._queue.popleft()
                size += len(request.texts)
                batch.append(request)
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            texts = [t for request in batch for t in request.texts]
            try:
                vectors = self._embed_chunks(texts)
            except BaseException as exc:  # every waiter gets the error; the batcher goes on
                self.stats["errors"] += 1
                self.last_error = str(exc)
                for request in batch:
                    request.error = exc if isinstance(exc, EmbeddingError) else EmbeddingError(f"{exc.__class__.__name__}: {exc}")
                    request.done.set()
                continue
            at = 0
            for request in batch:
                request.vectors = vectors[at:at + len(request.texts)]
                at += len(request.texts)
                request.done.set()

    def _embed_chunks(self, texts: list[str]) -> np.ndarray:
        size = self.config.batch_size
        parts = []
        self.provider.start()  # a first request waits for the model here, outside the timed part
        for start in range(0, len(texts), size):
            chunk = texts[start:start + size]
            began = time.perf_counter()
            parts.append(np.asarray(self.provider.embed(chunk), dtype=np.float32))
            self.stats["embed_us"] += int((time.perf_counter() - began) * 1e6)
            self.stats["batches"] += 1
            self.stats["max_batch"] = max(self.stats["max_batch"], len(chunk))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    # -- component hooks (#14) ------------------------------------------------------------------

    def start(self) -> None:
        """With ``preload``: load the model in the background now rather than on the first request."""
        if self.config.preload:
            threading.Thread(target=self._preload, name="pion-embed-preload", daemon=True).start()

    def _preload(self) -> None:
        try:
            self.provider.start()
        except Exception as exc:  # reported again, with the reason, to the first request
            self.last_error = str(exc)
            log.warning("embedding provider %s did not start: %s", self.name, exc)

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.provider.close()
        if self._wait_pool is not None:
            self._wait_pool.shutdown(wait=False, cancel_futures=True)

    def cron(self) -> None:
        """Nothing periodic: the worker is restarted on demand, the cache is bounded by count."""

    def info(self) -> dict[str, Any]:
        provider = self.provider
        stats = self.stats
        return {
            "embedding_provider": self.spec.kind,
            "embedding_model": self.name,
            "embedding_dim": self.dim,
            "embedding_ready": int(bool(getattr(provider, "running", True)) and self.dim > 0),
            "embedding_requests": stats["requests"],
            "embedding_texts": stats["texts"],
            "embedding_batches": stats["batches"],
            "embedding_max_batch": stats["max_batch"],
            "embedding_cache_hits": stats["cache_hits"],
            "embedding_cache_entries": len(self._cache),
            "embedding_errors": stats["errors"],
            "embedding_seconds_total": round(stats["embed_us"] / 1e6, 3),
            "embedding_worker_pid": provider.pid() if hasattr(provider, "pid") else 0,
            "embedding_worker_starts": getattr(provider, "starts", 0),
            "embedding_worker_crashes": getattr(provider, "crashes", 0),
            "embedding_load_seconds": round(getattr(provider, "load_seconds", 0.0), 3),
        }

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.info().items() if isinstance(v, int | float)}

    def dump(self) -> bytes:
        """No snapshot state: vectors live in the documents that hold them; the cache is derived."""
        return b""

    def load(self, data: bytes) -> None:
        """Nothing to restore (see ``dump``)."""
