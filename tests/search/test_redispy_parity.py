"""What redis-py 8.1's ``-m redismod`` suite found, pinned on Pion alone: each expected reply is what
Redis Stack (RediSearch 2.10.5) answers to the same commands, or, where the suite gates on the
server version, what the Redis 8.x reply shape is."""

from __future__ import annotations

import math

import pytest
import redis


def cmd(r, *args):
    return r.execute_command(*args)


def ids(reply) -> list[bytes]:
    if isinstance(reply, dict):
        return [item[b"id"] for item in reply[b"results"]]
    return [x for x in reply[1:] if isinstance(x, bytes)]


EMPTY_ERR = "Use `INDEXEMPTY` in field creation in order to index and query for empty strings"


@pytest.fixture
def empties(rr):
    cmd(rr, "FT.CREATE", "e", "PREFIX", "1", "p:", "SCHEMA", "title", "TEXT", "tag", "TAG", "etag", "TAG",
        "INDEXEMPTY", "description", "TEXT", "INDEXEMPTY")
    rr.hset("p:2", mapping={"title": "x", "tag": "", "etag": "", "description": "Modern flat"})
    rr.hset("p:3", mapping={"title": "y", "tag": "a,b", "etag": "b", "description": ""})
    return rr


@pytest.mark.parametrize("query, expected", [
    ("''", [b"p:3"]),  # no field: every TEXT field that indexes empty values
    ("@description:''", [b"p:3"]),
    ('@description:""', [b"p:3"]),
    ('@description:("" | flat)', [b"p:2", b"p:3"]),
    ("-@description:''", [b"p:2"]),
    ("@title|description:''", [b"p:3"]),
    ("@description:'' | @title:x", [b"p:2", b"p:3"]),
    ("@tag:''", []),  # no TEXT field named: no match, no error
    ("@etag:{''}", [b"p:2"]),
    ('@etag:{b|""}', [b"p:2", b"p:3"]),
])
def test_empty_value_queries(empties, query, expected):
    reply = cmd(empties, "FT.SEARCH", "e", query, "NOCONTENT", "DIALECT", "2")
    assert sorted(ids(reply)) == expected


@pytest.mark.parametrize("query", ["@title:''", "@title|tag:''", "@title:(x '')", "@tag:{''}", "@tag:{a|''}"])
def test_empty_value_on_a_field_without_indexempty_is_an_error(empties, query):
    with pytest.raises(redis.ResponseError, match=r"Use `INDEXEMPTY` in field creation"):
        cmd(empties, "FT.SEARCH", "e", query, "DIALECT", "2")


def test_empty_value_with_a_parameter_and_in_dialect_1(empties):
    with pytest.raises(redis.ResponseError, match=r"Use `INDEXEMPTY`"):
        cmd(empties, "FT.SEARCH", "e", "@tag:{$e}", "PARAMS", "2", "e", "", "DIALECT", "2")
    assert ids(cmd(empties, "FT.SEARCH", "e", "@etag:{$e}", "PARAMS", "2", "e", "", "DIALECT", "2")) == [b"p:2"]
    with pytest.raises(redis.ResponseError, match=r"^Syntax error at offset 12 near description$"):
        cmd(empties, "FT.SEARCH", "e", "@description:''", "DIALECT", "1")
    assert cmd(empties, "FT.EXPLAIN", "e", "@description:''", "DIALECT", "2") in (b'@description:""\n', '@description:""\n')


def test_an_escaped_dollar_in_a_tag_is_the_character(rr):
    cmd(rr, "FT.CREATE", "r", "SCHEMA", "tags", "TAG", "SEPARATOR", "|")
    rr.hset("r1", "tags", "finance|$btc|x")
    for dialect in ("1", "2"):
        assert ids(cmd(rr, "FT.SEARCH", "r", r"@tags:{\$btc}", "NOCONTENT", "DIALECT", dialect)) == [b"r1"]
    with pytest.raises(redis.ResponseError, match="No such parameter `btc`"):
        cmd(rr, "FT.SEARCH", "r", "@tags:{$btc}", "DIALECT", "2")


