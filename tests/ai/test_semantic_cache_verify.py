"""AI.SEMANTIC_CACHE GET/EXPLAIN ... VERIFY off|lexical|model ... WITHREASON over the wire: the verifier
refuses the reversed question a vector match alone serves, the next candidate above the threshold
that it accepts is the hit, the reason says why, the server's default is ``semantic-cache-verify``,
and model mode asks the embedding model in a second stage (a clear error on a server without one).

The ``hash`` provider's vectors are bags of words, so "Convert 10 km to miles" and "Convert 10
miles to km" are the same vector there (similarity 1.0): the plainest case of what the verifier is for."""

from __future__ import annotations

import pytest
import redis

SC = "AI.SEMANTIC_CACHE"


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def test_the_reversed_question_is_refused_and_verify_off_serves_it(both):
    both.execute_command(SC, "SET", "Convert 10 km to miles", "6.21 miles")
    served, score = both.execute_command(SC, "GET", "Convert 10 miles to km", "WITHSCORE", "VERIFY", "off")
    assert served == b"6.21 miles" and float(score) == 1.0  # the vector match alone: same words, similarity 1
    assert both.execute_command(SC, "GET", "Convert 10 miles to km") is None  # the default verifies
    assert both.execute_command(SC, "GET", "Convert 10 miles to km", "VERIFY", "LEXICAL") is None
    assert both.execute_command(SC, "GET", "convert 10 km to miles") == b"6.21 miles"


def test_withreason_says_why_on_a_refusal_a_hit_and_a_miss(both):
    both.execute_command(SC, "SET", "Convert 10 km to miles", "6.21 miles")
    refused = both.execute_command(SC, "GET", "Convert 10 miles to km", "WITHREASON")
    assert refused[0] is None and len(refused) == 2
    reason = _text(refused[1])
    assert reason.startswith("miss: refused 'Convert 10 km to miles' (1.0000) order:") and "'km'" in reason
    hit = both.execute_command(SC, "GET", "convert 10 km to miles", "WITHSCORE", "WITHWORKSPACE", "WITHREASON")
    assert hit[0] == b"6.21 miles" and float(hit[1]) == 1.0 and hit[2] is None
    assert _text(hit[3]).startswith("hit: verified (lexical)")
    off = both.execute_command(SC, "GET", "Convert 10 miles to km", "VERIFY", "off", "WITHREASON")
    assert off[0] == b"6.21 miles" and _text(off[1]).startswith("hit: verify off")
    below = both.execute_command(SC, "GET", "an unrelated question about bread", "WITHSCORE", "WITHREASON")
    assert below[:2] == [None, None] and "< threshold 0.85" in _text(below[2])
    none = both.execute_command(SC, "GET", "Convert 10 km to miles", "FILTER", "nosuchtag", "WITHREASON")
    assert none == [None, b"miss: the cache has no entry (with these tags)"] or \
        none == [None, "miss: the cache has no entry (with these tags)"]


def test_the_next_candidate_the_verifier_accepts_is_the_hit(ai):
    ai.execute_command(SC, "SET", "Convert 10 miles to km", "16.09 km")
    ai.execute_command(SC, "SET", "how many miles are 10 km", "6.21 miles")
    reply = ai.execute_command(SC, "GET", "Convert 10 km to miles", "THRESHOLD", "0.5", "WITHREASON")
    assert reply[0] == b"6.21 miles"
    assert "refused first: 'Convert 10 miles to km'" in reply[1].decode()
    # without verification the nearest (the reversed one) is served
    assert ai.execute_command(SC, "GET", "Convert 10 km to miles", "THRESHOLD", "0.5", "VERIFY", "off") == b"16.09 km"


def test_each_category_refuses_over_the_wire(ai):
    pairs = [("When does the store on Main Street close?", "When does the store on Main Street open?", "operator"),
             ("What is the weather in Paris tomorrow?", "What is the weather in Paris today?", "time"),
             ("What is 2 + 2?", "What is 2 + 3?", "numbers"),
             ("Is it safe to eat raw eggs?", "Is it not safe to eat raw eggs?", "negation")]
    for cached, query, category in pairs:
        ai.execute_command(SC, "SET", cached, "cached answer")
        reply = ai.execute_command(SC, "GET", query, "THRESHOLD", "0.3", "WITHREASON")
        assert reply[0] is None and f") {category}:" in reply[1].decode(), (query, reply)


