"""An OpenAI-compatible embeddings endpoint: ``POST {embed-url}/embeddings`` (OpenAI, vLLM, Ollama,
LM Studio, llama.cpp's server, text-embeddings-inference all answer this shape).

Request ``{"model", "input": [texts], "encoding_format": "float"}`` (plus ``"dimensions"`` when
``embed-dim`` is set), ``Authorization: Bearer <key>`` when a key is configured; reply
``{"data": [{"index", "embedding"}]}``. One keep-alive connection, used by one thread at a time
(the Embedder's batcher). The dimension is learnt from the first reply unless configured; a
reply of another width afterwards is an error, never a silently different index.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse

import numpy as np

from pion.embedding.providers import EmbeddingError, normalize_rows


def endpoint(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of the embeddings endpoint for a base URL like ``http://h:8000/v1``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"embed-url must be an http:// or https:// URL, got '{url}'")
    path = parts.path.rstrip("/")
    if not path.endswith("/embeddings"):
        path += "/embeddings"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, path


class OpenAIProvider:
    def __init__(self, url: str, model: str, *, api_key: str = "", dim: int = 0, timeout: float = 60.0) -> None:
        if not url:
            raise ValueError("embed-provider openai needs embed-url (the endpoint's base URL, e.g. http://127.0.0.1:8000/v1)")
        self.scheme, self.host, self.port, self.path = endpoint(url)
        self.model = model or "text-embedding-3-small"
        self.api_key = api_key
        self.requested_dim = dim
        self.dim = dim
        self.timeout = timeout
        self.name = f"openai:{self.model}"
        self.requests = 0
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Nothing to load: the endpoint is asked on the first batch."""

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.timeout)
        return self._conn

    def _post(self, body: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        for attempt in (0, 1):  # a keep-alive connection the server closed meanwhile: retry once, fresh
            conn = self._connection()
            try:
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, OSError) as exc:
                conn.close()
                self._conn = None
                if attempt:
                    raise EmbeddingError(f"the embeddings endpoint {self.host}:{self.port} did not answer: {exc}") from None
        raise AssertionError("unreachable")

    def embed(self, texts: list[str]) -> np.ndarray:
        payload: dict = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.requested_dim:
            payload["dimensions"] = self.requested_dim
        with self._lock:
            status, raw = self._post(json.dumps(payload).encode())
            self.requests += 1
        if status != 200:
            raise EmbeddingError(f"the embeddings endpoint answered HTTP {status}: {raw[:200].decode('utf-8', 'replace')}")
        try:
            data = sorted(json.loads(raw)["data"], key=lambda item: item["index"])
            matrix = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"the embeddings endpoint's reply is not an OpenAI embeddings list: {exc}") from None
        if matrix.ndim != 2 or len(matrix) != len(texts):
            raise EmbeddingError(f"the embeddings endpoint answered {len(matrix)} vectors for {len(texts)} texts")
        if self.dim and matrix.shape[1] != self.dim:
            raise EmbeddingError(f"the embeddings endpoint answered {matrix.shape[1]}-dim vectors, "
                                 f"but this server's embeddings are {self.dim}-dim (embed-dim or its first reply)")
        self.dim = int(matrix.shape[1])
        return normalize_rows(matrix)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
