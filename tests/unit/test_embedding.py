"""The embedding component without a server: provider specs, the hash provider, batching of
concurrent requests, the cache and its tenant scopes, errors reaching every waiter, and the
OpenAI-compatible provider against a local fake endpoint (request shape, key, width checks)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from pion.embedding.openai import OpenAIProvider, endpoint
from pion.embedding.providers import EmbeddingError, HashProvider, ProviderSpec, parse_spec
from pion.embedding.service import MAX_TEXT_BYTES, EmbedConfig, Embedder


def test_provider_specs_parse_and_refuse_what_is_not_one():
    assert parse_spec("minilm") == ProviderSpec("minilm", dim=384)
    assert parse_spec("sentence-transformers:/m/x") == ProviderSpec("sentence-transformers", path="/m/x")
    assert parse_spec("st:/m/x").path == "/m/x"
    assert parse_spec("hash:64") == ProviderSpec("hash", dim=64)
    assert parse_spec("OpenAI").kind == "openai"
    for bad in ("minilm:3", "hash:0", "hash:x", "sentence-transformers", "word2vec", ""):
        with pytest.raises(ValueError, match="embed-provider must be one of"):
            parse_spec(bad)


def test_hash_provider_is_deterministic_unit_length_and_word_based():
    a, b = HashProvider(32), HashProvider(32)
    va = a.embed(["red apple pie", "green tea", ""])
    assert np.allclose(va, b.embed(["red apple pie", "green tea", ""]))
    assert np.allclose(np.linalg.norm(va[:2], axis=1), 1.0) and not va[2].any()
    near, far = a.embed(["red apple", "quantum physics"])
    assert va[0] @ near > va[0] @ far


class SlowProvider:
    """Records the batches it is given; each batch takes ``delay`` seconds."""

    name = "slow"

    def __init__(self, dim: int = 8, delay: float = 0.05) -> None:
        self.dim = dim
        self.delay = delay
        self.batches: list[list[str]] = []
        self.fail = False

    def start(self) -> None:
        pass

    def embed(self, texts):
        self.batches.append(list(texts))
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("model exploded")
        return HashProvider(self.dim).embed(texts)

    def close(self) -> None:
        pass


def test_concurrent_requests_are_batched_and_each_gets_its_own_rows():
    provider = SlowProvider()
    embedder = Embedder(EmbedConfig(provider="hash", batch_size=64), provider)
    results: dict[int, np.ndarray] = {}

    def ask(i: int) -> None:
        results[i] = embedder.embed([f"text {i}", f"other {i}"])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(provider.batches) < 16  # requests that waited were sent together
    assert max(len(b) for b in provider.batches) > 2
    reference = HashProvider(8)
    for i, rows in results.items():
        assert np.allclose(rows, reference.embed([f"text {i}", f"other {i}"]))
    assert embedder.info()["embedding_max_batch"] == max(len(b) for b in provider.batches)
    embedder.stop()


def test_batches_never_exceed_the_batch_size():
    provider = SlowProvider(delay=0.0)
    embedder = Embedder(EmbedConfig(provider="hash", batch_size=4), provider)
    rows = embedder.embed([f"t{i}" for i in range(10)])
    assert rows.shape == (10, 8) and [len(b) for b in provider.batches] == [4, 4, 2]
    embedder.stop()


def test_lookup_answers_only_when_every_text_is_cached():
    """The loop's shortcut for a repeated query: None unless all texts are cached (for that
    scope), then the same rows embed gave, counted as a request of cache hits; nothing reaches
    the model."""
    provider = SlowProvider(delay=0.0)
    embedder = Embedder(EmbedConfig(provider="hash"), provider)
    assert embedder.lookup(["a"]) is None and embedder.lookup([]) is None
    first = embedder.embed(["a", "b"], scope=b"t1")
    assert embedder.lookup(["a", "c"], scope=b"t1") is None  # one missing: the caller embeds
    assert embedder.lookup(["a"], scope=b"t2") is None  # another tenant's cache
    before = dict(embedder.stats)
    got = embedder.lookup(["b", "a"], scope=b"t1")
    assert got is not None and np.array_equal(got, first[[1, 0]])
    assert len(provider.batches) == 1
    assert embedder.stats["requests"] == before["requests"] + 1
    assert embedder.stats["cache_hits"] == before["cache_hits"] + 2
    off = Embedder(EmbedConfig(provider="hash", cache_entries=0), SlowProvider(delay=0.0))
    off.embed(["a"])
    assert off.lookup(["a"]) is None
    embedder.stop()
    off.stop()


def test_cache_hits_are_per_scope():
    provider = SlowProvider(delay=0.0)
    embedder = Embedder(EmbedConfig(provider="hash"), provider)
    embedder.embed(["same text"], scope=b"alice")
    embedder.embed(["same text"], scope=b"alice")
    assert len(provider.batches) == 1 and embedder.stats["cache_hits"] == 1
    embedder.embed(["same text"], scope=b"bob")  # another tenant never reads alice's cached entry
    assert len(provider.batches) == 2
    embedder.stop()


def test_a_failed_batch_reaches_every_waiter_and_the_next_batch_works():
    provider = SlowProvider(delay=0.1)
    embedder = Embedder(EmbedConfig(provider="hash", cache_entries=0), provider)
    provider.fail = True
    errors: list[Exception] = []

    def ask(i: int) -> None:
        try:
            embedder.embed([f"x{i}"])
        except EmbeddingError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4 and all("model exploded" in str(e) for e in errors)
    provider.fail = False
    assert embedder.embed(["fine"]).shape == (1, 8)
    assert embedder.info()["embedding_errors"] >= 1
    embedder.stop()


def test_oversized_text_is_refused_before_it_reaches_the_model():
    provider = SlowProvider(delay=0.0)
    embedder = Embedder(EmbedConfig(provider="hash"), provider)
    with pytest.raises(EmbeddingError, match="longer than"):
        embedder.embed(["x" * (MAX_TEXT_BYTES + 1)])
    assert provider.batches == []
    embedder.stop()


def test_disabled_embeddings_say_so():
    embedder = Embedder(EmbedConfig(provider="none"))
    with pytest.raises(EmbeddingError, match="disabled"):
        embedder.embed(["x"])
    embedder.stop()


# -- the OpenAI-compatible provider against a local fake endpoint ---------------------------------


class FakeEndpoint:
    """A tiny OpenAI-compatible /v1/embeddings server on 127.0.0.1 (hash vectors of ``dim``)."""

    def __init__(self, dim: int = 16, key: str = "sk-test") -> None:
        self.dim, self.key = dim, key
        self.requests: list[dict] = []
        self.status = 200
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if self.headers.get("Authorization") != f"Bearer {fake.key}":
                    return self._send(401, {"error": {"message": "bad key"}})
                if fake.status != 200:
                    return self._send(fake.status, {"error": {"message": "overloaded"}})
                dim = body.get("dimensions", fake.dim)
                vectors = HashProvider(dim).embed(body["input"]) * 3.0  # not unit length: the client normalises
                data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
                self._send(200, {"object": "list", "data": data[::-1], "model": body["model"]})

            def _send(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_endpoint():
    fake = FakeEndpoint()
    yield fake
    fake.close()


def test_endpoint_urls():
    assert endpoint("http://h:8000/v1") == ("http", "h", 8000, "/v1/embeddings")
    assert endpoint("https://api.example.com/v1/embeddings/") == ("https", "api.example.com", 443, "/v1/embeddings")
    with pytest.raises(ValueError, match="http"):
        endpoint("ftp://x/v1")


def test_openai_provider_sends_the_standard_request_and_normalises(fake_endpoint):
    provider = OpenAIProvider(fake_endpoint.url, "text-embedding-3-small", api_key="sk-test")
    vectors = provider.embed(["hello world", "goodbye"])
    request = fake_endpoint.requests[-1]
    assert request["path"] == "/v1/embeddings" and request["auth"] == "Bearer sk-test"
    assert request["body"] == {"model": "text-embedding-3-small", "input": ["hello world", "goodbye"],
                               "encoding_format": "float"}
    assert vectors.shape == (2, 16) and provider.dim == 16
    assert np.allclose(vectors, HashProvider(16).embed(["hello world", "goodbye"]), atol=1e-6)  # order by index
    provider.embed(["again"])  # the keep-alive connection is reused
    provider.close()


def test_openai_provider_errors_are_clear(fake_endpoint):
    wrong_key = OpenAIProvider(fake_endpoint.url, "m", api_key="nope")
    with pytest.raises(EmbeddingError, match="HTTP 401"):
        wrong_key.embed(["x"])
    fixed = OpenAIProvider(fake_endpoint.url, "m", api_key="sk-test", dim=8)
    assert fixed.embed(["x"]).shape == (1, 8)
    assert fake_endpoint.requests[-1]["body"]["dimensions"] == 8
    fake_endpoint.dim = 32
    learnt = OpenAIProvider(fake_endpoint.url, "m", api_key="sk-test")
    learnt.embed(["x"])
    fake_endpoint.dim = 24  # the endpoint changed its model under us: an error, not another index width
    with pytest.raises(EmbeddingError, match="24-dim vectors, but this server's embeddings are 32-dim"):
        learnt.embed(["y"])
    fake_endpoint.status = 503
    with pytest.raises(EmbeddingError, match="HTTP 503"):
        fixed.embed(["z"])
    gone = OpenAIProvider("http://127.0.0.1:9/v1", "m")
    with pytest.raises(EmbeddingError, match="did not answer"):
        gone.embed(["x"])


def test_openai_provider_needs_a_url():
    with pytest.raises(ValueError, match="embed-url"):
        OpenAIProvider("", "m")


def test_concurrent_requests_to_an_endpoint_are_batched(fake_endpoint):
    embedder = Embedder(EmbedConfig(provider="openai", url=fake_endpoint.url, api_key="sk-test"))
    threads = [threading.Thread(target=embedder.embed, args=([f"q{i}"],)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sizes = [len(r["body"]["input"]) for r in fake_endpoint.requests]
    assert sum(sizes) == 12 and len(sizes) <= 12
    embedder.stop()
