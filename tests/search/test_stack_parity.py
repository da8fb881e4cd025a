"""The differences the Redis Stack diff found, each pinned on Pion alone (so they hold where Redis
Stack is not installed): the expected replies are what RediSearch 2.10.5 / RedisJSON 2.8.3 answer."""

from __future__ import annotations

import struct

import pytest
import redis


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


def test_noindex_tag_and_numeric_are_not_searchable(rr):
    cmd(rr, "FT.CREATE", "nx", "ON", "HASH", "PREFIX", "1", "n:", "SCHEMA", "t", "TAG", "NOINDEX", "SORTABLE",
        "n", "NUMERIC", "NOINDEX", "SORTABLE", "s", "TEXT")
    rr.hset("n:1", mapping={"t": "a", "n": 5, "s": "hello"})
    rr.hset("n:2", mapping={"t": "b", "n": 3, "s": "hello"})
    assert ids(cmd(rr, "FT.SEARCH", "nx", "@t:{a}")) == []
    assert ids(cmd(rr, "FT.SEARCH", "nx", "@n:[0 10]")) == []
    assert list(cmd(rr, "FT.TAGVALS", "nx", "t")) == []
    # still there for SORTBY and RETURN
    assert ids(cmd(rr, "FT.SEARCH", "nx", "hello", "SORTBY", "n", "RETURN", "1", "t")) == [b"n:2", b"n:1"]


def test_stopwords_take_no_position(rr):
    cmd(rr, "FT.CREATE", "sw", "ON", "HASH", "PREFIX", "1", "s:", "SCHEMA", "t", "TEXT")
    rr.hset("s:1", "t", "king for henry")
    rr.hset("s:2", "t", "the lord of the rings")
    assert ids(cmd(rr, "FT.SEARCH", "sw", '"king henry"', "NOCONTENT")) == [b"s:1"]
    assert ids(cmd(rr, "FT.SEARCH", "sw", '"lord rings"', "NOCONTENT")) == [b"s:2"]
    assert ids(cmd(rr, "FT.SEARCH", "sw", "king henry", "SLOP", "0", "INORDER", "NOCONTENT")) == [b"s:1"]
    assert ids(cmd(rr, "FT.SEARCH", "sw", '"henry king"', "NOCONTENT")) == []


def _scores(reply) -> dict[bytes, float]:
    if isinstance(reply, dict):
        return {item[b"id"]: float(item[b"score"]) for item in reply[b"results"]}
    return {reply[i]: float(reply[i + 1]) for i in range(1, len(reply), 2)}


@pytest.fixture
def texts(rr):
    cmd(rr, "FT.CREATE", "t", "ON", "HASH", "PREFIX", "1", "t:", "SCHEMA", "name", "TEXT", "desc", "TEXT", "tags", "TAG")
    rows = [("red apple", "a sweet red fruit", "fruit,red"), ("green apple", "a sour green fruit", "fruit"),
            ("banana", "a long yellow fruit", "fruit"), ("red shirt", "a cotton shirt that is red", "red"),
            ("apple pie", "a sweet pie with apple inside", "food"),
            ("zz", "red one two three four five apple six seven sweet", "x")]
    for i, (name, desc, tags) in enumerate(rows):
        rr.hset(f"t:{i}", mapping={"name": name, "desc": desc, "tags": tags})
    return rr


@pytest.mark.parametrize("query, scorer, expected", [
    # TFIDF: sum(freq * idf) / the doc's highest term frequency / the distance penalty (RediSearch 2.10.5's values)
    ("apple sweet", "TFIDF", {b"t:0": 1.5, b"t:4": 1.25, b"t:5": 1.0}),
    ("red apple sweet", "TFIDF", {b"t:0": 2.5, b"t:5": 4 / 9}),  # offsets 1, 7, 10 of t:5: sqrt(81 + 9) -> 9
    ("apple red fruit", "TFIDF", {b"t:0": 5 / 6}),
    ("red @tags:{fruit}", "TFIDF", {b"t:0": 1.5}),  # the tag adds its frequency 1
    ("red apple sweet", "BM25", {b"t:0": 0.8995, b"t:5": 0.08547}),
    ("apple sweet", "DISMAX", {b"t:0": 2.0, b"t:4": 3.0, b"t:5": 2.0}),  # a word and its stem: the best, not the sum
    ("red @tags:{fruit}", "DISMAX", {b"t:0": 3.0}),
])
def test_scorers_as_redisearch(texts, query, scorer, expected):
    got = _scores(cmd(texts, "FT.SEARCH", "t", query, "WITHSCORES", "NOCONTENT", "SCORER", scorer))
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-3), key