@pytest.mark.parametrize("query, dialect, error", [
    ("@title:(@num:[0 10])", "2", "Syntax error at offset 8 near num"),
    ("@t1:(@num==3)", "2", "Syntax error at offset 5 near num"),
    ("@t1:-@t2:x", "2", "Syntax error at offset 5 near t2"),
    ("@t1:(x ismissing(@t1))", "2", "Syntax error at offset 17 near t1"),
    ("(*)", "1", "Syntax error at offset 1 near "),
    ("$hello", "1", "Syntax error at offset 0 near hello"),
])
def test_dialect_grammar_errors(rr, query, dialect, error):
    """DIALECT 2's ``@field:(...)`` holds a text expression (no field modifiers in it); DIALECT 1
    has no ``(*)`` and no parameters."""
    cmd(rr, "FT.CREATE", "d", "SCHEMA", "title", "TAG", "t1", "TEXT", "t2", "TEXT", "num", "NUMERIC")
    with pytest.raises(redis.ResponseError) as err:
        cmd(rr, "FT.EXPLAIN", "d", query, "DIALECT", dialect, "PARAMS", "2", "hello", "hello")
    assert str(err.value) == error
    # the same shapes outside a field group stay valid
    cmd(rr, "FT.EXPLAIN", "d", "(@num:[0 10]) @t1:(x -y)", "DIALECT", "2")
    cmd(rr, "FT.EXPLAIN", "d", "@title:(@num:[0 10])", "DIALECT", "1")


@pytest.fixture
def quick(rr):
    cmd(rr, "FT.CREATE", "q", "SCHEMA", "description", "TEXT")
    rr.hset("doc1", "description", "The quick brown fox jumps over the lazy dog")
    rr.hset("doc2", "description", "Quick alice was beginning to get very tired of sitting by her quick sister "
                                   "on the bank, and of having nothing to do.")
    return rr


def _scores(reply) -> list[tuple[bytes, float]]:
    if isinstance(reply, dict):
        return [(item[b"id"], float(item[b"score"])) for item in reply[b"results"]]
    return [(reply[i], float(reply[i + 1])) for i in range(1, len(reply), 2)]


def _bm25std(freq: int, doc_len: int, b: float = 0.75, total: int = 2, term_docs: int = 2,
             avg: float = 10.5) -> float:
    k1 = 1.2000000476837158
    idf = math.log(1.0 + (total - term_docs + 0.5) / (term_docs + 0.5))
    return idf * freq * (k1 + 1) / (freq + k1 * (1.0 - b + b * doc_len / avg))


def test_the_bm25std_formula_gives_redis_stacks_scores_with_its_b():
    assert _bm25std(2, 14, b=0.5) == pytest.approx(0.2359455967633355, rel=1e-6)
    assert _bm25std(1, 7, b=0.5) == pytest.approx(0.20055375654566254, rel=1e-6)


@pytest.mark.parametrize("scorer, expected", [
    # Redis Stack's values, digit for digit (k1 is a C float: 1.2000000476837158)
    ("BM25", [(b"doc2", 0.22471909420069797), (b"doc1", 0.12658227408778472)]),
    # Redis 8.4's BM25STD (b 0.75f, k1 1.2f in RediSearch 8.4's default.c) from its formula, over the
    # lengths Redis Stack's own scores imply (14 and 7 words, average 10.5; with 2.10's b 0.5 the
    # same formula gives Stack's 0.2359455967633355 and 0.20055375654566254)
    ("BM25STD", [(b"doc2", _bm25std(2, 14)), (b"doc1", _bm25std(1, 7))]),
    ("HAMMING", [(b"doc1", 0.0), (b"doc2", 0.0)]),  # no PAYLOAD given: every score is 0
])
def test_bm25_scores_as_redisearch(quick, scorer, expected):
    reply = cmd(quick, "FT.SEARCH", "q", "quick", "WITHSCORES", "NOCONTENT", "SCORER", scorer)
    got = _scores(reply)
    if scorer == "HAMMING":
        assert sorted(got) == expected
    elif scorer == "BM25":
        assert got == expected
    else:  # BM25STD: RediSearch's idf and doc lengths agree to 7 digits
        assert [d for d, _ in got] == [d for d, _ in expected]
        for (_, a), (_, b) in zip(got, expected, strict=True):
            assert a == pytest.approx(b, rel=1e-6)