def test_explain_verifies_too(ai):
    ai.execute_command(SC, "SET", "Convert 10 km to miles", "6.21 miles", "WORKSPACE", b"ws")
    assert ai.execute_command(SC, "EXPLAIN", "convert 10 km to miles") == b"ws"
    assert ai.execute_command(SC, "EXPLAIN", "Convert 10 miles to km") is None
    assert ai.execute_command(SC, "EXPLAIN", "Convert 10 miles to km", "VERIFY", "off") == b"ws"
    reply = ai.execute_command(SC, "EXPLAIN", "Convert 10 miles to km", "WITHREASON")
    assert reply[0] is None and b"order:" in reply[1]


def test_bad_verify_arguments_are_errors_that_change_nothing(ai):
    ai.execute_command(SC, "SET", "Convert 10 km to miles", "6.21 miles")
    with pytest.raises(redis.ResponseError, match="VERIFY must be off, lexical or model"):
        ai.execute_command(SC, "GET", "Convert 10 km to miles", "VERIFY", "fuzzy")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        ai.execute_command(SC, "GET", "Convert 10 km to miles", "VERIFY")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        ai.execute_command(SC, "GET", "Convert 10 km to miles", "WITHREASON", "WITHREASON")
    # the hash provider is no model: VERIFY model says so instead of pretending
    with pytest.raises(redis.ResponseError, match="VERIFY model needs a semantic embedding model.*hash:384"):
        ai.execute_command(SC, "GET", "Convert 10 km to miles", "VERIFY", "model")
    stats = dict(zip(*[iter(ai.execute_command(SC, "STATS"))] * 2, strict=True))
    assert stats[b"entries"] == 1 and stats[b"verify"] == b"lexical"
    assert int(stats[b"semantic_hits"]) == 0 and int(stats[b"semantic_misses"]) == 0


def test_the_servers_default_is_semantic_cache_verify(ai):
    ai.execute_command(SC, "SET", "Convert 10 km to miles", "6.21 miles")
    assert ai.config_get("semantic-cache-verify") == {"semantic-cache-verify": "lexical"}
    ai.config_set("semantic-cache-verify", "off")
    assert ai.execute_command(SC, "GET", "Convert 10 miles to km") == b"6.21 miles"
    assert ai.execute_command(SC, "GET", "Convert 10 miles to km", "VERIFY", "lexical") is None
    with pytest.raises(redis.ResponseError):
        ai.config_set("semantic-cache-verify", "sometimes")
    assert ai.config_get("semantic-cache-verify") == {"semantic-cache-verify": "off"}
    ai.config_set("semantic-cache-verify", "lexical")
    assert ai.execute_command(SC, "GET", "Convert 10 miles to km") is None


def test_model_mode_asks_the_servers_model(minilm):
    minilm.execute_command(SC, "SET", "How much does a new car cost in Germany?", "about 40000 euros")
    minilm.execute_command(SC, "SET", "How do I clean a leather sofa at home?", "saddle soap")
    synonym = "How much does a new automobile cost in Germany?"
    assert minilm.execute_command(SC, "GET", synonym, "THRESHOLD", "0.5", "VERIFY", "lexical") is None
    hit = minilm.execute_command(SC, "GET", synonym, "THRESHOLD", "0.5", "VERIFY", "model", "WITHREASON")
    assert hit[0] == b"about 40000 euros" and hit[1].startswith(b"hit: verified (model)")
    other = minilm.execute_command(SC, "GET", "How do I clean a leather jacket at home?", "THRESHOLD", "0.5",
                                   "VERIFY", "model", "WITHREASON")
    assert other[0] is None and b"substitution: 'jacket' of the query has no counterpart" in other[1]
    # the lexical checks still refuse first in model mode
    minilm.execute_command(SC, "SET", "Convert 10 km to miles", "6.21 miles")
    reversed_ = minilm.execute_command(SC, "GET", "Convert 10 miles to km", "VERIFY", "model", "WITHREASON")
    assert reversed_[0] is None and b"order:" in reversed_[1]
    # in a pipeline the connection's replies stay in order across the second stage
    pipe = minilm.pipeline(transaction=False)
    pipe.execute_command(SC, "GET", synonym, "THRESHOLD", "0.5", "VERIFY", "model")
    pipe.ping()
    pipe.execute_command(SC, "GET", "How much does a new car cost in Germany?")
    assert pipe.execute() == [b"about 40000 euros", True, b"about 40000 euros"]


def test_the_start_flag_sets_the_default_and_refuses_a_bad_mode():
    from pion.cli.server_main import build_settings
    from pion.config import ConfigError

    assert build_settings([]).semantic_cache_verify == "lexical"
    assert build_settings(["--semantic-cache-verify", "model"]).semantic_cache_verify == "model"
    with pytest.raises(ConfigError, match="semantic-cache-verify must be off, lexical or model"):
        build_settings(["--semantic-cache-verify", "maybe"])
