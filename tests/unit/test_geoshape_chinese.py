"""GEOSHAPE fields and LANGUAGE chinese (issue 28), in-process: the WKT reader's rules as Redis Stack's
(measured there: tests/search/stack_diff.py's ``geoshape`` and ``chinese`` cases diff the wire replies),
the four predicates, a document that keeps its place when only its shape fails, and Chinese
segmentation on documents and queries."""

from __future__ import annotations

import pytest

shapely = pytest.importorskip("shapely")

from pion.vector import geoshape  # noqa: E402
from pion.vector.geoshape import GeometryError, GeoShapeIndex, parse_wkt  # noqa: E402


@pytest.mark.parametrize("wkt", ["POINT(5 5)", "POINT (5 5)", "POINT(5  5)", "POINT(5 5) ", "POINT(1e1 2.5)",
                                 "POINT(-5 +5)", "POLYGON((0 0, 10 0, 10 10, 0 10, 0 0))",
                                 "POLYGON((1 1, 1 3, 3 3, 3 1))", "POLYGON((0 0, 0 10, 10 10))",
                                 "POLYGON((0 0, 0 10, 10 10, 10 0, 0 0),(2 2, 2 8, 8 8, 8 2, 2 2))"])
def test_texts_redisearch_reads(wkt):
    assert parse_wkt(wkt).is_valid


@pytest.mark.parametrize("wkt, reason", [
    ("point(5 5)", "unknown geometry type"), (" POINT(5 5)", "unknown geometry type"),
    ("POINT(5 5 5)", "unknown geometry type"), ("POINT(inf 5)", "unknown geometry type"),
    ("LINESTRING(0 0, 3 3)", "unknown geometry type"), ("MULTIPOLYGON(((1 1, 1 2, 2 2, 2 1, 1 1)))", "unknown geometry type"),
    ("POLYGON EMPTY", "unknown geometry type"), ("garbage", "unknown geometry type"),
    ("POLYGON((0 0, 0 10, 10 10, 10 0, 0 0)) trailing",
     "Too many tokens at 'trailing' in 'POLYGON((0 0, 0 10, 10 10, 10 0, 0 0)) trailing'"),
    ("POLYGON((1 1, 2 2, 1 2, 2 1, 1 1))", "invalid geometry"),
    ("POLYGON((0 0, 0 10, 10 10, 10 0, 0 0), (20 20, 20 30, 30 30, 30 20, 20 20))", "invalid geometry"),
    ("POLYGON((0 0, 1 1, 0 0))", "invalid geometry"),
])
def test_texts_redisearch_refuses(wkt, reason):
    with pytest.raises(GeometryError) as err:
        parse_wkt(wkt)
    assert str(err.value).startswith(reason)


def _index() -> GeoShapeIndex:
    idx = GeoShapeIndex("FLAT")
    for doc, wkt in enumerate(["POLYGON((1 1, 1 100, 100 100, 100 1, 1 1))", "POLYGON((1 1, 1 2, 2 2, 2 1, 1 1))",
                               "POINT(50 50)", "POINT(7 7)", "POLYGON((0 0, 0 10, 10 10))"], 1):
        idx.add(doc, parse_wkt(wkt))
    return idx


def test_the_four_predicates():
    idx = _index()
    square = parse_wkt("POLYGON((0 0, 0 60, 60 60, 60 0, 0 0))")
    assert sorted(idx.query("WITHIN", square)) == [2, 3, 4, 5]
    assert sorted(idx.query("CONTAINS", square)) == []
    assert sorted(idx.query("INTERSECTS", square)) == [1, 2, 3, 4, 5]
    assert sorted(idx.query("DISJOINT", parse_wkt("POINT(200 200)"))) == [1, 2, 3, 4, 5]
    # a point is neither within nor containing an equal point; it intersects it; a shape's boundary is not inside it
    p77 = parse_wkt("POINT(7 7)")
    assert idx.query("WITHIN", p77) == []
    assert sorted(idx.query("CONTAINS", p77)) == [1]
    assert sorted(idx.query("INTERSECTS", p77)) == [1, 4, 5]


def test_removal_and_re_adding_refresh_the_arrays():
    idx = _index()
    square = parse_wkt("POLYGON((0 0, 0 60, 60 60, 60 0, 0 0))")
    assert 2 in idx.query("WITHIN", square)
    idx.remove(2)
    assert 2 not in idx.query("WITHIN", square)
    idx.add(9, parse_wkt("POINT(3 3)"))
    assert 9 in idx.query("WITHIN", square)
    assert idx.memory_bytes() > 0
    for doc in list(idx.shapes):
        idx.remove(doc)
    assert idx.query("INTERSECTS", square) == [] and idx.memory_bytes() == 0


def test_explain_numbers_are_redisearch_enum():
    assert geoshape.PREDICATES == {"CONTAINS": 1, "WITHIN": 2, "DISJOINT": 3, "INTERSECTS": 4}


def _search_index(*schema: str, language: str | None = None):
    from pion.storage.hash_value import HashValue
    from pion.vector.index import SearchIndex
    from pion.vector.schema import parse_create

    argv = [b"FT.CREATE", b"i", b"ON", b"HASH"] + ([b"LANGUAGE", language.encode()] if language else [])
    definition = parse_create(argv + [b"SCHEMA", *[s.encode() for s in schema]])
    return SearchIndex(definition, 0), HashValue


def test_a_bad_shape_fails_the_field_not_the_document():
    pytest.importorskip("snowballstemmer")
    index, HashValue = _search_index("geom", "GEOSHAPE", "FLAT", "name", "TEXT")
    good, bad = HashValue(), HashValue()
    good.fields.update({b"geom": b"POINT(1 1)", b"name": b"good"})
    bad.fields.update({b"geom": b"LINESTRING(0 0, 1 1)", b"name": b"bad"})
    index.index_key(b"k1", good)
    index.index_key(b"k2", bad)
    assert len(index) == 2  # both documents are in the index, as in RediSearch
    assert index.failures == 1 and index.last_failure == "Error indexing geoshape: unknown geometry type"
    assert index.field_failures["geom"][0] == 1 and index.field_failures["geom"][2] == b"k2"
    assert list(index.geoshapes["geom"].shapes) == [index.key_to_doc[b"k1"]]


def test_chinese_documents_are_cut_into_words():
    pytest.importorskip("jieba")
    from pion.vector import chinese

    assert chinese.tokenize("我爱北京天安门") == ["我", "爱", "北京", "天安门"]
    # Latin words inside Chinese text: RediSearch's default tokenizer (separators, lower case)
    assert chinese.tokenize("上海是一个大城市, Hello World-running") == ["上海", "是", "一个", "大城市", "hello", "world", "running"]
    assert chinese.tokenize("no chinese here, ok") == ["no", "chinese", "here", "ok"]
    assert chinese.query_words("北京天安门") == ("北京", "天安门")
    assert chinese.query_words("hello") == ("hello",)
