"""FT.* over the wire in RESP2 and RESP3 (raw replies): shapes, error texts, live indexing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import redis

from tests.support.embedder import DIM, blob


def cmd(r, *args):
    return r.execute_command(*args)


@pytest.fixture
def idx(rr):
    cmd(rr, "FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "title", "TEXT", "WEIGHT", "2",
        "body", "TEXT", "tag", "TAG", "SEPARATOR", ",", "n", "NUMERIC", "SORTABLE", "loc", "GEO",
        "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", str(DIM), "DISTANCE_METRIC", "COSINE")
    docs = [("doc:1", "hello world", "the quick brown fox", "a,b", 10, "-122.41,37.77", "hello world"),
            ("doc:2", "goodbye moon", "jumps over the lazy dog", "b", 20, "-73.98,40.75", "goodbye moon"),
            ("doc:3", "hello moon", "running runners run", "c", 30, "2.35,48.85", "hello moon"),
            ("doc:4", "nothing here", "just words", "a", 40, "13.40,52.52", "just words")]
    for key, title, body, tag, n, loc, text in docs:
        rr.hset(key, mapping={"title": title, "body": body, "tag": tag, "n": n, "loc": loc, "v": blob(text)})
    return rr


def _ids(reply) -> list[bytes]:
    if isinstance(reply, dict):
        return [item[b"id"] for item in reply[b"results"]]
    return [x for x in reply[1:] if isinstance(x, bytes)]


def test_search_reply_shapes(idx):
    reply = cmd(idx, "FT.SEARCH", "idx", "hello", "RETURN", "1", "title", "WITHSCORES")
    if idx.protocol_version == 2:
        assert reply[0] == 2
        assert reply[1] == b"doc:1" and float(reply[2]) > 0 and reply[3] == [b"title", b"hello world"]
    else:
        assert set(reply) == {b"attributes", b"format", b"results", b"total_results", b"warning"}
        assert reply[b"total_results"] == 2 and reply[b"format"] == b"STRING"
        first = reply[b"results"][0]
        assert first[b"id"] == b"doc:1" and isinstance(first[b"score"], float)
        assert first[b"extra_attributes"] == {b"title": b"hello world"} and first[b"values"] == []
    assert cmd(idx, "FT.SEARCH", "idx", "hello", "NOCONTENT") in ([2, b"doc:1", b"doc:3"],) or \
        _ids(cmd(idx, "FT.SEARCH", "idx", "hello", "NOCONTENT")) == [b"doc:1", b"doc:3"]
    counted = cmd(idx, "FT.SEARCH", "idx", "hello", "LIMIT", "0", "0")
    assert (counted == [2]) if idx.protocol_version == 2 else counted[b"total_results"] == 2


def test_query_language(idx):
    def ids(q, *extra):
        return sorted(_ids(cmd(idx, "FT.SEARCH", "idx", q, "NOCONTENT", *extra)))

    assert ids("hello moon") == [b"doc:3"]
    assert ids("hello | moon") == [b"doc:1", b"doc:2", b"doc:3"]
    assert ids("hello -moon") == [b"doc:1"]
    assert ids('"quick brown"') == [b"doc:1"]
    assert ids('"brown quick"') == []
    assert ids("hel*") == [b"doc:1", b"doc:3"]
    assert ids("%helo%") == [b"doc:1", b"doc:3"]
    assert ids("@title:moon") == [b"doc:2", b"doc:3"]
    assert ids("@body:moon") == []
    assert ids("@tag:{a}") == [b"doc:1", b"doc:4"]
    assert ids("@tag:{a|c}") == [b"doc:1", b"doc:3", b"doc:4"]
    assert ids("@n:[20 30]") == [b"doc:2", b"doc:3"]
    assert ids("@n:[(20 30]") == [b"doc:3"]
    assert ids("@n:[-inf (20]") == [b"doc:1"]
    assert ids("@n>=30", "DIALECT", "2") == [b"doc:3", b"doc:4"]
    assert ids("@n==20", "DIALECT", "2") == [b"doc:2"]
    assert ids("@loc:[-122.4 37.7 20 km]") == [b"doc:1"]
    assert ids("run") == [b"doc:3"]  # stemming: runners/running
    assert ids("run", "VERBATIM") == [b"doc:3"]  # the word itself is there too
    assert ids("runs", "VERBATIM") == []
    assert ids("@tag:{$t}", "PARAMS", "2", "t", "b", "DIALECT", "2") == [b"doc:1", b"doc:2"]
    assert ids("(@title:hello) => {$weight: 2.0}", "DIALECT", "2") == [b"doc:1", b"doc:3"]
    assert ids("*") == [b"doc:1", b"doc:2", b"doc:3", b"doc:4"]
    assert ids("-hello", "DIALECT", "2") == [b"doc:2", b"doc:4"]
    assert ids("the") == []  # a stop-word alone matches nothing


def test_knn_and_vector_range(idx):
    reply = cmd(idx, "FT.SEARCH", "idx", "*=>[KNN 2 @v $B AS dist]", "PARAMS", "2", "B", blob("hello moon"),
                "SORTBY", "dist", "RETURN", "1", "dist", "DIALECT", "2")
    assert _ids(reply)[0] == b"doc:3"
    filtered = cmd(idx, "FT.SEARCH", "idx", "(@tag:{a})=>[KNN 5 @v $B]", "PARAMS", "2", "B", blob("hello moon"),
                   "NOCONTENT", "DIALECT", "2")
    assert sorted(_ids(filtered)) == [b"doc:1", b"doc:4"]  # k=5 but only 2 pass the filter
    rng = cmd(idx, "FT.SEARCH", "idx", "@v:[VECTOR_RANGE 0.01 $B]=>{$YIELD_DISTANCE_AS: d}", "PARAMS", "2", "B",
              blob("just words"), "RETURN", "1", "d", "DIALECT", "2")
    assert _ids(rng) == [b"doc:4"]
    with pytest.raises(redis.ResponseError, match="does not match index's expected size"):
        cmd(idx, "FT.SEARCH", "idx", "*=>[KNN 2 @v $B]", "PARAMS", "2", "B", b"abc", "DIALECT", "2")


def test_sortby_limit_and_return_alias(idx):
    reply = cmd(idx, "FT.SEARCH", "idx", "*", "SORTBY", "n", "DESC", "LIMIT", "1", "2", "RETURN", "3", "n", "AS", "num")
    assert _ids(reply) == [b"doc:3", b"doc:2"]
    if idx.protocol_version == 2:
        assert reply[2] == [b"num", b"30"]
    with pytest.raises(redis.ResponseError, match="Property `nope` not loaded nor in schema"):
        cmd(idx, "FT.SEARCH", "idx", "*", "SORTBY", "nope")


def test_errors(idx):
    with pytest.raises(redis.ResponseError, match="^Unknown index name$"):
        cmd(idx, "FT.INFO", "nope")
    with pytest.raises(redis.ResponseError, match="^nope: no such index$"):
        cmd(idx, "FT.SEARCH", "nope", "*")
    with pytest.raises(redis.ResponseError, match="^Index already exists$"):
        cmd(idx, "FT.CREATE", "idx", "SCHEMA", "x", "TEXT")
    with pytest.raises(redis.ResponseError, match="^Syntax error at offset"):
        cmd(idx, "FT.SEARCH", "idx", "(hello")
    with pytest.raises(redis.ResponseError, match="^Unknown argument `BOGUS`"):
        cmd(idx, "FT.SEARCH", "idx", "*", "BOGUS")
    with pytest.raises(redis.ResponseError, match="^No such parameter `missing`"):
        cmd(idx, "FT.SEARCH", "idx", "@tag:{$missing}", "DIALECT", "2")
    with pytest.raises(redis.ResponseError, match="^Duplicate field in schema - a$"):
        cmd(idx, "FT.CREATE", "dup", "SCHEMA", "a", "TEXT", "a", "TAG")
    with pytest.raises(redis.ResponseError, match="cannot create HNSW index without specifying DIM"):
        cmd(idx, "FT.CREATE", "v2", "SCHEMA", "v", "VECTOR", "HNSW", "4", "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2")
    with pytest.raises(redis.ResponseError, match="^Matcher Format: <2 chars algorithm>:<2 chars language>"):
        cmd(idx, "FT.CREATE", "ph", "SCHEMA", "t", "TEXT", "PHONETIC", "dm:de")
    with pytest.raises(redis.ResponseError, match="^No schema found$"):
        cmd(idx, "FT.CREATE", "noschema", "ON", "HASH")
    assert b"dup" not in cmd(idx, "FT._LIST")  # a refused FT.CREATE leaves nothing behind


def test_live_indexing_and_failures(idx):
    idx.hset("doc:5", mapping={"title": "fresh hello", "n": "not-a-number"})
    info = idx.ft("idx").info() if idx.protocol_version == 2 else None
    reply = cmd(idx, "FT.INFO", "idx")
    failures = reply[b"hash_indexing_failures"] if isinstance(reply, dict) else \
        dict(zip(reply[::2], reply[1::2], strict=True))[b"hash_indexing_failures"]
    assert failures == 1
    del info
    idx.hset("doc:5", "n", "5")  # fixed: now indexed
    assert b"doc:5" in _ids(cmd(idx, "FT.SEARCH", "idx", "fresh", "NOCONTENT"))
    idx.hdel("doc:5", "title")
    assert _ids(cmd(idx, "FT.SEARCH", "idx", "fresh", "NOCONTENT")) == []
    idx.rename("doc:1", "doc:9")
    assert _ids(cmd(idx, "FT.SEARCH", "idx", "@tag:{b}", "NOCONTENT", "SORTBY", "n")) == [b"doc:9", b"doc:2"]
    idx.rename("doc:9", "other:1")  # out of the prefix
    assert b"doc:9" not in _ids(cmd(idx, "FT.SEARCH", "idx", "*", "NOCONTENT"))
    idx.delete("doc:2")
    assert _ids(cmd(idx, "FT.SEARCH", "idx", "@tag:{b}", "NOCONTENT")) == []
    idx.pexpire("doc:3", 1)
    import time

    time.sleep(0.05)
    assert b"doc:3" not in _ids(cmd(idx, "FT.SEARCH", "idx", "*", "NOCONTENT"))


def test_info_fields_in_redis_order(idx):
    reply = cmd(idx, "FT.INFO", "idx")
    keys = list(reply) if isinstance(reply, dict) else reply[::2]
    assert keys[:5] == [b"index_name", b"index_options", b"index_definition", b"attributes", b"num_docs"]
    for key in (b"hash_indexing_failures", b"indexing", b"percent_indexed", b"gc_stats", b"cursor_stats",
                b"dialect_stats", b"Index Errors", b"field statistics"):
        assert key in keys
    info = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    definition = info[b"index_definition"]
    if isinstance(reply, dict):  # a map in RESP3, as RediSearch answers (RedisVL normalises either shape)
        assert list(definition.items())[:2] == [(b"key_type", b"HASH"), (b"prefixes", [b"doc:"])]
    else:
        assert definition[:4] == [b"key_type", b"HASH", b"prefixes", [b"doc:"]]  # RedisVL reads it by position
    vector = info[b"attributes"][-1]
    if isinstance(vector, dict):
        assert vector[b"type"] == b"VECTOR" and vector[b"dim"] == DIM and vector[b"flags"] == []
    else:
        assert vector[:6] == [b"identifier", b"v", b"attribute", b"v", b"type", b"VECTOR"]
        assert dict(zip(vector[6::2], vector[7::2], strict=True))[b"distance_metric"] == b"COSINE"
    assert info[b"num_docs"] == 4 and info[b"percent_indexed"] in (1.0, b"1")
    sortable = info[b"attributes"][3]
    assert (b"SORTABLE" in sortable[b"flags"]) if isinstance(sortable, dict) else (b"SORTABLE" in sortable)


def test_list_alias_tagvals_drop(idx):
    assert cmd(idx, "FT._LIST") in ([b"idx"], {b"idx"})
    assert cmd(idx, "FT.ALIASADD", "al", "idx") == b"OK"
    assert sorted(_ids(cmd(idx, "FT.SEARCH", "al", "moon", "NOCONTENT"))) == [b"doc:2", b"doc:3"]
    with pytest.raises(redis.ResponseError, match="Alias already exists"):
        cmd(idx, "FT.ALIASADD", "al", "idx")
    assert cmd(idx, "FT.ALIASUPDATE", "al", "idx") == b"OK"
    assert cmd(idx, "FT.ALIASDEL", "al") == b"OK"
    tags = cmd(idx, "FT.TAGVALS", "idx", "tag")
    assert sorted(tags) == [b"a", b"b", b"c"]
    cmd(idx, "FT.ALTER", "idx", "SCHEMA", "ADD", "extra", "TAG")
    idx.hset("doc:1", "extra", "x")
    assert _ids(cmd(idx, "FT.SEARCH", "idx", "@extra:{x}", "NOCONTENT")) == [b"doc:1"]
    assert cmd(idx, "FT.DROPINDEX", "idx", "DD") == b"OK"
    assert idx.exists("doc:1", "doc:2") == 0
    assert cmd(idx, "FT._LIST") in ([], set())


def test_explain(idx):
    text = cmd(idx, "FT.EXPLAIN", "idx", "hello -(moon|world)", "DIALECT", "2")
    assert b"INTERSECT" in text and b"NOT" in text and b"UNION" in text
    cli = cmd(idx, "FT.EXPLAINCLI", "idx", "@n:[1 2]")
    assert cli[0].startswith(b"NUMERIC")


def test_json_index(rr):
    cmd(rr, "FT.CREATE", "jidx", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA", "$.name", "AS", "name", "TEXT",
        "$.tags[*]", "AS", "tags", "TAG", "$.price", "AS", "price", "NUMERIC", "$.v", "AS", "v", "VECTOR", "FLAT", "6",
        "TYPE", "FLOAT32", "DIM", "3", "DISTANCE_METRIC", "L2")
    rr.json().set("j:1", "$", {"name": "red shoe", "tags": ["new", "sale"], "price": 10, "v": [1, 0, 0]})
    rr.json().set("j:2", "$", {"name": "blue shoe", "tags": ["old"], "price": 20, "v": [0, 1, 0]})
    rr.json().set("j:3", "$", {"name": "green hat", "tags": "sale", "price": "nope", "v": [0, 0, 1]})  # bad price
    assert sorted(_ids(cmd(rr, "FT.SEARCH", "jidx", "shoe", "NOCONTENT"))) == [b"j:1", b"j:2"]
    assert _ids(cmd(rr, "FT.SEARCH", "jidx", "@tags:{sale}", "NOCONTENT")) == [b"j:1"]
    reply = cmd(rr, "FT.SEARCH", "jidx", "@price:[15 25]", "RETURN", "2", "name", "$.tags")
    if rr.protocol_version == 2:
        assert reply[2] == [b"name", b"blue shoe", b"$.tags", b'["old"]']
    knn = cmd(rr, "FT.SEARCH", "jidx", "*=>[KNN 1 @v $B AS d]", "PARAMS", "2", "B",
              np.array([0.9, 0.1, 0], dtype=np.float32).tobytes(), "RETURN", "1", "d", "DIALECT", "2")
    assert _ids(knn) == [b"j:1"]
    whole = cmd(rr, "FT.SEARCH", "jidx", "@name:blue")
    doc = whole[2] if rr.protocol_version == 2 else list(whole[b"results"][0][b"extra_attributes"].items())
    assert (doc[0] == b"$") if rr.protocol_version == 2 else doc[0][0] == b"$"
    rr.json().set("j:1", "$.price", 50)
    assert _ids(cmd(rr, "FT.SEARCH", "jidx", "@price:[40 60]", "NOCONTENT")) == [b"j:1"]


def test_search_json_number_formatting_matches_redisearch(idx):
    reply = cmd(idx, "FT.SEARCH", "idx", "*=>[KNN 1 @v $B AS d]", "PARAMS", "2", "B", blob("hello world"),
                "RETURN", "1", "d", "DIALECT", "2")
    value = reply[2][1] if idx.protocol_version == 2 else reply[b"results"][0][b"extra_attributes"][b"d"]
    assert len(value) <= 14 and math.isclose(float(value), 0.0, abs_tol=1e-6)  # %.12g, or an integer


def test_pion_owned_indexes_are_separate(server):
    r = redis.Redis(port=server.port, protocol=2)
    with pytest.raises(redis.ResponseError, match="reserved for Pion's own indexes"):
        r.execute_command("FT.CREATE", "__pion:mem", "SCHEMA", "t", "TEXT")
    engine = server.server.parts.search
    db = server.server.dbs[0]
    server.call(engine.create, db, [b"FT.CREATE", b"__pion:mem", b"PREFIX", b"1", b"mem:", b"SCHEMA", b"t", b"TEXT"], True)
    r.execute_command("FT.CREATE", "mem", "PREFIX", "1", "mem:", "SCHEMA", "t", "TEXT")
    r.hset("mem:1", "t", "remember this")
    assert r.execute_command("FT._LIST") == [b"mem"]  # the internal index is not listed
    assert r.execute_command("FT.SEARCH", "__pion:mem", "remember", "NOCONTENT") == [1, b"mem:1"]
    assert r.execute_command("FT.SEARCH", "mem", "remember", "NOCONTENT") == [1, b"mem:1"]


def test_temporary_index_expires_when_idle(server):
    import time

    r = redis.Redis(port=server.port, protocol=2)
    r.execute_command("FT.CREATE", "tmp", "TEMPORARY", "1", "SCHEMA", "t", "TEXT")
    assert r.execute_command("FT.DEBUG", "TTL", "tmp") in (0, 1)
    r.hset("x", "t", "hello")
    assert r.execute_command("FT.SEARCH", "tmp", "hello", "NOCONTENT") == [1, b"x"]
    deadline = time.time() + 10
    while b"tmp" in r.execute_command("FT._LIST") and time.time() < deadline:
        time.sleep(0.2)
    assert r.execute_command("FT._LIST") == []