def _agg_rows(reply) -> tuple[int, list[dict[bytes, bytes]]]:
    if isinstance(reply, dict):
        return reply[b"total_results"], [row[b"extra_attributes"] for row in reply[b"results"]]
    return reply[0], [dict(zip(row[::2], row[1::2], strict=True)) for row in reply[1:]]


def test_aggregate_apply_without_spaces_and_total_before_limit(products):
    total, rows = _agg_rows(cmd(products, "FT.AGGREGATE", "idx", "*", "LOAD", "1", "@price", "APPLY", "@price*2", "AS",
                                "p2", "FILTER", "@p2>20", "SORTBY", "2", "@p2", "ASC", "LIMIT", "0", "2"))
    assert total == 5  # the matches, before FILTER and LIMIT
    assert [r[b"p2"] for r in rows] == [b"24", b"30"]
    total, rows = _agg_rows(cmd(products, "FT.AGGREGATE", "idx", "@tags:{fruit}", "GROUPBY", "0",
                                "REDUCE", "SUM", "1", "@price", "AS", "s"))
    assert (total, rows) == (1, [{b"s": b"25"}])  # after a GROUPBY: its groups


def test_aggregate_load_keeps_binary_values(products):
    _, rows = _agg_rows(cmd(products, "FT.AGGREGATE", "idx", "@name:banana", "LOAD", "1", "@v"))
    assert rows == [{b"v": vec(0.0, 1.0)}]


@pytest.mark.parametrize("expr", ["geodistance(@loc, -74, 40.7)", "geodistance(-74, 40.7, @loc)",
                                  'geodistance(@loc, "-74,40.7")', "geodistance(-73.9, 40.8, -74, 40.7)"])
def test_geodistance_argument_forms(products, expr):
    _, rows = _agg_rows(cmd(products, "FT.AGGREGATE", "idx", "@name:green", "LOAD", "1", "@loc", "APPLY", expr,
                            "AS", "d"))
    assert rows[0][b"d"] == b"13953.93"  # metres, to the centimetre


def test_aggregate_sortby_unknown_property_errors(products):
    with pytest.raises(redis.ResponseError, match="^Property `nosuch` not loaded nor in schema$"):
        cmd(products, "FT.AGGREGATE", "idx", "*", "SORTBY", "2", "@nosuch", "ASC")
    with pytest.raises(redis.ResponseError, match="^Property `price` not loaded nor in schema$"):
        cmd(products, "FT.AGGREGATE", "idx", "*", "GROUPBY", "1", "@tags", "SORTBY", "2", "@price", "ASC")
    _, rows = _agg_rows(cmd(products, "FT.AGGREGATE", "idx", "*", "APPLY", "@price+1", "AS", "q",
                            "SORTBY", "2", "@q", "DESC", "LIMIT", "0", "1"))
    assert rows[0][b"q"] == b"26"


def test_search_sortby_field_comes_first(rr):
    cmd(rr, "FT.CREATE", "jdx", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA", "$.name", "AS", "name", "TEXT",
        "$.price", "AS", "price", "NUMERIC", "SORTABLE")
    cmd(rr, "JSON.SET", "j:1", "$", '{"name":"red apple","price":5}')
    reply = cmd(rr, "FT.SEARCH", "jdx", "apple", "SORTBY", "price")
    fields = reply[b"results"][0][b"extra_attributes"] if isinstance(reply, dict) else \
        dict(zip(reply[2][::2], reply[2][1::2], strict=True))
    assert list(fields.items()) == [(b"price", b"5"), (b"$", b'{"name":"red apple","price":5}')]


def test_json_mset_answers_ok_where_a_path_matches_nothing(rr):
    cmd(rr, "JSON.SET", "a", "$", '{"x":1}')
    assert cmd(rr, "JSON.MSET", "a", "$.nope.deep", "1", "a", "$.x", "5") == b"OK"
    assert cmd(rr, "JSON.GET", "a") == b'{"x":5}'


