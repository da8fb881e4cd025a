"""The server's side of the embedding worker: spawn ``pion.embedding.worker``, send batches, read vectors.

The subprocess is started on the first ``embed`` (or ``start``), never at import, and started
again on the next request if it died (the crash is counted and its reason kept). Only one
thread talks to it at a time (the Embedder's batcher), so the pipes need no framing beyond
their length prefixes. This module imports no model runtime: it only knows the module's name.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import threading
import time

import numpy as np

from pion.embedding.framing import read_frame, write_frame
from pion.embedding.providers import EmbeddingError, EmbeddingUnavailable

log = logging.getLogger("pion.embedding")

WORKER_MODULE = "pion.embedding.worker"
#: loading torch and the model takes 5-30 s on a busy 2-core box; a wedged load is killed after this
LOAD_TIMEOUT = 300.0


class WorkerProvider:
    def __init__(self, kind: str, path: str = "", *, threads: int = 1, timeout: float = 60.0) -> None:
        self.kind = kind
        self.path = path
        self.threads = threads
        self.timeout = timeout
        self.name = "all-MiniLM-L6-v2" if kind == "minilm" else os.path.basename(os.path.normpath(path))
        self.dim = 384 if kind == "minilm" else 0
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.crashes = 0
        self.load_seconds = 0.0
        self.last_error = ""
        #: a missing extra is permanent until the server restarts: answer it at once, do not respawn
        self.unavailable: str = ""
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        with self._lock:
            self._ensure()

    def _ensure(self) -> subprocess.Popen:
        if self.unavailable:
            raise EmbeddingUnavailable(self.unavailable)
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        if self.proc is not None:
            self.crashes += 1
            log.warning("embedding worker exited with %s; starting it again", self.proc.returncode)
            self._reap()
        started = time.monotonic()
        argv = [sys.executable, "-m", WORKER_MODULE, "--kind", self.kind, "--threads", str(self.threads)]
        if self.path:
            argv += ["--path", self.path]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   OMP_NUM_THREADS=str(self.threads))
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.starts += 1
        reply = self._read(self.proc, "loading the model", max(self.timeout, LOAD_TIMEOUT))
        if reply[:1] == b"R":
            meta = json.loads(reply[1:])
            self.dim, self.name = int(meta["dim"]), str(meta["name"])
            self.load_seconds = time.monotonic() - started
            log.info("embedding worker ready: %s (%d dims) in %.1f s", self.name, self.dim, self.load_seconds)
            return self.proc
        text = reply[1:].decode("utf-8", "replace")
        self._reap()
        if reply[:1] == b"U":
            self.unavailable = text
            raise EmbeddingUnavailable(text)
        self.last_error = text
        raise EmbeddingError(f"the embedding model could not be loaded: {text}")

    def _read(self, proc: subprocess.Popen, doing: str, timeout: float | None = None) -> bytes:
        assert proc.stdout is not None
        timer = threading.Timer(timeout or self.timeout, proc.kill)  # a wedged worker is killed, not waited on forever
        timer.start()
        try:
            reply = read_frame(proc.stdout)  # type: ignore[arg-type]
        finally:
            timer.cancel()
        if reply is None:
            code = proc.poll()
            self.last_error = f"the embedding worker died while {doing} (exit status {code})"
            self._reap()
            self.crashes += 1
            raise EmbeddingError(self.last_error)
        return reply

    def embed(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            proc = self._ensure()
            assert proc.stdin is not None
            try:
                write_frame(proc.stdin, json.dumps({"texts": texts}).encode())  # type: ignore[arg-type]
            except (BrokenPipeError, OSError):
                self._reap()
                self.crashes += 1
                raise EmbeddingError("the embedding worker died; it is started again on the next request") from None
            reply = self._read(proc, "embedding")
        if reply[:1] == b"E":
            raise EmbeddingError(reply[1:].decode("utf-8", "replace"))
        count, dim = struct.unpack_from("<II", reply, 1)
        vectors = np.frombuffer(reply, dtype=np.float32, count=count * dim, offset=9).reshape(count, dim)
        if count != len(texts):
            raise EmbeddingError(f"the embedding worker answered {count} vectors for {len(texts)} texts")
        return vectors

    def _reap(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        with self._lock:
            self._reap()

    def pid(self) -> int:
        return self.proc.pid if self.running else 0  # type: ignore[union-attr]
