"""AI.SEMANTIC_CACHE over the wire: the threshold rule at its boundary, scores and workspaces,
tag filters, TTLs, DEL/FLUSH/STATS, PION.STATS counters, its index hidden from FT._LIST and not
displacing a user's, per-tenant entries and ledgers, durability across kill -9, and a clear error
when the server's model makes vectors of another width than the cache holds."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from tests.ai.conftest import connect
from tests.support.servers import ProcessServer

SC = "AI.SEMANTIC_CACHE"


def similarity(client, a: str, b: str) -> float:
    va, vb = (np.frombuffer(x, dtype="<f4") for x in client.execute_command("AI.EMBED", a, b))
    return round(float(va @ vb), 6)


def test_set_then_get_finds_it_again(both):
    assert both.execute_command(SC, "SET", "what is the capital of france", "Paris") in (b"OK", "OK")
    assert both.execute_command(SC, "GET", "what is the capital of france") == b"Paris"
    reply = both.execute_command(SC, "GET", "What is the capital of France", "WITHSCORE")
    assert reply[0] == b"Paris" and float(reply[1]) == 1.0
    assert both.execute_command(SC, "GET", "how do I bake sourdough bread") is None


def test_the_threshold_is_a_similarity_and_a_hit_is_at_least_it(ai):
    ai.execute_command(SC, "SET", "red apple pie recipe", "bake it")
    query = "red apple pie"
    sim = similarity(ai, query, "red apple pie recipe")
    assert 0 < sim < 1
    at = ai.execute_command(SC, "GET", query, "THRESHOLD", repr(sim), "WITHSCORE")
    assert at[0] == b"bake it" and float(at[1]) == sim  # exactly at the threshold: a hit
    above = min(1.0, sim + 1e-6)
    assert ai.execute_command(SC, "GET", query, "THRESHOLD", repr(above)) is None
    assert ai.execute_command(SC, "GET", query, "THRESHOLD", "-1") == b"bake it"
    for bad in ("1.5", "-2", "nan", "x"):
        with pytest.raises(redis.ResponseError, match="THRESHOLD"):
            ai.execute_command(SC, "GET", query, "THRESHOLD", bad)


def test_default_threshold_is_the_servers_and_stats_state_the_rule(make_server):
    srv = make_server(embed_provider="hash", semantic_cache_threshold=0.2)
    client = connect(srv.port)
    client.execute_command(SC, "SET", "red apple pie recipe", "bake it")
    assert client.execute_command(SC, "GET", "red apple") == b"bake it"  # similar enough at 0.2
    stats = dict(zip(*[iter(client.execute_command(SC, "STATS"))] * 2, strict=True))
    assert stats[b"threshold"] == b"0.2" and stats[b"rule"] == b"hit when cosine similarity >= threshold and the verifier accepts the entry"
    assert stats[b"entries"] == 1 and stats[b"dim"] == 384 and stats[b"model"] == b"hash:384"
    client.close()


def test_workspace_explain_and_withworkspace(ai3):
    ai3.execute_command(SC, "SET", "summarise the report", "It is short.", "WORKSPACE", b"\x00\x01blob")
    assert ai3.execute_command(SC, "GET", "summarise the report", "WITHWORKSPACE") == [b"It is short.", b"\x00\x01blob"]
    reply = ai3.execute_command(SC, "GET", "summarise the report", "WITHSCORE", "WITHWORKSPACE")
    assert reply == [b"It is short.", 1.0, b"\x00\x01blob"]  # RESP3: the score is a double
    assert ai3.execute_command(SC, "EXPLAIN", "summarise the report") == b"\x00\x01blob"
    assert ai3.execute_command(SC, "EXPLAIN", "an unrelated question entirely") is None
    ai3.execute_command(SC, "SET", "no workspace here", "x")
    assert ai3.execute_command(SC, "GET", "no workspace here", "WITHWORKSPACE") == [b"x", None]


def test_tags_scope_entries_and_a_filter_needs_every_tag(ai):
    ai.execute_command(SC, "SET", "translate hello", "bonjour", "TAGS", "lang:fr,model:a")
    ai.execute_command(SC, "SET", "translate hello", "hola", "TAGS", "lang:es,model:a")
    assert ai.execute_command(SC, "GET", "translate hello", "FILTER", "lang:fr") == b"bonjour"
    assert ai.execute_command(SC, "GET", "translate hello", "FILTER", "lang:es,model:a") == b"hola"
    assert ai.execute_command(SC, "GET", "translate hello", "FILTER", "lang:de") is None
    assert ai.execute_command(SC, "GET", "translate hello", "FILTER", "lang:fr,lang:es") is None
    assert ai.execute_command(SC, "DEL", "translate hello", "TAGS", "model:a,lang:es") == 1
    assert ai.execute_command(SC, "GET", "translate hello", "FILTER", "model:a") == b"bonjour"


def test_set_again_replaces_and_ttl_expires(ai):
    ai.execute_command(SC, "SET", "q one", "first")
    ai.execute_command(SC, "SET", "q one", "second")
    assert ai.execute_command(SC, "GET", "q one") == b"second"
    assert dict(zip(*[iter(ai.execute_command(SC, "STATS"))] * 2, strict=True))[b"entries"] == 1
    ai.execute_command(SC, "SET", "short lived question", "soon gone", "TTL", "1")
    key = [k for k in ai.keys("__pion:sc:*") if ai.hget(k, "response") == b"soon gone"][0]
    assert 0 < ai.pttl(key) <= 1000
    time.sleep(1.2)
    assert ai.execute_command(SC, "GET", "short lived question") != b"soon gone"
    for bad in ("0", "-1", "x"):
        with pytest.raises(redis.ResponseError, match="TTL"):
            ai.execute_command(SC, "SET", "q", "r", "TTL", bad)


def test_argument_errors(ai):
    with pytest.raises(redis.ResponseError, match="syntax error"):
        ai.execute_command(SC, "GET", "q", "BOGUS")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        ai.execute_command(SC, "SET", "q", "r", "TTL")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        ai.execute_command(SC, "GET", "q", "WITHSCORE", "WITHSCORE")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        ai.execute_command(SC, "SET", "q")
    with pytest.raises(redis.ResponseError, match="unknown subcommand|Unknown subcommand"):
        ai.execute_command(SC, "NOPE", "q")


def test_del_flush_and_pion_stats_counters(ai):
    ai.execute_command("PION.STATS", "RESET")
    ai.execute_command(SC, "SET", "alpha question", "a")
    ai.execute_command(SC, "SET", "alpha question", "a2", "TAGS", "t")
    ai.execute_command(SC, "SET", "beta question", "b")
    ai.execute_command(SC, "GET", "alpha question")
    ai.execute_command(SC, "GET", "something else entirely different")
    ai.execute_command(SC, "EXPLAIN", "beta question")
    stats = dict(zip(*[iter(ai.execute_command("PION.STATS"))] * 2, strict=True))
    assert stats[b"semantic_hits"] == 2 and stats[b"semantic_misses"] == 1
    assert ai.execute_command(SC, "DEL", "alpha question") == 2
    assert ai.execute_command(SC, "DEL", "alpha question") == 0
    assert ai.execute_command(SC, "FLUSH") == 1
    assert ai.execute_command(SC, "GET", "beta question") is None


def test_the_cache_index_is_hidden_and_never_displaces_a_users(ai):
    ai.execute_command("FT.CREATE", "mine", "ON", "HASH", "PREFIX", "1", "m:", "SCHEMA", "t", "TEXT")
    ai.hset("m:1", "t", "hello")
    ai.execute_command(SC, "SET", "q", "r")
    assert ai.execute_command("FT._LIST") == [b"mine"]
    assert ai.execute_command("FT.SEARCH", "mine", "hello")[0] == 1
    with pytest.raises(redis.ResponseError, match="reserved"):
        ai.execute_command("FT.CREATE", "__pion:semcache", "SCHEMA", "t", "TEXT")


def test_entries_and_counters_are_per_tenant(make_server):
    srv = make_server(embed_provider="hash", requirepass="adm", tenants=("alice:apw", "bob:bpw"))
    alice = connect(srv.port, username="alice", password="apw")
    bob = connect(srv.port, username="bob", password="bpw")
    alice.execute_command(SC, "SET", "alice's question", "alice's answer")
    assert alice.execute_command(SC, "GET", "alice's question") == b"alice's answer"
    assert bob.execute_command(SC, "GET", "alice's question", "THRESHOLD", "-1") is None
    assert bob.keys("*") == []
    bob_stats = dict(zip(*[iter(bob.execute_command("PION.STATS"))] * 2, strict=True))
    alice_stats = dict(zip(*[iter(alice.execute_command("PION.STATS"))] * 2, strict=True))
    assert (alice_stats[b"semantic_hits"], bob_stats[b"semantic_hits"], bob_stats[b"semantic_misses"]) == (1, 0, 1)
    alice.close()
    bob.close()


def test_entries_survive_kill9_and_a_model_of_another_width_is_an_error(tmp_path):
    data = tmp_path / "data"
    proc = ProcessServer(data, "--embed-provider", "hash").start()
    client = connect(proc.port)
    client.execute_command(SC, "SET", "durable question", "durable answer", "TAGS", "x")
    proc.kill9()
    proc = ProcessServer(data, "--embed-provider", "hash", port=proc.port).start()
    try:
        client = connect(proc.port)
        assert client.execute_command(SC, "GET", "durable question", "FILTER", "x") == b"durable answer"
    finally:
        proc.stop()
    proc = ProcessServer(data, "--embed-provider", "hash:64", port=proc.port).start()
    try:
        client = connect(proc.port)
        for argv in (("GET", "durable question"), ("SET", "new", "entry")):
            with pytest.raises(redis.ResponseError, match="holds 384-dim vectors but .* makes 64-dim"):
                client.execute_command(SC, *argv)
    finally:
        proc.stop()