def test_flushall_clears_the_dictionaries(rr):
    assert cmd(rr, "FT.DICTADD", "d", "foo", "bar") == 2
    rr.flushall()
    with pytest.raises(redis.ResponseError, match="^could not open dict key$"):
        cmd(rr, "FT.DICTDUMP", "d")


def test_missing_index_errors_as_redisearch(rr):
    for argv, text in [(("FT.INFO", "nope"), "Unknown index name"), (("FT.DROPINDEX", "nope"), "Unknown Index name"),
                       (("FT.EXPLAIN", "nope", "x"), "nope: no such index"),
                       (("FT.ALIASADD", "a", "nope"), "Unknown index name (or name is an alias itself)"),
                       (("FT.CURSOR", "READ", "nope", "1"), "Cursor not found")]:
        with pytest.raises(redis.ResponseError) as err:
            cmd(rr, *argv)
        assert str(err.value) == text


def test_json_legacy_path_errors_name_the_path_and_the_found_type(rr):
    cmd(rr, "JSON.SET", "k", "$", '{"s":"ab","n":1}')
    for argv, text in [(("JSON.ARRPOP", "k", ".s"), "Path '$.s' does not exist or not an array"),
                       (("JSON.TOGGLE", "k", "."), "Path '$' does not exist or not a bool"),
                       (("JSON.STRLEN", "k", ".n"), "wrong type of path value - expected string but found integer"),
                       (("JSON.OBJLEN", "k", ".s"), "wrong type of path value - expected object but found string"),
                       (("JSON.SET", "k", "$", "{bad"), "key must be a string at line 1 column 2")]:
        with pytest.raises(redis.ResponseError) as err:
            cmd(rr, *argv)
        assert str(err.value).endswith(text), argv


def test_tfidf_norm_leaves_the_vector_out(products):
    # p:1 "red apple": "red" once, "apple" once: norm 1. RediSearch 2.10 added 1 for the document's
    # vector (score 1.0); Redis 8.4 does not (docs/compat-differences.md), nor does Pion
    got = _scores(cmd(products, "FT.SEARCH", "idx", "@name:red", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF"))
    assert got == {b"p:1": pytest.approx(2.0), b"p:4": pytest.approx(2.0)}  # tf 1 * idf 2 / 1


def test_slop_spans_fields_as_offsets_run_on(rr):
    """RediSearch's offsets run across a document's fields: two words in two fields can be near."""
    cmd(rr, "FT.CREATE", "pl", "ON", "HASH", "PREFIX", "1", "l:", "SCHEMA", "play", "TEXT", "txt", "TEXT")
    rr.hset("l:1", mapping={"play": "Henry V", "txt": "the king speaks"})
    assert ids(cmd(rr, "FT.SEARCH", "pl", "henry king", "SLOP", "3", "NOCONTENT")) == [b"l:1"]
    assert ids(cmd(rr, "FT.SEARCH", "pl", "henry king", "SLOP", "0", "NOCONTENT")) == []  # v sits between
    assert ids(cmd(rr, "FT.SEARCH", "pl", "@txt:(henry king)", "SLOP", "3", "NOCONTENT")) == []


def test_ft_del_deletes_an_indexed_document(products):
    assert cmd(products, "FT.DEL", "idx", "p:2") == 1
    assert products.exists("p:2") == 0
    assert cmd(products, "FT.DEL", "idx", "p:2") == 0
    products.set("other", "x")
    assert cmd(products, "FT.DEL", "idx", "other") == 0 and products.exists("other") == 1  # not in the index
    assert cmd(products, "FT.DEL", "idx", "p:3", "DD") == 1


def test_reducer_default_names_and_unknown_property(products):
    _, rows = _agg_rows(cmd(products, "FT.AGGREGATE", "idx", "@name:banana", "GROUPBY", "0",
                            "REDUCE", "QUANTILE", "2", "@price", "0.5", "REDUCE", "FIRST_VALUE", "4", "@name", "BY",
                            "@price", "DESC", "REDUCE", "COUNT", "0"))
    assert list(rows[0]) == [b"__generated_aliasquantileprice,0.5", b"__generated_aliasfirst_valuename,by,price,desc",
                             b"__generated_aliascount"]
    with pytest.raises(redis.ResponseError, match="^Property `Price` not present in document or pipeline$"):
        cmd(products, "FT.AGGREGATE", "idx", "*", "GROUPBY", "0", "REDUCE", "MIN", "1", "@Price")
