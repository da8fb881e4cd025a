"""GEOSHAPE and LANGUAGE chinese over the wire, in RESP2 and RESP3 (issue 28). The byte-for-byte
comparison with Redis Stack is tests/search/stack_diff.py's ``geoshape`` and ``chinese`` cases; these
assert the behaviour itself, so they also run where Redis Stack is not installed."""

from __future__ import annotations

import pytest
import redis

pytest.importorskip("shapely")

SQUARE = "POLYGON((0 0, 0 60, 60 60, 60 0, 0 0))"


def _ids(reply) -> list[bytes]:
    if isinstance(reply, dict):
        return sorted(r[b"id"] for r in reply[b"results"])
    return sorted(reply[1:])


def _search(client, *args) -> list[bytes]:
    return _ids(client.execute_command("FT.SEARCH", *args, "NOCONTENT", "DIALECT", "2", "LIMIT", "0", "100"))


def test_geoshape_predicates_and_failures(any_client):
    c = any_client
    assert c.execute_command("FT.CREATE", "g", "ON", "HASH", "PREFIX", "1", "g:", "SCHEMA",
                             "geom", "GEOSHAPE", "FLAT", "name", "TEXT") in (b"OK", "OK")
    c.hset("g:big", mapping={"geom": "POLYGON((1 1, 1 100, 100 100, 100 1, 1 1))", "name": "big"})
    c.hset("g:small", mapping={"geom": "POLYGON((1 1, 1 2, 2 2, 2 1, 1 1))", "name": "small"})
    c.hset("g:pt", mapping={"geom": "POINT(50 50)", "name": "pt"})
    c.hset("g:line", mapping={"geom": "LINESTRING(0 0, 3 3)", "name": "line"})
    q = ("PARAMS", "2", "p", SQUARE)
    assert _search(c, "g", "@geom:[WITHIN $p]", *q) == [b"g:pt", b"g:small"]
    assert _search(c, "g", "@geom:[INTERSECTS $p]", *q) == [b"g:big", b"g:pt", b"g:small"]
    assert _search(c, "g", "@geom:[CONTAINS $p]", "PARAMS", "2", "p", "POINT(1.5 1.5)") == [b"g:big", b"g:small"]
    assert _search(c, "g", "@geom:[DISJOINT $p]", "PARAMS", "2", "p", "POINT(60 60)") == [b"g:pt", b"g:small"]
    assert _search(c, "g", "@geom:[WITHIN $p] @name:small", *q) == [b"g:small"]
    # the line is not a shape RediSearch reads: the document stays (without its shape) and counts a failure
    assert _search(c, "g", "-@geom:[WITHIN $p]", *q) == [b"g:big", b"g:line"]
    info = c.execute_command("FT.INFO", "g")
    info = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=True))
    assert info[b"num_docs"] == 4 and info[b"hash_indexing_failures"] == 1
    assert c.execute_command("FT.EXPLAIN", "g", "@geom:[DISJOINT $p]", *q, "DIALECT", "2") in (
        f"GEOSHAPE{{3 {SQUARE}}}\n".encode(), f"GEOSHAPE{{3 {SQUARE}}}\n")
    with pytest.raises(redis.ResponseError, match="Error querying geoshape index: unknown geometry type"):
        _search(c, "g", "@geom:[WITHIN $p]", "PARAMS", "2", "p", "POLYGON EMPTY")
    with pytest.raises(redis.ResponseError, match="No such parameter `zz`"):
        _search(c, "g", "@geom:[WITHIN $zz]")
    with pytest.raises(redis.ResponseError, match="does not have a type"):
        c.execute_command("FT.CREATE", "w", "SCHEMA", "geom", "GEOSHAPE", "BOGUS")
    c.delete("g:small")
    assert _search(c, "g", "@geom:[WITHIN $p]", *q) == [b"g:pt"]


def test_chinese_index_segments_documents_and_queries(any_client):
    pytest.importorskip("jieba")
    c = any_client
    c.execute_command("FT.CREATE", "zh", "ON", "HASH", "PREFIX", "1", "zh:", "LANGUAGE", "chinese", "SCHEMA", "t", "TEXT")
    c.hset("zh:1", "t", "我爱北京天安门")
    c.hset("zh:2", "t", "上海是一个大城市, hello World running")
    c.hset("zh:3", "t", "北京大学的学生")

    def ids(query, *extra):
        return _ids(c.execute_command("FT.SEARCH", "zh", query, "NOCONTENT", *extra))

    assert ids("北京") == [b"zh:1"]  # 北京大学 is one word
    assert ids("天安门") == ids("北京天安门") == ids('"北京 天安门"') == [b"zh:1"]
    assert ids("(北京|上海)") == [b"zh:1", b"zh:2"]
    assert ids("北京*") == [b"zh:1", b"zh:3"]
    assert ids("running") == [b"zh:2"] and ids("run") == []  # no stemming in Chinese, as RediSearch
    # a query's LANGUAGE decides how its words are cut, the index's is the default
    c.execute_command("FT.CREATE", "en", "ON", "HASH", "PREFIX", "1", "zh:", "SCHEMA", "t", "TEXT")
    assert _ids(c.execute_command("FT.SEARCH", "en", "北京", "NOCONTENT")) == []
