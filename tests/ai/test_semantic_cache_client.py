"""``PionSemanticCache``: get/set, the decorator on sync and async LLM calls, and one threshold
rule on every path (the sync and async methods send the same number and hit on the same
similarity; the anchors' two paths disagreed: redis-vl-python#407, langchain-redis#98)."""

from __future__ import annotations

import asyncio

import pytest

from pion.client.errors import PionError
from pion.client.semantic_cache import PionSemanticCache


@pytest.fixture
def cache(hashed):
    c = PionSemanticCache(f"pion://127.0.0.1:{hashed.port}")
    yield c
    c.close()


def test_set_get_lookup_delete_and_stats(cache):
    assert cache.get("capital of france") is None
    cache.set("capital of france", "Paris", tags=["geo"])
    hit = cache.lookup("capital of france")
    assert hit.response == "Paris" and hit.similarity == pytest.approx(1.0)
    assert cache.get("capital of france", tags=["geo"]) == "Paris"
    assert cache.get("capital of france", tags=["other"]) is None
    assert cache.delete("capital of france") == 1 and cache.get("capital of france") is None
    stats = cache.stats()
    assert int(stats["semantic_hits"]) >= 2 and int(stats["semantic_misses"]) >= 2
    assert stats["rule"] == "hit when cosine similarity >= threshold and the verifier accepts the entry"


def test_sync_and_async_hit_on_the_same_similarity(cache):
    cache.set("the quick brown fox jumps", "answer")
    # the threshold rule alone (VERIFY off): the verifier would refuse "jumps" swapped for "sleeps"
    similarity = cache.lookup("the quick brown fox sleeps", threshold=-1, verify="off").similarity
    assert 0 < similarity < 1

    async def async_side(threshold):
        return await cache.aget("the quick brown fox sleeps", threshold=threshold, verify="off")

    for threshold in (similarity - 1e-6, similarity + 1e-6):
        sync_hit = cache.get("the quick brown fox sleeps", threshold=threshold, verify="off")
        async_hit = asyncio.run(async_side(threshold))
        assert sync_hit == async_hit == ("answer" if threshold <= similarity else None)
    # the sync and async paths build the same command, number unchanged
    assert cache._get_args("p", 0.8, None) == ["AI.SEMANTIC_CACHE", "GET", "p", "WITHSCORE", "WITHWORKSPACE", "WITHREASON",
                                                "THRESHOLD", "0.8"]


def test_the_decorator_calls_the_llm_only_on_a_miss(cache):
    calls = []

    @cache.cached
    def ask(prompt: str) -> str:
        calls.append(prompt)
        return f"answer {len(calls)}"

    assert ask("what is the boiling point of water") == "answer 1"
    assert ask("what is the boiling point of water") == "answer 1" and calls == ["what is the boiling point of water"]

    @cache.cached(prompt_arg="question", tags=["chem"])
    async def ask_async(model: str, question: str) -> str:
        calls.append(question)
        return "async answer"

    async def twice():
        return [await ask_async("m", question="which gas do plants take in"),
                await ask_async("m", question="which gas do plants take in")]

    assert asyncio.run(twice()) == ["async answer", "async answer"] and len(calls) == 2


def test_bad_arguments_are_errors(cache):
    with pytest.raises(ValueError, match="cosine similarity"):
        PionSemanticCache(threshold=2)
    with pytest.raises(ValueError, match="comma"):
        cache.set("p", "r", tags=["a,b"])
    with pytest.raises(PionError, match="THRESHOLD"):
        cache.get("p", threshold=5)


def test_decide_returns_the_servers_reason_and_verify_is_passed_through(cache, hashed):
    cache.set("Convert 10 km to miles", "6.21 miles")
    refused = cache.decide("Convert 10 miles to km")
    assert refused.hit is None and refused.reason.startswith("miss: refused") and "order:" in refused.reason
    assert cache.get("Convert 10 miles to km") is None
    served = cache.decide("Convert 10 miles to km", verify="off")
    assert served.hit.response == "6.21 miles" and served.hit.reason == served.reason == \
        "hit: verify off, similarity 1.0000"
    hit = cache.lookup("convert 10 km to miles")
    assert hit.response == "6.21 miles" and hit.reason.startswith("hit: verified (lexical)")
    # the constructor's default, and the per-call override
    unverified = PionSemanticCache(f"pion://127.0.0.1:{hashed.port}", verify="off")
    try:
        assert unverified.get("Convert 10 miles to km") == "6.21 miles"
        assert unverified.get("Convert 10 miles to km", verify="lexical") is None
        assert unverified._get_args("p", None, None) == ["AI.SEMANTIC_CACHE", "GET", "p", "WITHSCORE",
                                                         "WITHWORKSPACE", "WITHREASON", "VERIFY", "off"]
    finally:
        unverified.close()

    async def async_side():
        return await cache.adecide("Convert 10 miles to km"), await cache.aget("Convert 10 miles to km", verify="off")

    decision, answer = asyncio.run(async_side())
    assert decision.hit is None and "order:" in decision.reason and answer == "6.21 miles"


def test_a_bad_verify_mode_is_a_value_error_before_any_io(hashed):
    with pytest.raises(ValueError, match="verify must be one of off, lexical, model"):
        PionSemanticCache(f"pion://127.0.0.1:{hashed.port}", verify="fuzzy")
    cache = PionSemanticCache(f"pion://127.0.0.1:{hashed.port}")
    try:
        with pytest.raises(ValueError, match="verify must be one of"):
            cache.get("anything", verify="maybe")
        with pytest.raises(PionError, match="VERIFY model needs a semantic embedding model"):
            cache.get("anything", verify="model")
    finally:
        cache.close()
