"""FT.CONFIG MAXSEARCHRESULTS on Pion's own paths: the differential case (``stack_diff.py``,
``max_search_results``) compares the replies with RediSearch's; these check what Stack cannot
show, that a KNN query whose plan was cached under one cap is checked again under another."""

from __future__ import annotations

import numpy as np
import pytest
import redis


def _knn(r, limit: str):
    q = np.array([1.0, 0.0], dtype=np.float32).tobytes()
    return r.execute_command("FT.SEARCH", "m", "*=>[KNN 3 @v $q]", "PARAMS", "2", "q", q, "NOCONTENT",
                             "LIMIT", "0", limit, "DIALECT", "2")


@pytest.fixture
def indexed(r):
    r.execute_command("FT.CREATE", "m", "PREFIX", "1", "m:", "SCHEMA", "v", "VECTOR", "FLAT", "6", "TYPE",
                      "FLOAT32", "DIM", "2", "DISTANCE_METRIC", "L2")
    for i in range(5):
        r.hset(f"m:{i}", "v", np.array([1.0, float(i)], dtype=np.float32).tobytes())
    yield r
    r.execute_command("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "1000000")


def test_a_cached_knn_plan_is_checked_again_under_a_new_cap(indexed):
    r = indexed
    assert _knn(r, "3")[0] == 3 and len(_knn(r, "3")) == 4  # twice: the second from the cached plan
    r.execute_command("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "2")
    with pytest.raises(redis.ResponseError, match="^LIMIT exceeds maximum of 2$"):
        _knn(r, "3")
    assert _knn(r, "2") == [3, b"m:0", b"m:1"]
    r.execute_command("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "1000000")
    assert _knn(r, "3") == [3, b"m:0", b"m:1", b"m:2"]


def test_the_default_page_is_cut_to_the_cap_and_a_count_is_never_refused(indexed):
    r = indexed
    r.execute_command("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "2")
    assert len(r.execute_command("FT.SEARCH", "m", "*", "NOCONTENT")) == 3  # the total and 2 ids
    assert r.execute_command("FT.SEARCH", "m", "*", "LIMIT", "100", "0") == [5]


def _plans(server):
    engine = server.server.parts.search
    return next(i for (_, name), i in engine.indexes.items() if name == "m").knn_plans


@pytest.mark.parametrize("cap", ["2", "-1"])
def test_a_knn_plan_is_cached_under_any_cap_and_kept_apart_per_cap(server, indexed, cap):
    r = indexed
    r.execute_command("FT.CONFIG", "SET", "MAXSEARCHRESULTS", cap)
    assert _knn(r, "2") == [3, b"m:0", b"m:1"]
    assert len(_plans(server)) == 1  # the fast path's plan, made under this cap
    assert _knn(r, "2") == [3, b"m:0", b"m:1"]  # answered from it
    r.execute_command("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "1")
    with pytest.raises(redis.ResponseError, match="^LIMIT exceeds maximum of 1$"):
        _knn(r, "2")  # the plan of the other cap is not reused
    assert _knn(r, "1") == [3, b"m:0"]
    assert len(_plans(server)) == 2


def _aggregate_ids(r, *extra):
    return r.execute_command("FT.AGGREGATE", "m", "*", "LOAD", "1", "@__key", "SORTBY", "2", "@__key", "ASC",
                             *extra)


def test_a_cursor_lives_no_longer_than_cursor_max_idle(indexed):
    import time

    r = indexed
    r.execute_command("FT.CONFIG", "SET", "CURSOR_MAX_IDLE", "200")
    try:
        _, kept = _aggregate_ids(r, "WITHCURSOR", "COUNT", "1", "MAXIDLE", "100000")
        _, short = _aggregate_ids(r, "WITHCURSOR", "COUNT", "1", "MAXIDLE", "100")
        assert kept and short
        assert r.execute_command("FT.CURSOR", "READ", "m", kept)[1] == kept  # within its idle time
        time.sleep(0.5)
        for cid in (kept, short):  # both held to 200 ms, the asked 100 s notwithstanding
            with pytest.raises(redis.ResponseError, match="Cursor not found"):
                r.execute_command("FT.CURSOR", "READ", "m", cid)
    finally:
        r.execute_command("FT.CONFIG", "SET", "CURSOR_MAX_IDLE", "300000")


def test_a_cursor_within_cursor_max_idle_keeps_its_own_maxidle(indexed):
    r = indexed
    _, cid = _aggregate_ids(r, "WITHCURSOR", "COUNT", "1", "MAXIDLE", "100000")
    rows, cid2 = r.execute_command("FT.CURSOR", "READ", "m", cid)
    assert cid2 == cid and len(rows) == 2  # the total and one row
    r.execute_command("FT.CURSOR", "DEL", "m", cid)


def test_min_stem_len_applies_to_documents_indexed_after_it(indexed):
    r = indexed
    r.execute_command("FT.CREATE", "st", "PREFIX", "1", "st:", "SCHEMA", "t", "TEXT")
    try:
        r.hset("st:1", "t", "cats")
        r.execute_command("FT.CONFIG", "SET", "MINSTEMLEN", "5")
        r.hset("st:2", "t", "dogs")
        r.hset("st:3", "t", "horses")
        assert r.execute_command("FT.SEARCH", "st", "cat", "NOCONTENT") == [1, b"st:1"]  # stemmed before
        assert r.execute_command("FT.SEARCH", "st", "dog", "NOCONTENT") == [0]  # 4 letters, not stemmed
        assert r.execute_command("FT.SEARCH", "st", "horse", "NOCONTENT") == [1, b"st:3"]
        r.execute_command("FT.CONFIG", "SET", "MINSTEMLEN", "4")
        r.hset("st:2", "t", "dogs")  # indexed again under the default
        assert r.execute_command("FT.SEARCH", "st", "dog", "NOCONTENT") == [1, b"st:2"]
    finally:
        r.execute_command("FT.CONFIG", "SET", "MINSTEMLEN", "4")
