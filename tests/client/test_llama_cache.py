"""``PionLlamaCache``: llama-cpp-python's prompt cache in Pion, on the packaged SmolLM2 GGUF.

Real llama.cpp, real model, real server: states stored by one ``Llama`` are loaded by another,
by another process, and after ``kill -9``; another GGUF's states are never loaded.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import llama_cpp  # the [llama] extra, installed by make test
import numpy as np
import pytest

from pion.client.adapters import llama_cache
from pion.client.adapters.llama_cache import STAT_KEYS, PionLlamaCache
from pion.client.adapters.llama_cpp import LlamaCppAdapter, load_smollm2_gguf
from pion.client.prompt_cache import STAT_KEYS as PROMPT_CACHE_KEYS
from pion.client.real_model import gguf_path
from tests.support.servers import ProcessServer

pytestmark = pytest.mark.llama

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = ("You are a support assistant for a shop that sells outdoor gear. Returns are free within 30 days; "
          "used items can be returned only when faulty. Standard delivery takes 3 to 5 working days. ") * 3
PROMPT = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nHow long does delivery take?<|im_end|>\n"
          "<|im_start|>assistant\n")
OTHER_QUESTION = PROMPT.replace("How long does delivery take?", "Can I return used boots?")
OPTIONS = {"n_ctx": 512, "n_threads": 2, "n_batch": 128, "seed": 0}


def new_llama(path: str | None = None, **extra):
    if path is None:
        return load_smollm2_gguf(**OPTIONS, **extra)
    return llama_cpp.Llama(path, verbose=False, **OPTIONS, **extra)


def complete(llm, prompt: str = PROMPT, n: int = 8) -> str:
    return llm.create_completion(prompt, max_tokens=n, temperature=0)["choices"][0]["text"]


@pytest.fixture
def url(tmp_path):
    srv = ProcessServer(tmp_path / "pion").start()
    yield f"pion://127.0.0.1:{srv.port}", srv
    srv.stop()


def test_a_state_stored_by_one_llama_is_loaded_by_another(url):
    url, _ = url
    first = new_llama()
    first.set_cache(PionLlamaCache(first, url=url))
    cold = complete(first)
    assert first.cache.stats()["misses"] == 1 and first.cache.stats()["hits"] == 0
    second = new_llama()
    cache = PionLlamaCache(second, url=url)
    second.set_cache(cache)
    assert complete(second) == cold
    stats = cache.stats()
    assert stats["partial_hits"] == 1 and stats["misses"] == 0 and stats["bytes_fetched"] > 1_000_000
    assert set(STAT_KEYS) <= set(stats) and stats["hit_rate"] == 1.0
    # the counters both caches have are named alike (the prompt cache has more: staging, hybrids)
    assert set(STAT_KEYS) <= set(PROMPT_CACHE_KEYS)
    # a different question shares the system prompt: the stored head is reused, the answer is the model's own
    plain = new_llama()
    assert complete(second, OTHER_QUESTION) == complete(plain, OTHER_QUESTION)
    assert cache.stats()["partial_hits"] == 2


def stored_prompt(url: str):
    """``(llm, cache, tokens)``: PROMPT evaluated and its state stored under exactly its tokens."""
    llm = new_llama()
    cache = PionLlamaCache(llm, url=url)
    tokens = llm.tokenize(PROMPT.encode())
    llm.eval(tokens)
    cache[tokens] = llm.save_state()
    return llm, cache, tokens


def test_exact_keys_contains_keyerror_and_drop(url):
    _, cache, tokens = stored_prompt(url[0])
    assert tokens in cache and cache.stats()["hits"] == 0  # __contains__ loads nothing
    state = cache[tokens]
    assert cache.stats()["hits"] == 1 and state.n_tokens == len(tokens)
    cache[tokens] = state  # create_completion stores the same key again after a hit: no error
    assert cache.stats()["errors"] == 0 and cache[tokens].n_tokens == len(tokens)
    assert state.input_ids[:len(tokens)].tolist() == tokens
    assert [1, 2, 3] not in cache
    with pytest.raises(KeyError):
        cache[[1, 2, 3]]
    assert cache.stats()["misses"] == 1
    assert cache.drop(tokens) and tokens not in cache and cache.cache_size == 0


def test_a_loaded_state_continues_exactly_like_the_original(url):
    url, _ = url
    llm, _, tokens = stored_prompt(url)
    llm.eval([tokens[-1]])
    expected = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
    other = new_llama()
    other.load_state(PionLlamaCache(other, url=url)[tokens])
    assert other.n_tokens == len(tokens)
    other.eval([tokens[-1]])
    got = np.ctypeslib.as_array(other._ctx.get_logits(), shape=(other.n_vocab(),))
    assert np.array_equal(got, expected)


def test_logits_all_keeps_the_scores_exactly(url):
    url, _ = url
    llm = new_llama(logits_all=True)
    cache = PionLlamaCache(llm, url=url)
    tokens = llm.tokenize(b"The lighthouse keeper wrote in the log each night.")
    llm.eval(tokens)
    state = llm.save_state()
    cache[tokens] = state
    back = cache[tokens]
    assert np.array_equal(back.scores, state.scores) and back.scores.shape == (len(tokens), llm.n_vocab())
    assert bytes(back.llama_state) == state.llama_state and back.seed == state.seed


def test_states_are_shared_across_processes_and_survive_kill_9(url, tmp_path):
    url, srv = url
    llm = new_llama()
    llm.set_cache(PionLlamaCache(llm, url=url))
    cold = complete(llm)
    srv.kill9()
    srv.start()
    code = ("import json, sys; from pion.client.adapters.llama_cache import PionLlamaCache; "
            "from pion.client.adapters.llama_cpp import load_smollm2_gguf; "
            f"llm = load_smollm2_gguf(**{OPTIONS!r}); c = PionLlamaCache(llm, url={url!r}); llm.set_cache(c); "
            f"text = llm.create_completion({PROMPT!r}, max_tokens=8, temperature=0)['choices'][0]['text']; "
            "print(json.dumps({'text': text, 'stats': c.stats()}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    reply = json.loads(out.stdout.strip().splitlines()[-1])
    assert reply["text"] == cold and reply["stats"]["partial_hits"] == 1, reply


def test_another_gguf_never_loads_these_states(url, tmp_path):
    url, _ = url
    other_path = tmp_path / "other.gguf"
    shutil.copyfile(gguf_path(), other_path)
    with open(other_path, "r+b") as fh:  # one byte of the last tensor's data: another model
        fh.seek(-3, 2)
        byte = fh.read(1)
        fh.seek(-3, 2)
        fh.write(bytes([byte[0] ^ 0x01]))
    llm, mine, tokens = stored_prompt(url)
    other = new_llama(str(other_path))
    theirs = PionLlamaCache(other, url=url)
    assert theirs.fingerprint["gguf_sha256"] != mine.fingerprint["gguf_sha256"]
    assert tokens not in theirs
    with pytest.raises(KeyError):
        theirs[tokens]
    # a forged entry: this model's state and manifest filed under the other model's namespace
    from pion.client import transfer
    from pion.client.adapters.llama_cpp import LAYOUT, token_rows
    from pion.client.manifest import build_manifest, encode_manifest

    manifest = build_manifest(fingerprint=mine.fingerprint, fp_hash=mine.fp_hash, layout=mine.layout,
                              codecs=mine.schema, token_ids=tokens, block_size=mine.block_size)
    transfer.store(theirs.client, theirs.namespace(tokens), tokens, token_rows(tokens),
                   {LAYOUT.state[0]: mine.adapter.pack(llm.save_state())}, mine.schema, encode_manifest(manifest),
                   mine.block_size, None)
    with pytest.raises(KeyError):
        theirs[tokens]
    assert theirs.stats()["manifest_mismatches"] >= 1 and "another model" in theirs.last_mismatch


def test_context_settings_are_part_of_the_fingerprint():
    a = LlamaCppAdapter(new_llama()).fingerprint()
    b = LlamaCppAdapter(new_llama(type_k=0, type_v=0)).fingerprint()  # an f32 K/V cache (f16 by default)
    assert a["gguf_sha256"] == b["gguf_sha256"] and (a["type_k"], a["type_v"]) != (b["type_k"], b["type_v"])
    assert a["llama_cpp_python"] == llama_cpp.__version__


def test_capacity_bytes_drops_this_caches_oldest_states(url):
    url, _ = url
    llm = new_llama()
    first, second = llm.tokenize(PROMPT.encode()), llm.tokenize(OTHER_QUESTION.encode())
    llm.eval(first)
    one = llm.save_state()
    cache = PionLlamaCache(llm, url=url, capacity_bytes=int(one.llama_state_size * 1.5))
    cache[first] = one
    llm.reset()
    llm.eval(second)
    cache[second] = llm.save_state()
    assert cache.client.kv_manifest(cache.namespace(first)) is None
    assert cache.client.kv_manifest(cache.namespace(second)) is not None
    with pytest.raises(ValueError):
        PionLlamaCache(llm, url=url, capacity_bytes=-1)


def test_an_unreachable_server_degrades_to_plain_prefill():
    llm = new_llama()
    cache = PionLlamaCache(llm, url="pion://127.0.0.1:1")
    llm.set_cache(cache)
    with pytest.warns(RuntimeWarning, match="Pion llama cache"):
        text = complete(llm, n=4)
    assert text and cache.stats()["errors"] >= 1


def test_missing_llama_cpp_names_the_extra(monkeypatch):
    import importlib

    monkeypatch.setitem(sys.modules, "llama_cpp.llama_cache", None)
    with pytest.raises(ImportError, match=r"pion\[llama\]"):
        importlib.reload(llama_cache)
    monkeypatch.undo()
    importlib.reload(llama_cache)


def test_prompt_cache_points_llama_users_to_pion_llama_cache():
    from pion.client import PionPromptCache

    with pytest.raises(TypeError, match="PionLlamaCache"):
        PionPromptCache(new_llama(), url="pion://127.0.0.1:1")
