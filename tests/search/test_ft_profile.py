"""FT.PROFILE on Pion (RESP2 and RESP3): the reply's Redis 8 shape, and that the tree's and the
stages' counters are the sizes of what the evaluation produced (``stack_diff_explain.py`` compares
the tree's shape with Redis Stack's; these pin down the counts, which are Pion's own)."""

from __future__ import annotations

import pytest
import redis


def cmd(r, *args):
    return r.execute_command(*args)


def _pairs(flat: list) -> dict:
    """A RESP2 iterator: key/value pairs, then the children after ``Child iterators``."""
    out, i = {}, 0
    while i < len(flat):
        if flat[i] == b"Child iterators" and isinstance(flat[i + 1], list):
            out[b"Child iterators"] = [_pairs(k) for k in flat[i + 1:]]
            break
        value = flat[i + 1]
        out[flat[i]] = _pairs(value) if flat[i] == b"Child iterator" else float(value) if flat[i] == b"Time" else value
        i += 2
    return out


def profile(r, *args):
    """(reply, tree, stages, shard) whatever the protocol; the tree and stages as dicts."""
    got = cmd(r, "FT.PROFILE", *args)
    if isinstance(got, dict):
        shard = got[b"Profile"][b"Shards"][0]
        assert got[b"Profile"][b"Coordinator"] == {}
        return got[b"Results"], shard[b"Iterators profile"][0], shard[b"Result processors profile"], shard
    result, prof = got
    assert prof[0] == b"Shards" and prof[2] == b"Coordinator" and prof[3] == []
    pairs = prof[1][0]
    shard = {p[0]: p[1] if len(p) == 2 else (p[1:] if p[0] == b"Result processors profile" else None)
             for p in pairs}
    stages = [dict(zip(s[::2], s[1::2], strict=True)) for s in shard[b"Result processors profile"]]
    for stage in stages:
        if b"Time" in stage:
            stage[b"Time"] = float(stage[b"Time"])
    return result, _pairs(shard[b"Iterators profile"]), stages, shard


@pytest.fixture
def docs(rr):
    cmd(rr, "FT.CREATE", "i", "ON", "HASH", "PREFIX", "1", "d:", "SCHEMA", "title", "TEXT", "body", "TEXT",
        "tag", "TAG", "n", "NUMERIC")
    rows = [("red apple", "a fruit", "a", 1), ("green pear", "red skin", "b", 2), ("apples", "many red apples", "a", 3),
            ("blue", "nothing", "c", 4), ("red", "red", "b", 5)]
    for k, (title, body, tag, n) in enumerate(rows):
        rr.hset(f"d:{k}", mapping={"title": title, "body": body, "tag": tag, "n": n})
    return rr


def test_counters_are_the_sets_the_evaluation_built(docs):
    _, tree, stages, _ = profile(docs, "i", "SEARCH", "QUERY", "@title:red -@tag:{b}", "NOCONTENT")
    assert tree[b"Type"] == b"INTERSECT" and tree[b"Counter"] == 1  # d:0 (d:4 has tag b)
    red, negation = tree[b"Child iterators"]  # smallest set first: 2 titles say red, NOT b keeps 3
    assert red == {**red, b"Type": b"TEXT", b"Term": b"red", b"Counter": 2, b"Size": 4}  # 4 docs say red anywhere
    assert negation[b"Type"] == b"NOT" and negation[b"Counter"] == 3
    assert negation[b"Child iterator"][b"Type"] == b"TAG" and negation[b"Child iterator"][b"Counter"] == 2
    assert [(s[b"Type"], s[b"Counter"]) for s in stages] == [(b"Index", 1), (b"Scorer", 1), (b"Sorter", 1)]


def test_a_word_is_the_union_of_its_readers(docs):
    _, tree, _, _ = profile(docs, "i", "SEARCH", "QUERY", "apple", "NOCONTENT")
    assert tree[b"Type"] == b"UNION" and tree[b"Query type"] == b"UNION" and tree[b"Counter"] == 2
    readers = {k[b"Term"]: (k[b"Counter"], k[b"Size"]) for k in tree[b"Child iterators"]}
    assert readers == {b"apple": (1, 1), b"+appl": (2, 2)}  # `apples` is indexed under its stem only
    assert tree[b"Time"] >= sum(k[b"Time"] for k in tree[b"Child iterators"]) >= 0.0
    _, limited, _, _ = profile(docs, "i", "SEARCH", "LIMITED", "QUERY", "app*", "NOCONTENT")
    assert limited[b"Query type"] == b"PREFIX - app"
    assert limited[b"Child iterators"] == b"The number of iterators in the union is 2"