def test_scores_are_the_shortest_round_trip_text(quick):
    if quick.protocol_version != 2:
        pytest.skip("RESP3 carries the score as a double")
    reply = cmd(quick, "FT.SEARCH", "q", "quick", "WITHSCORES", "NOCONTENT", "SCORER", "BM25")
    assert reply[2] == b"0.22471909420069797"
    assert cmd(quick, "FT.SEARCH", "q", "quick", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF")[2] == b"1"


def test_load_with_a_count_names_a_property_star(rr):
    cmd(rr, "FT.CREATE", "l", "SCHEMA", "name", "TEXT")
    rr.hset("doc1", mapping={"name": "cat", "other": "1", "v": b"\xcd\xcc\xcc=\xcd\xcc\x4c>"})
    assert cmd(rr, "FT.AGGREGATE", "l", "*", "LOAD", "1", "*") in ([1, []], {b"attributes": [], b"format": b"STRING",
                                                                           b"results": [{b"extra_attributes": {},
                                                                                         b"values": []}],
                                                                           b"total_results": 1, b"warning": []})
    rows = cmd(rr, "FT.AGGREGATE", "l", "*", "LOAD", "2", "*", "@name")
    rows = rows[1] if isinstance(rows, list) else rows[b"results"][0][b"extra_attributes"]
    assert list(rows) in ([b"name", b"cat"], [b"name"])
    all_fields = cmd(rr, "FT.AGGREGATE", "l", "*", "LOAD", "*")
    row = all_fields[1] if isinstance(all_fields, list) else all_fields[b"results"][0][b"extra_attributes"]
    assert b"other" in list(row)


@pytest.fixture
def items(rr):
    import numpy as np

    cmd(rr, "FT.CREATE", "h", "PREFIX", "1", "item:", "SCHEMA", "description", "TEXT", "price", "NUMERIC", "color",
        "TAG", "embedding", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "L2",
        "e2", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "L2")
    base = [([1.0, 2.0, 7.0, 8.0], "red shoes"), ([1.0, 4.0, 7.0, 8.0], "green shoes with red laces"),
            ([1.0, 2.0, 6.0, 5.0], "red dress"), ([2.0, 3.0, 6.0, 5.0], "orange dress"),
            ([5.0, 6.0, 7.0, 8.0], "black shoes")] * 10
    for i, (v, d) in enumerate(base):
        blob = np.array(v, dtype=np.float32).tobytes()
        rr.hset(f"item:{i}", mapping={"description": d, "embedding": blob, "e2": blob, "price": 15 + i % 4,
                                      "color": d.split()[0]})
    return rr


def _hybrid_rows(reply) -> list[dict]:
    if isinstance(reply, dict):
        return reply[b"results"]
    rows = reply[reply.index(b"results") + 1]
    return [dict(zip(row[::2], row[1::2], strict=True)) for row in rows]


def test_hybrid_load_returns_what_it_loads(items):
    import numpy as np

    vec = np.array([1, 2, 2, 3], dtype=np.float32).tobytes()
    base = ["FT.HYBRID", "h", "SEARCH", "shoes", "SCORER", "TFIDF", "VSIM", "@embedding", "$vec",
            "COMBINE", "LINEAR", "4", "ALPHA", "1", "BETA", "0"]
    rows = _hybrid_rows(cmd(items, *base, "LOAD", "3", "@description", "@__score", "@nothing", "LIMIT", "0", "2",
                            "PARAMS", "2", "vec", vec))
    # TFIDF 2 (`shoes` and its stem `+shoe`; Redis 8.4 counts no vector into the norm); no __key
    assert rows == [{b"description": b"red shoes", b"__score": b"2"},
                    {b"description": b"green shoes with red laces", b"__score": b"2"}]
    rows = _hybrid_rows(cmd(items, *base, "LOAD", "3", "@__key", "AS", "k", "LIMIT", "0", "1", "PARAMS", "2", "vec",
                            vec))
    assert rows == [{b"k": b"item:0"}]
    rows = _hybrid_rows(cmd(items, *base, "LIMIT", "0", "1", "PARAMS", "2", "vec", vec))
    assert rows == [{b"__key": b"item:0", b"__score": b"2"}]  # without LOAD: the key and the fused score


def test_hybrid_withcursor_answers_a_cursor_per_leg(items):
    import numpy as np

    vec = np.array([1, 2, 7, 6], dtype=np.float32).tobytes()
    reply = cmd(items, "FT.HYBRID", "h", "SEARCH", "@color:{red|green}", "VSIM", "@embedding", "$vec",
                "WITHCURSOR", "COUNT", "5", "MAXIDLE", "1000", "PARAMS", "2", "vec", vec)
    ids = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    assert set(ids) == {b"SEARCH", b"VSIM"} and all(cid > 0 for cid in ids.values())
    for leg, total in ((b"SEARCH", 20), (b"VSIM", 10)):  # the text leg's WINDOW (20), KNN's K (10)
        seen = 0
        cid = ids[leg]
        while cid:
            body, cid = cmd(items, "FT.CURSOR", "READ", "h", str(cid))
            chunk = body[b"results"] if isinstance(body, dict) else body[1:]
            assert len(chunk) <= 5
            seen += len(chunk)
        assert seen == total


def test_l2_distance_that_overflows_is_infinite(rr):
    """Components near float32's range overflow ``|a|^2 - 2ab + |b|^2`` to inf - inf: RediSearch's
    sum of squares answers inf for every document (ties by doc id), never NaN."""
    cmd(rr, "FT.CREATE", "o", "PREFIX", "1", "o:", "SCHEMA", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM",
        "4", "DISTANCE_METRIC", "L2")
    import random

    rng = random.Random(1)
    for i in range(12):
        rr.hset(f"o:{i}", "v", "".join(rng.choice("abcdefgh12345678") for _ in range(16)))
    reply = cmd(rr, "FT.SEARCH", "o", "*=>[KNN 5 @v $q AS d]", "PARAMS", "2", "q", "abcd1234abcd5678",
                "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2")
    if isinstance(reply, dict):
        got = [(r[b"id"], r[b"extra_attributes"][b"d"]) for r in reply[b"results"]]
    else:
        got = [(reply[i], reply[i + 1][1]) for i in range(1, len(reply), 2)]
    assert got == [(f"o:{i}".encode(), b"inf") for i in range(5)]


@pytest.mark.parametrize("query, args, expected", [
    ("hello", (), "UNION {\n  hello\n  +hello(expanded)\n}\n"),
    ("apple", (), "UNION {\n  apple\n  +appl(expanded)\n  appl(expanded)\n}\n"),
    ("hello", ("VERBATIM",), "hello\n"),
    ("hello the world", (), "INTERSECT {\n  UNION {\n    hello\n    +hello(expanded)\n  }\n"
                            "  UNION {\n    world\n    +world(expanded)\n  }\n}\n"),
    ("the", (), "<empty>\n"),
    ('"hello world"', (), "EXACT {\n  hello\n  world\n}\n"),
    # Redis 8.4 expands under a negation too (RediSearch 2.10 printed `NOT{ @name:apple }`)
    ("-@name:apple", (), "NOT{\n  @name:UNION {\n    @name:apple\n    @name:+appl(expanded)\n    @name:appl(expanded)\n  }\n}\n"),
    ("@name:(apple|pie)", ("DIALECT", "2"),
     "@name:UNION {\n  @name:UNION {\n    @name:apple\n    @name:+appl(expanded)\n    @name:appl(expanded)\n  }\n"
     "  @name:UNION {\n    @name:pie\n    @name:+pie(expanded)\n  }\n}\n"),
    ("@t:(x)", ("DIALECT", "2"), "@NULL:UNION {\n  @NULL:x\n  @NULL:+x(expanded)\n}\n"),  # no TEXT field named
    ("@price:[1.5 (5]", (), "NUMERIC {1.500000 <= @price < 5.000000}\n"),
    ("$w", ("DIALECT", "2", "PARAMS", "2", "w", "hello"), "UNION {\n  hello\n  +hello(expanded)\n}\n"),
])
def test_explain_prints_the_expanded_query(rr, query, args, expected):
    """Redis Stack's FT.EXPLAIN text for the same index and queries, byte for byte."""
    cmd(rr, "FT.CREATE", "x", "SCHEMA", "name", "TEXT", "price", "NUMERIC", "t", "TAG")
    got = cmd(rr, "FT.EXPLAIN", "x", query, *args)
    assert (got.decode() if isinstance(got, bytes) else got) == expected


def test_a_knn_past_its_timeout_reports_it(rr):
    """A brute-force KNN that alone works longer than TIMEOUT: RediSearch stops it and says so; Pion's
    kernel runs to the end, then answers the same way (the error under FAIL, RESP3's warning under
    RETURN) — redis-py's ``test_search_query_with_timeout``."""
    import numpy as np

    # 64 MB of rows: well past 1 ms of one core's work on any machine (1500 rows, 24 MB, ran under
    # 1 ms of CPU on a faster one, so the budget was never passed there)
    dim, n = 4096, 4000
    cmd(rr, "FT.CREATE", "kt", "PREFIX", "1", "kt:", "SCHEMA", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM",
        str(dim), "DISTANCE_METRIC", "L2")
    rows = np.random.default_rng(7).random((n, dim), dtype=np.float32)
    pipe = rr.pipeline(transaction=False)
    for i in range(n):
        pipe.hset(f"kt:{i}", "v", rows[i].tobytes())
    pipe.execute()
    query = ("FT.SEARCH", "kt", f"*=>[KNN {n} @v $q]", "PARAMS", "2", "q", rows[0].tobytes(), "NOCONTENT",
             "LIMIT", "0", "1", "DIALECT", "2")
    reply = cmd(rr, *query, "TIMEOUT", "0")
    if isinstance(reply, dict):
        assert reply[b"warning"] == [] and reply[b"results"][0][b"id"] == b"kt:0"
    else:
        assert reply[1] == b"kt:0"
    reply = cmd(rr, *query, "TIMEOUT", "1")
    if isinstance(reply, dict):
        assert reply[b"warning"] == [b"Timeout limit was reached"]
    cmd(rr, "FT.CONFIG", "SET", "ON_TIMEOUT", "FAIL")
    try:
        with pytest.raises(redis.ResponseError, match="^Timeout limit was reached$"):
            cmd(rr, *query, "TIMEOUT", "1")
    finally:
        cmd(rr, "FT.CONFIG", "SET", "ON_TIMEOUT", "RETURN")
