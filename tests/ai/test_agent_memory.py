"""AI.MEMORY over the wire: ADD (reference reply, ids, deduplication), ADDMANY, RECALL (sessions,
filters, hybrid, recency, thresholds, paging), CONTEXT, GET, FORGET, FORGET_SESSION, STATS, errors;
the index is Pion's own (hidden, not displacing a user's); memories are per tenant and count
against its quota; they survive kill -9 and snapshots; the real model finds paraphrases."""

from __future__ import annotations

import json
import time

import pytest
import redis

from tests.ai.conftest import connect
from tests.support.servers import ProcessServer

M = "AI.MEMORY"


def recall(client, session: str, query: str, *options) -> list[dict]:
    rows = client.execute_command(M, "RECALL", session, query, *options)
    out = []
    for row in rows:
        if isinstance(row, list):  # RESP2: flat key/value pairs
            row = dict(zip(row[::2], row[1::2], strict=True))
        out.append({k.decode(): v for k, v in row.items()})
    return out


def stats(client) -> dict:
    reply = client.execute_command(M, "STATS")
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    return {k.decode(): v for k, v in reply.items()}


def test_add_answers_ok_like_the_reference_and_recall_finds_it(both):
    assert both.execute_command(M, "ADD", "s1", "user", "I love green tea in the morning") in (b"OK", "OK")
    rows = recall(both, "s1", "green tea morning")
    assert [r["content"] for r in rows] == [b"I love green tea in the morning"]
    row = rows[0]
    assert row["session"] == b"s1" and row["role"] == b"user" and row["meta"] == b"{}"
    assert 0 < float(row["similarity"]) <= 1 and 0 < float(row["score"]) <= 1
    assert row["created"] == row["updated"] and row["created"] > 1_700_000_000_000
    assert recall(both, "other-session", "green tea") == []


def test_duplicates_are_not_stored_twice_and_refresh_recency(ai):
    first = ai.execute_command(M, "ADD", "s", "user", "My cat is called Tom", "WITHID")
    key = b"__pion:mem:" + first
    ai.hset(key, "updated", "1000")
    again = ai.execute_command(M, "ADD", "s", "user", "  my CAT is called   tom ", "WITHID")
    assert again == first and int(ai.hget(key, "updated")) > 1_700_000_000_000
    other_role = ai.execute_command(M, "ADD", "s", "assistant", "My cat is called Tom", "WITHID")
    other_session = ai.execute_command(M, "ADD", "t", "user", "My cat is called Tom", "WITHID")
    assert len({first, other_role, other_session}) == 3
    near = ai.execute_command(M, "ADD", "s", "user", "My cat is called Tom!", "DEDUP", "0.95", "WITHID")
    assert near == first  # near-duplicate merging only when asked for
    assert stats(ai)["memories"] == 3 and stats(ai)["dedups"] == 2
    other_user = ai.execute_command(M, "ADD", "s", "user", "My cat is called Tom", "META", '{"user_id": "u2"}', "WITHID")
    assert other_user != first  # another user's identical memory is theirs, not a duplicate of this one
    given = ai.execute_command(M, "ADDMANY", "s", "user", "My cat is called Tom", '{"id": "a"}',
                               "s", "user", "My cat is called Tom", '{"id": "b"}')
    assert given == [b"a", b"b"]  # a given id is stored as given, never folded into another memory


def test_addmany_embeds_a_batch_and_returns_ids(ai):
    ids = ai.execute_command(M, "ADDMANY", "s", "user", "fact one about apples", "",
                             "s", "user", "fact two about pears", json.dumps({"topics": ["fruit"], "id": "pear-1"}),
                             "s", "user", "fact one about apples", "")
    assert len(ids) == 3 and ids[1] == b"pear-1" and ids[2] == ids[0]  # a duplicate within the batch too
    assert ai.info("embedding")["embedding_batches"] == 1
    assert stats(ai)["memories"] == 2
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        ai.execute_command(M, "ADDMANY", "s", "user", "x", "", "s")