def test_numeric_tag_union_and_stages_of_a_page(docs):
    reply, tree, stages, _ = profile(docs, "i", "SEARCH", "QUERY", "@n:[2 4] | @tag:{a|c}", "SORTBY", "n",
                                     "LIMIT", "1", "2")
    assert tree[b"Type"] == b"UNION" and tree[b"Counter"] == 4  # d:0..d:3
    numeric, tags = tree[b"Child iterators"]
    assert (numeric[b"Type"], numeric[b"Term"], numeric[b"Counter"], numeric[b"Size"]) == (b"NUMERIC", b"2 - 4", 3, 3)
    assert tags[b"Query type"] == b"TAG" and [k[b"Counter"] for k in tags[b"Child iterators"]] == [2, 1]
    counts = [(s[b"Type"], s[b"Counter"]) for s in stages]
    assert counts == [(b"Index", 4), (b"Sorter", 3), (b"Pager/Limiter", 2), (b"Loader", 2)]
    assert all(s[b"Time"] >= 0.0 for s in stages)
    total = reply[b"total_results"] if isinstance(reply, dict) else reply[0]
    assert total == 4


def test_aggregate_stages_count_their_rows(docs):
    _, tree, stages, _ = profile(docs, "i", "AGGREGATE", "QUERY", "red", "LOAD", "1", "@n", "APPLY", "@n*2", "AS",
                                 "d", "FILTER", "@d > 3", "GROUPBY", "1", "@tag", "REDUCE", "COUNT", "0", "AS", "c",
                                 "SORTBY", "2", "@c", "DESC", "LIMIT", "0", "1")
    assert tree[b"Counter"] == 4
    assert [(s[b"Type"], s[b"Counter"]) for s in stages] == [
        (b"Index", 4), (b"Loader", 4), (b"Projector - Operator *", 4), (b"Filter - Predicate >", 3),
        (b"Grouper", 2), (b"Sorter", 1)]


def test_knn_is_the_vector_iterator_over_its_filter(rr):
    cmd(rr, "FT.CREATE", "v", "ON", "HASH", "PREFIX", "1", "v:", "SCHEMA", "n", "NUMERIC", "e", "VECTOR", "FLAT", "6",
        "TYPE", "FLOAT32", "DIM", "2", "DISTANCE_METRIC", "L2")
    import struct

    for k in range(6):
        rr.hset(f"v:{k}", mapping={"n": k, "e": struct.pack("<2f", k, 0.0)})
    q = struct.pack("<2f", 0.0, 0.0)
    _, tree, stages, _ = profile(rr, "v", "SEARCH", "QUERY", "(@n:[2 5])=>[KNN 2 @e $q]", "PARAMS", "2", "q", q,
                                 "DIALECT", "2", "NOCONTENT")
    assert tree[b"Type"] == b"VECTOR" and tree[b"Counter"] == 2
    assert tree[b"Child iterator"][b"Type"] == b"NUMERIC" and tree[b"Child iterator"][b"Counter"] == 4
    assert [s[b"Type"] for s in stages] == [b"Index", b"Metrics Applier", b"Scorer", b"Sorter"]


def test_without_the_clock_and_errors(docs):
    cmd(docs, "FT.CONFIG", "SET", "_PRINT_PROFILE_CLOCK", "false")
    try:
        _, tree, stages, shard = profile(docs, "i", "SEARCH", "QUERY", "red", "NOCONTENT")
    finally:
        cmd(docs, "FT.CONFIG", "SET", "_PRINT_PROFILE_CLOCK", "true")
    assert b"Time" not in tree and all(b"Time" not in s for s in stages)
    assert shard.get(b"Total profile time") is None
    with pytest.raises(redis.ResponseError, match="No `SEARCH` or `AGGREGATE` provided"):
        cmd(docs, "FT.PROFILE", "i", "FIND", "QUERY", "x")
    with pytest.raises(redis.ResponseError, match="The QUERY keyword is expected"):
        cmd(docs, "FT.PROFILE", "i", "SEARCH", "LIMITED", "x")
    with pytest.raises(redis.ResponseError, match="does not support cursor"):
        cmd(docs, "FT.PROFILE", "i", "AGGREGATE", "QUERY", "*", "WITHCURSOR")
