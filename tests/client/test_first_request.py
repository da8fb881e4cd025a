"""A worker's first request costs what a steady one does, by default (issue 34).

The fingerprint is hashed in a background thread from construction (the first request waits
only if it is not done, and gets its error); the connection opens at construction; the prefix
sizes a model served are remembered in the user's cache dir and prefaulted by the next worker.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from pion.client import PionPromptCache, allocator, worker_state
from pion.client.adapters import transformers as hf_adapter
from pion.client.namespace import fingerprint_hash
from tests.client.models import hf_llama, prompt

torch = pytest.importorskip("torch")


def test_the_fingerprint_is_hashed_in_the_background_and_the_first_request_waits_for_it(url, monkeypatch):
    release, started = threading.Event(), threading.Event()
    real_digest = hf_adapter.digest

    def slow_digest(*args, **kwargs):
        started.set()
        assert release.wait(30), "the test never released the hash"
        return real_digest(*args, **kwargs)

    monkeypatch.setattr(hf_adapter, "digest", slow_digest)
    model = hf_llama(seed=3)
    pc = PionPromptCache(model, url=url)  # returns while the hash is still blocked
    assert started.wait(30) and not pc._identity.done()
    threading.Timer(0.2, release.set).start()
    ids = prompt(20)
    pc.get_or_prefill(ids)  # waits for the fingerprint, then misses and stores
    assert pc._identity.done() and pc.stats()["fingerprint_wait_ms"] > 0
    assert pc.get_or_prefill(ids) is not None and pc.stats()["hits"] == 1
    # the same identity a synchronous fingerprint gives (another object of the same weights)
    other = hf_llama(seed=3)
    sync = {**hf_adapter.TransformersAdapter(other).fingerprint(), "tokenizer": pc.fingerprint["tokenizer"],
            "adapter": ""}
    assert pc.fp_hash == fingerprint_hash(sync)


def test_an_error_in_the_fingerprint_thread_surfaces_on_the_first_request(url, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("the hash broke")

    monkeypatch.setattr(hf_adapter, "digest", broken)
    pc = PionPromptCache(hf_llama(seed=4), url=url)  # construction does not raise
    with pytest.raises(ValueError, match="the hash broke"):
        pc.get_or_prefill(prompt(12))
    with pytest.raises(ValueError, match="the hash broke"):  # and never serves without a fingerprint
        pc.fetch_nearest(prompt(12))
    assert pc.stats()["hits"] == 0 and pc.stats()["misses"] == 0


def test_the_connection_opens_at_construction(url):
    pc = PionPromptCache(hf_llama(), url=url)
    assert pc.client.redis.connection_pool._created_connections == 1


def read_seen(key: str, want: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # recorded by a daemon thread, off the request path
        if worker_state.seen_tokens(key) >= want:
            break
        time.sleep(0.02)
    return worker_state.seen_tokens(key)


def test_the_next_worker_prefaults_the_largest_prefix_this_model_served(url, tmp_path):
    first = PionPromptCache(hf_llama(), url=url)
    assert first.warmed_bytes == 0  # nothing served yet on this host (the test's own cache dir)
    ids = prompt(40)
    first.get_or_prefill(ids)  # a miss that stores 40 tokens
    assert read_seen(first._seen_key, 40) == 40
    first.get_or_prefill(ids[:10])  # smaller: the record stays
    time.sleep(0.1)
    assert read_seen(first._seen_key, 40) == 40
    data = json.loads((tmp_path / "xdg-cache" / "pion" / "workers.json").read_text())
    assert data["seen"] == {first._seen_key: 40}

    second = PionPromptCache(hf_llama(), url=url)
    if allocator.keep_freed_memory():
        assert second.warmed_bytes == second.warm_up(40) > 0  # the size warm_up_tokens=40 would touch
    assert second.get_or_prefill(ids) is not None and second.stats()["hits"] == 1
    # another shape or codec schema is another key: nothing to prefault
    assert PionPromptCache(hf_llama(num_hidden_layers=2), url=url).warmed_bytes == 0
    assert PionPromptCache(hf_llama(), url=url, vquant="int8").warmed_bytes == 0


def test_a_lost_or_unwritable_state_file_is_only_a_missing_hint(url, tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # the cache dir cannot be made
    assert worker_state.record_seen("k", 10) is False and worker_state.seen_tokens("k") == 0
    pc = PionPromptCache(hf_llama(), url=url)
    assert pc.get_or_prefill(prompt(16)) is not None and pc.warmed_bytes == 0
    good = tmp_path / "good"
    monkeypatch.setenv("XDG_CACHE_HOME", str(good))
    (good / "pion").mkdir(parents=True)
    (good / "pion" / "workers.json").write_text("{not json")
    assert worker_state.seen_tokens("k") == 0 and worker_state.record_seen("k", 10) is True
    assert worker_state.seen_tokens("k") == 10


def test_the_cache_dir_follows_xdg_and_defaults_to_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert worker_state.cache_dir() == tmp_path / "x" / "pion"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert worker_state.cache_dir() == tmp_path / "home" / ".cache" / "pion"