def test_recall_filters(ai):
    add = ai.execute_command
    add(M, "ADD", "s", "user", "the project deadline is friday",
        "META", json.dumps({"namespace": "work", "user_id": "ann", "topics": ["deadlines", "project x"],
                            "entities": ["Project X"], "memory_type": "semantic"}))
    add(M, "ADD", "s", "assistant", "the project deadline moved to monday",
        "META", json.dumps({"namespace": "work", "user_id": "bob", "memory_type": "episodic"}))
    add(M, "ADD", "t", "user", "the project deadline is in june", "META", json.dumps({"namespace": "home"}))
    q = "project deadline"
    assert len(recall(ai, "*", q)) == 3 and len(recall(ai, "s", q)) == 2
    assert [r["role"] for r in recall(ai, "s", q, "ROLE", "assistant")] == [b"assistant"]
    assert len(recall(ai, "*", q, "NAMESPACE", "work")) == 2
    assert [r["content"] for r in recall(ai, "*", q, "USER", "ann")] == [b"the project deadline is friday"]
    assert len(recall(ai, "*", q, "TOPICS", "project x,other")) == 1
    assert len(recall(ai, "*", q, "ENTITIES", "Project X")) == 1 and recall(ai, "*", q, "ENTITIES", "project x") == []
    assert len(recall(ai, "*", q, "KIND", "semantic,episodic")) == 2
    assert len(recall(ai, "*", q, "K", "1")) == 1
    everything = recall(ai, "*", q)
    assert recall(ai, "*", q, "K", "1", "OFFSET", "2")[0]["id"] == everything[2]["id"]
    now = int(time.time() * 1000)
    assert len(recall(ai, "*", q, "SINCE", str(now - 60_000), "UNTIL", str(now + 60_000))) == 3
    assert recall(ai, "*", q, "UNTIL", str(now - 60_000)) == []
    assert recall(ai, "*", q, "THRESHOLD", "0.999") == []


def test_hybrid_lifts_an_exact_keyword_and_recency_breaks_ties(ai):
    add = ai.execute_command
    add(M, "ADD", "s", "user", "alpha beta gamma delta")
    add(M, "ADD", "s", "user", "alpha beta gamma zeta42")
    pure = recall(ai, "s", "alpha beta gamma zeta42 delta", "RECENCY", "0")
    hybrid = recall(ai, "s", "zeta42", "HYBRID", "0.9", "RECENCY", "0")
    assert hybrid[0]["content"] == b"alpha beta gamma zeta42" and len(pure) == 2
    assert stats(ai)["hybrid_recalls"] == 1
    old = [r for r in recall(ai, "s", "alpha") if r["content"] == b"alpha beta gamma delta"][0]
    ai.hset(b"__pion:mem:" + old["id"], "updated", str(int(time.time() * 1000) - 365 * 86400_000))
    ranked = recall(ai, "s", "alpha beta gamma", "RECENCY", "0.5", "HALFLIFE", "86400")
    assert ranked[0]["content"] == b"alpha beta gamma zeta42"  # the fresher of two equal matches first


def test_context_get_forget_and_forget_session(ai):
    for i in range(5):
        ai.execute_command(M, "ADD", "chat", "user" if i % 2 == 0 else "assistant", f"turn number {i}")
    ai.execute_command(M, "ADD", "elsewhere", "user", "not in chat")
    assert ai.execute_command(M, "CONTEXT", "chat", "3") == [b"user: turn number 4", b"assistant: turn number 3",
                                                             b"user: turn number 2"]
    assert ai.execute_command(M, "CONTEXT", "chat", "0") == [] and ai.execute_command(M, "CONTEXT", "nope", "5") == []
    row = recall(ai, "chat", "turn number 1")[0]
    got = ai.execute_command(M, "GET", row["id"], "missing-id")
    assert got[1] is None and dict(zip(got[0][::2], got[0][1::2], strict=True))[b"content"] == row["content"]
    assert ai.execute_command(M, "FORGET", row["id"], row["id"], "missing-id") == 1
    assert ai.execute_command(M, "FORGET_SESSION", "chat") == 4
    assert ai.execute_command(M, "CONTEXT", "chat", "10") == [] and stats(ai)["memories"] == 1
    assert stats(ai)["sessions"] == 1 and stats(ai)["forgets"] == 5


