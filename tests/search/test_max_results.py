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
