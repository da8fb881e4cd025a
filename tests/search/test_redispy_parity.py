"""What redis-py 8.1's ``-m redismod`` suite found, pinned on Pion alone: each expected reply is what
Redis Stack (RediSearch 2.10.5) answers to the same commands, or, where the suite gates on the
server version, what the Redis 8.x reply shape is."""

from __future__ import annotations

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


@pytest.mark.parametrize("scorer, expected", [
    # Redis Stack's values, digit for digit (k1 is a C float: 1.2000000476837158)
    ("BM25", [(b"doc2", 0.22471909420069797), (b"doc1", 0.12658227408778472)]),
    ("BM25STD", [(b"doc2", 0.2359455967633355), (b"doc1", 0.20055375654566254)]),
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
