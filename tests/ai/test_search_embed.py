"""FT indexes with vector fields the server computes from text (``VECTOR ... EMBED field``) and
FT.SEARCHTEXT: text alone is stored and searched; existing documents get vectors; a changed text
gets a new vector, a removed text loses it, a client's own vector is kept; width mismatches are
indexing failures with the reason; the vectors are durable; refusals are clear."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from tests.ai.conftest import connect
from tests.support.servers import ProcessServer

SCHEMA = ("body", "TEXT", "tag", "TAG", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "384",
          "DISTANCE_METRIC", "COSINE", "EMBED", "body")


def create(client, name="docs", prefix="doc:", schema=SCHEMA):
    assert client.execute_command("FT.CREATE", name, "ON", "HASH", "PREFIX", "1", prefix, "SCHEMA", *schema)


def wait_for(predicate, timeout: float = 20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


def embedding(client, text: str) -> bytes:
    return client.execute_command("AI.EMBED", text)[0]


def test_text_alone_is_stored_and_searched(both):
    both.hset("doc:0", "body", "a document written before the index")
    create(both)
    both.hset("doc:1", mapping={"body": "the cat sat on the mat", "tag": "pets"})
    both.hset("doc:2", mapping={"body": "stock markets fell sharply", "tag": "money"})
    for key, text in (("doc:0", "a document written before the index"), ("doc:1", "the cat sat on the mat")):
        assert wait_for(lambda k=key: both.hget(k, "v")) == embedding(both, text)
    reply = both.execute_command("FT.SEARCHTEXT", "docs", "cat on a mat", "K", "1", "RETURN", "1", "body")
    if isinstance(reply, dict):  # RESP3
        assert reply[b"total_results"] == 1 and reply[b"results"][0][b"id"] == b"doc:1"
    else:
        assert reply[:2] == [1, b"doc:1"] and reply[2] == [b"body", b"the cat sat on the mat"]
    filtered = both.execute_command("FT.SEARCHTEXT", "docs", "cat on a mat", "K", "5", "FILTER", "@tag:{money}")
    ids = [r[b"id"] for r in filtered[b"results"]] if isinstance(filtered, dict) else filtered[1::2]
    assert ids == [b"doc:2"]


def test_a_changed_text_gets_a_new_vector_and_a_removed_one_loses_it(ai):
    create(ai)
    ai.hset("doc:1", "body", "first version of the text")
    wait_for(lambda: ai.hget("doc:1", "v") == embedding(ai, "first version of the text"))
    ai.hset("doc:1", "body", "completely different words now")
    wait_for(lambda: ai.hget("doc:1", "v") == embedding(ai, "completely different words now"))
    ai.hdel("doc:1", "body")
    wait_for(lambda: ai.hget("doc:1", "v") is None)
    own = np.ones(384, dtype="<f4").tobytes()
    ai.hset("doc:2", mapping={"body": "my own vector please", "v": own})
    ai.hset("doc:3", "body", "a neighbour to wait for")
    wait_for(lambda: ai.hget("doc:3", "v"))
    assert ai.hget("doc:2", "v") == own  # the client's own vector is never replaced


def test_a_width_the_model_does_not_make_is_an_indexing_failure(ai):
    create(ai, "small", "s:", ("body", "TEXT", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "8",
                                "DISTANCE_METRIC", "COSINE", "EMBED", "body"))
    ai.hset("s:1", "body", "hello")

    def failure():
        info = ai.execute_command("FT.INFO", "small")
        return info[info.index(b"hash_indexing_failures") + 1]

    wait_for(lambda: failure() >= 1)
    info = ai.execute_command("FT.INFO", "small")
    assert b"makes 384-dim vectors but field v has DIM 8" in repr(info).encode()
    with pytest.raises(redis.ResponseError, match="has DIM 8 but this server's embedding model makes 384-dim"):
        ai.execute_command("FT.SEARCHTEXT", "small", "hello")


def test_searchtext_errors(ai):
    create(ai, "plain", "p:", ("body", "TEXT"))
    with pytest.raises(redis.ResponseError, match="no EMBED vector field"):
        ai.execute_command("FT.SEARCHTEXT", "plain", "hello")
    with pytest.raises(redis.ResponseError, match="no such index"):
        ai.execute_command("FT.SEARCHTEXT", "nope", "hello")
    create(ai)
    with pytest.raises(redis.ResponseError, match="not an EMBED vector field"):
        ai.execute_command("FT.SEARCHTEXT", "docs", "hello", "FIELD", "body")
    with pytest.raises(redis.ResponseError, match="K must be"):
        ai.execute_command("FT.SEARCHTEXT", "docs", "hello", "K", "0")
    with pytest.raises(redis.ResponseError, match="unknown FT.SEARCHTEXT argument"):
        ai.execute_command("FT.SEARCHTEXT", "docs", "hello", "BOGUS")
    with pytest.raises(redis.ResponseError, match="EMBED vector fields are computed on HASH"):
        ai.execute_command("FT.CREATE", "j", "ON", "JSON", "SCHEMA", "$.v", "AS", "v", "VECTOR", "FLAT", "6", "TYPE",
                           "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "COSINE", "EMBED", "body")
    with pytest.raises(redis.ResponseError, match="EMBED requires"):
        ai.execute_command("FT.CREATE", "k", "SCHEMA", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "4",
                           "DISTANCE_METRIC", "COSINE", "EMBED")


def test_computed_vectors_are_durable(tmp_path):
    data = tmp_path / "data"
    proc = ProcessServer(data, "--embed-provider", "hash").start()
    client = connect(proc.port)
    create(client)
    client.hset("doc:1", "body", "durable text")
    vector = wait_for(lambda: client.hget("doc:1", "v"))
    proc.kill9()
    proc = ProcessServer(data, "--embed-provider", "hash", port=proc.port).start()
    try:
        client = connect(proc.port)
        assert client.hget("doc:1", "v") == vector
        assert client.execute_command("FT.SEARCHTEXT", "docs", "durable text", "K", "1")[1] == b"doc:1"
        assert client.info("embedding")["embedding_auto_embedded"] == 0  # nothing was computed again
    finally:
        proc.stop()