def test_argument_errors(ai):
    for argv, match in [
        (("ADD", "*", "user", "x"), "not a session name"),
        (("ADD", "", "user", "x"), "session must be 1 to"),
        (("ADD", "s", "user", "x", "META", "[1]"), "META must be a JSON object"),
        (("ADD", "s", "user", "x", "META", "{bad"), "META must be a JSON object"),
        (("ADD", "s", "user", "x", "META", '{"event_date": "yesterday"}'), "event_date"),
        (("ADD", "s", "user", "x", "ID", "has space"), "memory id"),
        (("ADD", "s", "user", "x", "NOPE"), "syntax error"),
        (("RECALL", "s", "q", "K", "0"), "K must be between"),
        (("RECALL", "s", "q", "HYBRID", "2"), "HYBRID must be between"),
        (("RECALL", "s", "q", "SINCE", "soon"), "SINCE must be epoch"),
        (("CONTEXT", "s", "-1"), "non-negative"),
    ]:
        with pytest.raises(redis.ResponseError, match=match):
            ai.execute_command(M, *argv)


def test_its_index_is_hidden_and_user_indexes_are_untouched(ai):
    ai.execute_command("FT.CREATE", "notes", "ON", "HASH", "PREFIX", "1", "n:", "SCHEMA", "body", "TEXT")
    ai.hset("n:1", "body", "a user document")
    ai.execute_command(M, "ADD", "s", "user", "a memory")
    assert ai.execute_command("FT._LIST") == [b"notes"]
    assert ai.execute_command("FT.SEARCH", "notes", "document")[0] == 1
    assert len(ai.keys("__pion:mem:*")) == 1  # memories are the database's own keys


def test_memories_are_per_tenant_and_count_against_the_quota(make_server):
    srv = make_server(embed_provider="hash", requirepass="adm", tenants=("alice:apw", "bob:bpw:quota=96kb"))
    alice = connect(srv.port, username="alice", password="apw")
    bob = connect(srv.port, username="bob", password="bpw")
    alice.execute_command(M, "ADD", "shared-name", "user", "alice's secret plan")
    assert recall(bob, "shared-name", "secret plan") == [] and recall(bob, "*", "alice") == []
    assert stats(bob)["memories"] == 0 and stats(alice)["memories"] == 1
    assert bob.execute_command(M, "FORGET_SESSION", "shared-name") == 0
    with pytest.raises(redis.exceptions.OutOfMemoryError, match="quota"):
        for i in range(200):  # each memory holds a 1.5 KB vector: the quota is reached
            bob.execute_command(M, "ADD", "s", "user", f"bob memory number {i}")
    assert 10 < stats(bob)["memories"] < 200
    assert recall(alice, "shared-name", "secret plan")[0]["content"] == b"alice's secret plan"
    alice.close()
    bob.close()


def test_memories_survive_kill9_and_a_snapshot_restart(tmp_path):
    data = tmp_path / "data"
    proc = ProcessServer(data, "--embed-provider", "hash").start()
    client = connect(proc.port)
    for i in range(20):
        client.execute_command(M, "ADD", f"s{i % 3}", "user", f"durable fact number {i} about item{i}")
    proc.kill9()
    proc = ProcessServer(data, "--embed-provider", "hash", port=proc.port).start()
    try:
        client = connect(proc.port)
        assert stats(client)["memories"] == 20
        assert recall(client, "s1", "item7")[0]["content"] == b"durable fact number 7 about item7"
        assert client.execute_command(M, "CONTEXT", "s0", "1") == [b"user: durable fact number 18 about item18"]
        client.save()
        client.execute_command(M, "ADD", "s0", "user", "written after the snapshot")
    finally:
        proc.kill9()
    proc = ProcessServer(data, "--embed-provider", "hash", port=proc.port).start()
    try:
        client = connect(proc.port)
        assert stats(client)["memories"] == 21
        assert recall(client, "s0", "written after the snapshot")[0]["content"] == b"written after the snapshot"
    finally:
        proc.stop()


def test_the_real_model_recalls_paraphrases(minilm):
    facts = ["My sister Ana moved to Lisbon last spring.", "I am allergic to peanuts.",
             "Our team standup is at 9:30 every weekday.", "The wifi password at the office is hunter2.",
             "Bob prefers his coffee black with no sugar."]
    minilm.execute_command(M, "ADDMANY", *[x for f in facts for x in ("life", "user", f, "")])
    questions = {"Which city does Ana live in now?": 0, "Can I eat nuts?": 1, "When is the daily meeting?": 2,
                 "How do I get on the internet at work?": 3, "How does Bob take his coffee?": 4}
    for question, expected in questions.items():
        assert recall(minilm, "life", question, "K", "1")[0]["content"] == facts[expected].encode(), question
