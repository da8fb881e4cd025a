"""The differences the Redis Stack diff found, each pinned on Pion alone (so they hold where Redis
Stack is not installed): the expected replies are what RediSearch 2.10.5 / RedisJSON 2.8.3 answer."""

from __future__ import annotations

import struct

import pytest


def cmd(r, *args):
    return r.execute_command(*args)


def vec(*xs: float) -> bytes:
    return struct.pack(f"<{len(xs)}f", *xs)


def ids(reply) -> list[bytes]:
    if isinstance(reply, dict):
        return [item[b"id"] for item in reply[b"results"]]
    return [x for x in reply[1:] if isinstance(x, bytes)]


@pytest.fixture
def products(rr):
    cmd(rr, "FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "p:", "SCHEMA", "name", "TEXT", "tags", "TAG",
        "price", "NUMERIC", "SORTABLE", "loc", "GEO", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "2",
        "DISTANCE_METRIC", "L2")
    rows = [("p:1", "red apple", "fruit,red", 5, "-74.0,40.7", (1.0, 0.0)),
            ("p:2", "green apple", "fruit,green", 8, "-73.9,40.8", (0.9, 0.1)),
            ("p:3", "banana", "fruit,yellow", 12, "-0.1,51.5", (0.0, 1.0)),
            ("p:4", "red shirt", "clothes,red", 25, "2.35,48.85", (0.5, 0.5)),
            ("p:6", "apple pie", "food,sweet", 15, "-74.1,40.6", (0.7, 0.3))]
    for key, name, tags, price, loc, v in rows:
        rr.hset(key, mapping={"name": name, "tags": tags, "price": price, "loc": loc, "v": vec(*v)})
    return rr


@pytest.mark.parametrize("query, expected", [
    ("(@price:[(10 +inf])=>[KNN 3 @v $q AS d]", [b"p:6", b"p:4", b"p:3"]),
    ("(@price:[-inf (8])=>[KNN 3 @v $q AS d]", [b"p:1"]),
    ("(@price:[(5 (15] @tags:{fruit})=>[KNN 3 @v $q AS d]", [b"p:2", b"p:3"]),
    ("@price:[(10 +inf]=>[KNN 3 @v $q AS d]", [b"p:6", b"p:4", b"p:3"]),
])
def test_knn_with_an_exclusive_numeric_bound(products, query, expected):
    """RedisVL's and LangChain's ``Num(f) > x`` produce ``(@f:[(x +inf])=>[KNN ...]``."""
    reply = cmd(products, "FT.SEARCH", "idx", query, "PARAMS", "2", "q", vec(1.0, 0.0), "SORTBY", "d",
                "RETURN", "1", "d", "DIALECT", "2")
    assert ids(reply) == expected
