"""The FT.* / JSON.* differential harness: the same commands sent to Pion and to Redis Stack, in RESP2
and RESP3, replies compared after the normalisations the specification allows.

A case is a list of steps run from an empty server (FLUSHALL, every index dropped). Every step's
reply is compared; a setup step (``setup=True``) is sent too but its reply is compared only as
"both succeeded". Normalisations, per step: ``docs`` (documents of a search reply in id order: the
order of equal-scored documents is the index's own), ``set`` (a list whose order RediSearch leaves
undefined, such as FT._LIST or FT.TAGVALS), ``scores`` (floats to 4 significant digits: scoring is
the same formula, the last digits are float rounding), ``json`` (a JSON text compared as data: the
key order of a multi-path JSON.GET is a hash map's). Where the servers differ on purpose, the
difference is listed in ``stack_differences.py`` with its reason (and in docs/compat-differences.md).

``python -m tests.search.stack_diff`` runs every case against both servers and prints how many
replies differ (the number the issue reports); the tests are ``test_stack_diff.py``.
"""

from __future__ import annotations

import json
import math
import re
import struct
import time
from dataclasses import dataclass, field

import redis
from redis.client import CaseInsensitiveDict


@dataclass
class Step:
    args: tuple
    norm: frozenset = frozenset()
    setup: bool = False


def S(*args, norm: str = "", setup: bool = False) -> Step:
    return Step(tuple(args), frozenset(norm.split()), setup)


def setup(*args) -> Step:
    return Step(tuple(args), frozenset(), True)


def wait_indexing(index: str) -> Step:
    """Not a command: wait until both servers finished (re)indexing ``index`` (Redis Stack rescans the
    keys in the background after FT.CREATE, FT.ALTER and FT.SYNUPDATE)."""
    return Step(("!WAIT", index), frozenset(), True)


@dataclass
class Case:
    name: str
    steps: list[Step] = field(default_factory=list)


def vec(*xs: float) -> bytes:
    return struct.pack(f"<{len(xs)}f", *xs)


# ---------------------------------------------------------------------------------------------
# the data sets

def _products() -> list[Step]:
    """A hash index with every field type: text, tag, numeric, geo, a 2-d vector."""
    steps = [setup("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "p:", "SCHEMA",
                   "name", "TEXT", "SORTABLE", "desc", "TEXT", "tags", "TAG", "SORTABLE", "price", "NUMERIC", "SORTABLE",
                   "loc", "GEO", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "2", "DISTANCE_METRIC", "L2")]
    rows = [
        ("p:1", "red apple", "a sweet red fruit", "fruit,red", "5", "-74.0,40.7", (1.0, 0.0)),
        ("p:2", "green apple", "a sour green fruit", "fruit,green", "8", "-73.9,40.8", (0.9, 0.1)),
        ("p:3", "banana", "a long yellow fruit", "fruit,yellow", "12", "-0.1,51.5", (0.0, 1.0)),
        ("p:4", "red shirt", "a cotton shirt that is red", "clothes,red", "25", "2.35,48.85", (0.5, 0.5)),
        ("p:5", "blue jeans", "denim trousers for work", "clothes,blue", "40", "13.4,52.5", (0.2, 0.8)),
        ("p:6", "apple pie", "a sweet pie with apple inside", "food,sweet", "15", "-74.1,40.6", (0.7, 0.3)),
    ]
    for key, name, desc, tags, price, loc, v in rows:
        steps.append(setup("HSET", key, "name", name, "desc", desc, "tags", tags, "price", price, "loc", loc,
                           "v", vec(*v)))
    return steps


def _json_docs() -> list[Step]:
    steps = [setup("FT.CREATE", "jdx", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA",
                   "$.name", "AS", "name", "TEXT", "$.tags[*]", "AS", "tags", "TAG", "$.price", "AS", "price",
                   "NUMERIC", "SORTABLE", "$.v", "AS", "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "2",
                   "DISTANCE_METRIC", "COSINE")]
    docs = [
        ("j:1", '{"name":"red apple","tags":["fruit","red"],"price":5,"v":[1.0,0.0]}'),
        ("j:2", '{"name":"green apple","tags":["fruit","green"],"price":8,"v":[0.9,0.1]}'),
        ("j:3", '{"name":"banana","tags":["fruit","yellow"],"price":12,"v":[0.0,1.0]}'),
        ("j:4", '{"name":"red shirt","tags":["clothes","red"],"price":25,"v":[0.5,0.5]}'),
    ]
    for key, doc in docs:
        steps.append(setup("JSON.SET", key, "$", doc))
    return steps


Q = vec(1.0, 0.0)


def cases() -> list[Case]:
    P = _products()
    J = _json_docs()
    out: list[Case] = []

    def add(name: str, *steps: Step, data: list[Step] | None = None) -> None:
        out.append(Case(name, [*(data or []), *steps]))

    # -- FT.SEARCH: text, tag, numeric, geo
    add("search_text", S("FT.SEARCH", "idx", "apple", "NOCONTENT", norm="docs"),
        S("FT.SEARCH", "idx", "@name:apple", "RETURN", "1", "price", norm="docs"),
        S("FT.SEARCH", "idx", "red -shirt", "NOCONTENT"),
        S("FT.SEARCH", "idx", "apple|banana", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "appl*", "NOCONTENT", "SORTBY", "price", "DESC"),
        S("FT.SEARCH", "idx", "%aple%", "NOCONTENT", norm="docs"),
        S("FT.SEARCH", "idx", '"red apple"', "RETURN", "1", "name"), data=P)
    add("search_tag_numeric", S("FT.SEARCH", "idx", "@tags:{red}", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@tags:{red|blue}", "RETURN", "2", "name", "price", "SORTBY", "price", "ASC"),
        S("FT.SEARCH", "idx", "@price:[10 30]", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@price:[(10 (25]", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@price:[-inf +inf]", "LIMIT", "1", "2", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@price:[0 100]", "LIMIT", "0", "0"),
        S("FT.SEARCH", "idx", "@tags:{fruit} @price:[6 +inf]", "NOCONTENT", "SORTBY", "price"), data=P)
    # FT.CONFIG MAXSEARCHRESULTS: LIMIT's checks and the page cut where the cap ends it
    add("max_search_results", S("FT.SEARCH", "idx", "*", "LIMIT", "0", "2000000"),
        S("FT.SEARCH", "idx", "*", "LIMIT", "1000001", "1"),
        S("FT.SEARCH", "idx", "*", "LIMIT", "1000001", "0"),
        S("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "3"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "SORTBY", "price", "LIMIT", "2", "2"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "SORTBY", "price", "LIMIT", "0", "3"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "LIMIT", "0", "4"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "LIMIT", "4", "1"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "LIMIT", "3", "1"),
        S("FT.SEARCH", "idx", "*", "LIMIT", "9", "0"),
        S("FT.SEARCH", "idx", "*=>[KNN 2 @v $q]", "PARAMS", "2", "q", Q, "NOCONTENT", "LIMIT", "0", "4",
          "DIALECT", "2"),
        S("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "0"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "LIMIT", "0", "1"),
        S("FT.SEARCH", "idx", "*", "LIMIT", "1", "0"),
        S("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "-1"),
        S("FT.SEARCH", "idx", "*", "NOCONTENT", "SORTBY", "price", "LIMIT", "0", "2000000"),
        S("FT.CONFIG", "SET", "MAXSEARCHRESULTS", "1000000"), data=P)
    # FT.CONFIG MAXAGGREGATERESULTS: LIMIT's check, the sorter's and the reply's cut, cursors uncut
    agg = ("FT.AGGREGATE", "idx", "*", "LOAD", "1", "@price")
    by_price = ("SORTBY", "2", "@price", "ASC")
    add("max_aggregate_results", S("FT.CONFIG", "SET", "MAXAGGREGATERESULTS", "3"),
        S(*agg, "LIMIT", "0", "4"),
        S(*agg, *by_price, "LIMIT", "0", "4"),
        S(*agg, *by_price, "LIMIT", "2", "2"),
        S(*agg, *by_price, "LIMIT", "1", "3"),
        S(*agg, *by_price),
        S(*agg, *by_price, "MAX", "5"),
        S(*agg, *by_price, "MAX", "2"),
        S(*agg, "APPLY", "@price*2", "AS", "p2", *by_price, "FILTER", "@p2 > 10"),
        S("FT.AGGREGATE", "idx", "*", "GROUPBY", "1", "@tags", "REDUCE", "COUNT", "0", "AS", "n",
          "SORTBY", "2", "@tags", "ASC"),
        S(*agg, *by_price, "WITHCURSOR", "COUNT", "4", norm="cursor"),
        S("FT.CONFIG", "SET", "MAXAGGREGATERESULTS", "0"),
        S(*agg, *by_price),
        S(*agg, *by_price, "LIMIT", "0", "1"),
        S("FT.CONFIG", "SET", "MAXAGGREGATERESULTS", "-1"),
        S(*agg, *by_price, "LIMIT", "0", "2000000"),
        S("FT.CONFIG", "SET", "MAXAGGREGATERESULTS", "unlimited"),
        S("FT.CONFIG", "GET", "MAXAGGREGATERESULTS"), data=P)
    # FT.CONFIG CURSOR_MAX_IDLE: a MAXIDLE above it is accepted (and held to it), 0 is refused
    add("cursor_max_idle", S("FT.CONFIG", "SET", "CURSOR_MAX_IDLE", "1000"),
        S(*agg, *by_price, "WITHCURSOR", "COUNT", "4", "MAXIDLE", "5000", norm="cursor"),
        S(*agg, *by_price, "WITHCURSOR", "COUNT", "4", "MAXIDLE", "0"),
        S(*agg, *by_price, "WITHCURSOR", "COUNT", "4", "MAXIDLE", "-1"),
        S("FT.CONFIG", "SET", "CURSOR_MAX_IDLE", "300000"), data=P)
    # FT.CONFIG MINSTEMLEN: read when a document is indexed; the query side keeps its own length
    add("min_stem_len", setup("FT.CREATE", "s", "ON", "HASH", "PREFIX", "1", "s:", "SCHEMA", "t", "TEXT"),
        setup("HSET", "s:1", "t", "cats and books"),
        S("FT.CONFIG", "SET", "MINSTEMLEN", "6"),
        setup("HSET", "s:2", "t", "dogs and houses"),
        S("FT.SEARCH", "s", "cat", "NOCONTENT"),
        S("FT.SEARCH", "s", "dog", "NOCONTENT"),
        S("FT.SEARCH", "s", "house", "NOCONTENT"),
        S("FT.SEARCH", "s", "dogs", "NOCONTENT"),
        S("FT.EXPLAIN", "s", "cats"),
        S("FT.EXPLAIN", "s", "houses"),
        S("FT.CONFIG", "SET", "MINSTEMLEN", "4"))
    # INFIELDS beside a field modifier (the two field sets intersect), and options after SORTABLE
    add("infields_modifiers", S("FT.SEARCH", "idx", "@name:apple", "INFIELDS", "1", "desc", "NOCONTENT"),
        S("FT.SEARCH", "idx", "@name:apple", "INFIELDS", "2", "desc", "name", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@name|desc:apple", "INFIELDS", "1", "desc", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@name:(@desc:sweet)", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@name:(apple @desc:sweet)", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@name:apple | sweet", "INFIELDS", "1", "desc", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "-@name:apple", "INFIELDS", "1", "desc", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "@tags:{red} @name:apple", "INFIELDS", "1", "desc", "NOCONTENT"), data=P)
    add("sortable_options", *[S("FT.CREATE", f"o{n}", "ON", "HASH", "PREFIX", "1", f"o{n}:", "SCHEMA", *spec)
                              for n, spec in enumerate([
                                  ("t", "TEXT", "SORTABLE", "WEIGHT", "2"), ("t", "TEXT", "SORTABLE", "NOSTEM"),
                                  ("t", "TEXT", "NOSTEM", "SORTABLE"), ("t", "TEXT", "SORTABLE", "UNF"),
                                  ("t", "TEXT", "SORTABLE", "UNF", "NOINDEX"), ("t", "TEXT", "SORTABLE", "NOINDEX"),
                                  ("t", "TEXT", "SORTABLE", "PHONETIC", "dm:en"), ("t", "TEXT", "SORTABLE", "INDEXEMPTY"),
                                  ("t", "TEXT", "SORTABLE", "INDEXMISSING"), ("t", "TAG", "SORTABLE", "SEPARATOR", ";"),
                                  ("t", "TAG", "SORTABLE", "CASESENSITIVE"), ("t", "TAG", "SORTABLE", "UNF"),
                                  ("t", "NUMERIC", "SORTABLE", "NOINDEX"), ("t", "TEXT", "SORTABLE", "WITHSUFFIXTRIE"),
                                  ("t", "TEXT", "WEIGHT", "2", "SORTABLE", "UNF", "x", "TEXT"),
                                  ("t", "TEXT", "SORTABLE", "WEIGHT", "2", "x", "TEXT")])],
        S("FT._LIST", norm="set"))
    add("search_geo", S("FT.SEARCH", "idx", "@loc:[-74 40.7 50 km]", "NOCONTENT", "SORTBY", "price"),
        S("FT.SEARCH", "idx", "*", "GEOFILTER", "loc", "2.35", "48.85", "1000", "km", "NOCONTENT", "SORTBY", "price"),
        data=P)
    add("search_scores", S("FT.SEARCH", "idx", "apple", "WITHSCORES", "NOCONTENT", norm="scores"),
        S("FT.SEARCH", "idx", "red", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF", norm="scores"),
        S("FT.SEARCH", "idx", "apple sweet", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF", norm="scores"),
        S("FT.SEARCH", "idx", "red", "WITHSCORES", "NOCONTENT", "SCORER", "BM25", norm="scores"),
        S("FT.SEARCH", "idx", "apple sweet", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF.DOCNORM", norm="scores"),
        S("FT.SEARCH", "idx", "apple", "WITHSCORES", "NOCONTENT", "SCORER", "DISMAX", norm="scores"), data=P)
    add("search_params_sortby", S("FT.SEARCH", "idx", "@price:[$lo $hi]", "PARAMS", "4", "lo", "5", "hi", "12",
                                  "SORTBY", "price", "DESC", "RETURN", "1", "price", "DIALECT", "2"),
        S("FT.SEARCH", "idx", "*", "SORTBY", "nosuch", "NOCONTENT"),
        S("FT.SEARCH", "idx", "*", "SORTBY", "name", "LIMIT", "0", "3", "RETURN", "1", "name"), data=P)
    add("tfidf_text_only", setup("FT.CREATE", "t", "ON", "HASH", "PREFIX", "1", "t:", "SCHEMA", "name", "TEXT",
                                 "desc", "TEXT", "tags", "TAG"),
        *[setup("HSET", f"t:{i}", "name", n, "desc", d, "tags", g) for i, (n, d, g) in enumerate([
            ("red apple", "a sweet red fruit", "fruit,red"), ("green apple", "a sour green fruit", "fruit"),
            ("banana", "a long yellow fruit", "fruit"), ("red shirt", "a cotton shirt that is red", "red"),
            ("apple pie", "a sweet pie with apple inside", "food"),
            ("zz", "red one two three four five apple six seven sweet", "x")])],
        *[S("FT.SEARCH", "t", q, "WITHSCORES", "NOCONTENT", "SCORER", sc, norm="scores")
          for q in ("red", "apple sweet", "apple red fruit", "red apple sweet", "red @tags:{fruit}", "(red|sweet) apple",
                    '"red apple"', "@name:apple @desc:sweet")
          for sc in ("TFIDF", "TFIDF.DOCNORM", "BM25", "DISMAX")])
    add("query_precedence", setup("FT.CREATE", "q", "ON", "HASH", "PREFIX", "1", "q:", "SCHEMA", "t", "TEXT"),
        *[setup("HSET", f"q:{i}", "t", t) for i, t in enumerate(
            ["red", "sweet apple", "red apple", "sweet", "apple", "pie"])],
        *[S("FT.SEARCH", "q", query, "NOCONTENT", "DIALECT", d, norm="docs")
          for d in ("1", "2") for query in ("red|sweet apple", "apple red|sweet", "apple -red|sweet", "-red|sweet apple",
                                            "apple ~red|pie", "red|sweet (apple|pie)", "(red|sweet) apple|pie",
                                            "red sweet|apple pie", '"sweet apple"|red pie', "red|sweet|apple pie",
                                            "(red) sweet|pie", "red|@t:sweet apple", "sweet %aple%|red")])
    # -- vectors
    add("knn", S("FT.SEARCH", "idx", "*=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", Q, "SORTBY", "d",
                 "RETURN", "1", "d", "DIALECT", "2", norm="scores"),
        S("FT.SEARCH", "idx", "(@price:[(10 +inf])=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", Q, "SORTBY", "d",
          "RETURN", "1", "d", "DIALECT", "2", norm="scores"),
        S("FT.SEARCH", "idx", "(@price:[-inf (10])=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", Q, "SORTBY", "d",
          "RETURN", "2", "d", "price", "DIALECT", "2", norm="scores"),
        S("FT.SEARCH", "idx", "(@price:[(5 (15] @tags:{fruit})=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", Q,
          "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2", norm="scores"),
        S("FT.SEARCH", "idx", "@price:[(10 +inf]=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", Q, "SORTBY", "d",
          "RETURN", "1", "d", "DIALECT", "2", norm="scores"),
        S("FT.SEARCH", "idx", "(@tags:{red})=>[KNN 2 @v $q AS d]", "PARAMS", "2", "q", Q, "SORTBY", "d",
          "RETURN", "1", "d", "DIALECT", "2", norm="scores"),
        S("FT.SEARCH", "idx", "@v:[VECTOR_RANGE 0.5 $q]=>{$YIELD_DISTANCE_AS: d}", "PARAMS", "2", "q", Q,
          "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2", norm="scores"), data=P)
    # -- FT.AGGREGATE
    add("aggregate", S("FT.AGGREGATE", "idx", "*", "GROUPBY", "1", "@tags", "REDUCE", "COUNT", "0", "AS", "n",
                       "SORTBY", "2", "@n", "DESC", norm="set"),
        S("FT.AGGREGATE", "idx", "*", "LOAD", "1", "@price", "APPLY", "@price*2", "AS", "p2",
          "FILTER", "@p2>20", "SORTBY", "2", "@p2", "ASC"),
        S("FT.AGGREGATE", "idx", "*", "LOAD", "2", "@name", "@price", "SORTBY", "2", "@price", "DESC", "LIMIT", "0", "2"),
        S("FT.AGGREGATE", "idx", "@tags:{fruit}", "GROUPBY", "0", "REDUCE", "SUM", "1", "@price", "AS", "s",
          "REDUCE", "AVG", "1", "@price", "AS", "a", "REDUCE", "MAX", "1", "@price", "AS", "mx"),
        S("FT.AGGREGATE", "idx", "*", "LOAD", "1", "@loc", "APPLY", "geodistance(@loc, -74, 40.7)", "AS", "dist",
          "SORTBY", "2", "@dist", "ASC", "LIMIT", "0", "2", norm="scores"),
        S("FT.AGGREGATE", "idx", "*", "SORTBY", "2", "@nosuch", "ASC"),
        S("FT.AGGREGATE", "idx", "@name:banana", "GROUPBY", "0", "REDUCE", "QUANTILE", "2", "@price", "0.5",
          "REDUCE", "RANDOM_SAMPLE", "2", "@name", "1", "REDUCE", "FIRST_VALUE", "4", "@name", "BY", "@price", "DESC",
          "REDUCE", "COUNT_DISTINCT", "1", "@name", "REDUCE", "SUM", "1", "@price", "REDUCE", "TOLIST", "1", "@name",
          "REDUCE", "COUNT", "0", "REDUCE", "STDDEV", "1", "@price", "REDUCE", "MIN", "1", "@Price"),
        S("FT.AGGREGATE", "idx", "@tags:{red}", "LOAD", "1", "@v"),
        S("FT.AGGREGATE", "idx", "*", "APPLY", "upper(@name)", "AS", "u", "SORTBY", "2", "@u", "ASC", "LIMIT", "0", "3"),
        data=P)
    add("aggregate_cursor", S("FT.AGGREGATE", "idx", "*", "LOAD", "1", "@price", "SORTBY", "2", "@price", "ASC",
                              "WITHCURSOR", "COUNT", "4", norm="cursor"), data=P)
    # -- FT.INFO / EXPLAIN / TAGVALS / _LIST / ALTER / DROPINDEX
    add("info_explain", S("FT.EXPLAIN", "idx", "@name:apple @price:[1 5]"),
        S("FT.TAGVALS", "idx", "tags", norm="set"),
        S("FT._LIST", norm="set"),
        S("FT.ALTER", "idx", "SCHEMA", "ADD", "extra", "TEXT"),
        S("FT.SEARCH", "idx", "@extra:foo"),
        S("FT.DEL", "idx", "p:9"), S("FT.DEL", "idx", "p:5"), S("EXISTS", "p:5"), S("FT.DEL", "idx", "p:4", "DD"),
        S("FT.DEL", "idx", "p:3", "XX"), S("FT.DEL", "nope", "p:3"),
        S("FT.DROPINDEX", "idx"),
        S("FT._LIST"),
        S("FT.INFO", "idx"), data=P)
    # -- what redis-py 8.1's redismod suite found: empty values, an escaped `$` in a tag, DIALECT
    # grammar errors, the expanded FT.EXPLAIN, BM25/BM25STD digits, LOAD 1 *
    add("redispy_parity",
        setup("FT.CREATE", "e", "ON", "HASH", "PREFIX", "1", "e:", "SCHEMA", "title", "TEXT", "tag", "TAG", "etag",
              "TAG", "INDEXEMPTY", "description", "TEXT", "INDEXEMPTY", "n", "NUMERIC"),
        setup("HSET", "e:2", "title", "x", "tag", "", "etag", "", "description", "Modern flat", "n", "1"),
        setup("HSET", "e:3", "title", "y", "tag", "a,$btc", "etag", "b", "description", "", "n", "2"),
        setup("HSET", "e:4", "title", "The quick brown fox jumps over the lazy dog", "description", "quick quick"),
        *[S("FT.SEARCH", "e", q, "NOCONTENT", "DIALECT", "2", norm="docs") for q in (
            "''", "@description:''", '@description:("" | flat)', "-@description:''", "@title|description:''",
            "@tag:''", "@etag:{''}", '@etag:{b|""}', "@title:''", "@title|tag:''", "@tag:{''}", r"@tag:{\$btc}",
            "@title:(@n:[0 10])", "@title:(x ismissing(@title))", "@title:-@description:x")],
        S("FT.SEARCH", "e", "@description:''", "DIALECT", "1"),
        S("FT.SEARCH", "e", "@tag:{$e}", "PARAMS", "2", "e", "", "DIALECT", "2"),
        S("FT.SEARCH", "e", "(*)", "DIALECT", "1"), S("FT.SEARCH", "e", "$w", "DIALECT", "1"),
        *[S("FT.EXPLAIN", "e", q, "DIALECT", "2") for q in (
            "quick fox", "the", '"quick fox"', "-@title:jumps", "@title|description:(jumps|lazy)", "@tag:(x)",
            "@n:[1.5 (5]", "@description:''", "~dogs")],
        *[S("FT.SEARCH", "e", "quick", "WITHSCORES", "NOCONTENT", "SCORER", sc) for sc in ("BM25", "HAMMING")],
        S("FT.SEARCH", "e", "quick", "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD", norm="scores"),
        S("FT.AGGREGATE", "e", "@n:[1 1]", "LOAD", "1", "*"),
        S("FT.AGGREGATE", "e", "@n:[1 1]", "LOAD", "2", "*", "@title"))
    add("missing_index", *[S(*cmd) for cmd in [
        ("FT.INFO", "nope"), ("FT.DROPINDEX", "nope"), ("FT.ALTER", "nope", "SCHEMA", "ADD", "x", "TEXT"),
        ("FT.TAGVALS", "nope", "t"), ("FT.EXPLAIN", "nope", "x"), ("FT.SYNDUMP", "nope"),
        ("FT.SYNUPDATE", "nope", "g", "a"), ("FT.ALIASADD", "a", "nope"), ("FT.ALIASUPDATE", "a", "nope"),
        ("FT.AGGREGATE", "nope", "*"), ("FT.SEARCH", "nope", "*"), ("FT.CURSOR", "READ", "nope", "1"),
        ("FT.SPELLCHECK", "nope", "x"), ("FT.PROFILE", "nope", "SEARCH", "QUERY", "*")]])
    add("info_definition", S("FT.INFO", "idx", norm="info"), data=P)
    # -- NOINDEX, stopwords
    add("noindex", setup("FT.CREATE", "nx", "ON", "HASH", "PREFIX", "1", "n:", "SCHEMA", "t", "TAG", "NOINDEX",
                         "n", "NUMERIC", "NOINDEX", "s", "TEXT"),
        setup("HSET", "n:1", "t", "a", "n", "5", "s", "hello"),
        S("FT.SEARCH", "nx", "@t:{a}"),
        S("FT.SEARCH", "nx", "@n:[0 10]"),
        S("FT.TAGVALS", "nx", "t"),
        S("FT.SEARCH", "nx", "hello", "RETURN", "1", "t"))
    add("stopwords", setup("FT.CREATE", "sw", "ON", "HASH", "PREFIX", "1", "s:", "SCHEMA", "t", "TEXT"),
        setup("HSET", "s:1", "t", "king for henry"),
        setup("HSET", "s:2", "t", "the lord of the rings"),
        S("FT.SEARCH", "sw", '"king henry"', "NOCONTENT"),
        S("FT.SEARCH", "sw", '"lord rings"', "NOCONTENT"),
        S("FT.SEARCH", "sw", "king henry", "SLOP", "0", "INORDER", "NOCONTENT"))
    # -- dictionaries, synonyms, aliases
    add("dict", S("FT.DICTADD", "d", "foo", "bar", "baz"), S("FT.DICTADD", "d", "foo"),
        S("FT.DICTDUMP", "d", norm="set"), S("FT.DICTDEL", "d", "bar", "nope"), S("FT.DICTDUMP", "d", norm="set"),
        S("FT.DICTDUMP", "nosuch"), S("FLUSHALL"), S("FT.DICTDUMP", "d"))
    add("synonyms", S("FT.SYNUPDATE", "idx", "g1", "apple", "pomme"), S("FT.SYNUPDATE", "idx", "g2", "banana"),
        S("FT.SYNDUMP", "idx", norm="syn"), wait_indexing("idx"), S("FT.SEARCH", "idx", "pomme", "NOCONTENT", norm="docs"),
        S("FT.SYNUPDATE", "idx", "g1", "SKIPINITIALSCAN", "fruit"), data=P)
    add("aliases", S("FT.ALIASADD", "a1", "idx"), S("FT.SEARCH", "a1", "banana", "NOCONTENT"),
        S("FT.ALIASADD", "a1", "idx"), S("FT.ALIASUPDATE", "a1", "idx"), S("FT.ALIASDEL", "a1"),
        S("FT.ALIASDEL", "a1"), S("FT.SEARCH", "a1", "banana"), data=P)
    # -- JSON search
    add("json_search", S("FT.SEARCH", "jdx", "@tags:{red}", "SORTBY", "price", norm="docs"),
        S("FT.SEARCH", "jdx", "apple", "RETURN", "1", "name", "SORTBY", "price"),
        S("FT.SEARCH", "jdx", "*", "RETURN", "1", "$.price", "SORTBY", "price", "DESC", "LIMIT", "0", "2"),
        S("FT.SEARCH", "jdx", "(@price:[(5 +inf])=>[KNN 2 @v $q AS d]", "PARAMS", "2", "q", Q, "SORTBY", "d",
          "RETURN", "1", "d", "DIALECT", "2", norm="scores"),
        S("FT.AGGREGATE", "jdx", "*", "GROUPBY", "1", "@tags", "REDUCE", "COUNT", "0", "AS", "n",
          "SORTBY", "2", "@n", "DESC", "LIMIT", "0", "1"), data=J)
    # -- JSON.*
    add("json_basic", S("JSON.SET", "k", "$", '{"a":1,"b":"x","c":[1,2,3],"d":{"e":true,"f":null}}'),
        S("JSON.GET", "k"), S("JSON.GET", "k", "$.a"), S("JSON.GET", "k", "$..e", "$.b", norm="json"), S("JSON.GET", "k", ".c"),
        S("JSON.TYPE", "k"), S("JSON.TYPE", "k", "$.c"), S("JSON.TYPE", "k", "$.*", norm="set"),
        S("JSON.SET", "k", "$.a", "2", "NX"), S("JSON.SET", "k", "$.z", "3", "XX"), S("JSON.SET", "k", "$.z", "3", "NX"),
        S("JSON.GET", "k", "$.z"), S("JSON.DEL", "k", "$.z"), S("JSON.DEL", "k", "$.nope"),
        S("JSON.GET", "k", "INDENT", "  ", "NEWLINE", "\n", "SPACE", " ", "$.d"),
        S("JSON.SET", "nokey", "$.a", "1"), S("JSON.GET", "nokey"), S("JSON.SET", "k", "$", "{bad"),
        S("JSON.GET", "k", "$.c[-1]"), S("JSON.FORGET", "k", "$.d.f"), S("JSON.GET", "k", "$.d"))
    add("json_mget_mset", S("JSON.SET", "a", "$", '{"x":1}'), S("JSON.SET", "b", "$", '{"x":2}'),
        S("JSON.MGET", "a", "b", "c", "$.x"), S("JSON.MGET", "a", "b", ".x"),
        S("JSON.MSET", "a", "$.x", "10", "b", "$.y", '"s"'), S("JSON.MGET", "a", "b", "$"),
        S("JSON.MSET", "a", "$.x"), S("JSON.MSET", "a", "$.nope.deep", "1", "b", "$.x", "5"), S("JSON.MGET", "a", "b", "$"),
        S("JSON.MSET", "a", "$.x", "{bad"), S("JSON.MSET", "new", "$.x", "1"), S("JSON.MSET", "new", "$", "[1]"),
        S("JSON.MERGE", "a", "$", '{"x":null,"m":{"n":1}}'), S("JSON.GET", "a"), S("JSON.MERGE", "a", "$.q.r", "1"),
        S("JSON.SET", "a", "$.nope.deep", "1"), S("JSON.GET", "nokey", "$"), S("JSON.TYPE", "nokey"),
        S("JSON.DEL", "nokey"), S("JSON.ARRLEN", "nokey", "$"), S("JSON.OBJKEYS", "a", "$.nope"),
        S("JSON.SET", "a", "$..x", "7"), S("JSON.GET", "a", "$..n"))
    add("json_bad_input", *[S("JSON.SET", "k", "$", text) for text in (
        "{bad", '{"a" 1}', '{"a":1,}', "[1,]", "[1 2]", '"abc', "", "  ", "nan", "[1]x", '{"a":1', "01", "1.",
        "-", "tru", '"\\x"', "[" * 200 + "]" * 200)],
        S("JSON.SET", "k", "$", "1"), S("JSON.SET", "k", "$.a", "1"), S("JSON.SET", "k", "a", "1"),
        S("JSON.GET", "k", "$["), S("JSON.GET", "k", "$.."), S("JSON.GET", "k", "[0"), S("JSON.NUMINCRBY", "k", "$", "x"),
        S("JSON.NUMINCRBY", "k", "$", "1e400"), S("JSON.ARRAPPEND", "k", "$"), S("JSON.STRLEN", "k"),
        S("JSON.OBJLEN", "k"), S("JSON.ARRPOP", "k"), S("JSON.TOGGLE", "k", "."), S("JSON.DEBUG", "NOPE"),
        S("JSON.SET", "k", "$", '{"a":1,"s":"x"}'),
        *[S(*argv) for argv in [("JSON.ARRAPPEND", "k", ".a", "1"), ("JSON.ARRINSERT", "k", ".a", "0", "1"),
                                ("JSON.ARRTRIM", "k", ".a", "0", "1"), ("JSON.ARRPOP", "k", "a"),
                                ("JSON.ARRAPPEND", "k", "a", "1"), ("JSON.STRAPPEND", "k", ".a", '"x"'),
                                ("JSON.TOGGLE", "k", "a"), ("JSON.NUMINCRBY", "k", ".s", "1"), ("JSON.ARRLEN", "k", ".a"),
                                ("JSON.ARRINDEX", "k", ".a", "1"), ("JSON.OBJKEYS", "k", ".a"), ("JSON.STRLEN", "k", "a"),
                                ("JSON.NUMMULTBY", "k", "$.s", "2"), ("JSON.OBJLEN", "k", ".s")]])
    add("json_arrays", S("JSON.SET", "k", "$", '{"a":[1,2,3],"b":{"a":[]},"s":"str"}'),
        S("JSON.ARRAPPEND", "k", "$.a", "4", "5"), S("JSON.ARRAPPEND", "k", "$..a", "0"),
        S("JSON.ARRINDEX", "k", "$.a", "2"), S("JSON.ARRINDEX", "k", "$.a", "9"), S("JSON.ARRINDEX", "k", "$.a", "0", "-1"),
        S("JSON.ARRINSERT", "k", "$.a", "0", '"first"'), S("JSON.ARRLEN", "k", "$..a"), S("JSON.ARRLEN", "k", "$.s"),
        S("JSON.ARRPOP", "k", "$.a"), S("JSON.ARRPOP", "k", "$.a", "0"), S("JSON.ARRPOP", "k", "$.b.a"),
        S("JSON.ARRTRIM", "k", "$.a", "1", "2"), S("JSON.GET", "k", "$.a"), S("JSON.ARRLEN", "k", ".a"),
        S("JSON.ARRAPPEND", "k", ".a", "7"), S("JSON.ARRPOP", "k", ".s"), S("JSON.ARRINSERT", "k", "$.a", "99", "1"))
    add("json_objects_strings_numbers", S("JSON.SET", "k", "$", '{"o":{"x":1,"y":2},"s":"ab","n":1,"f":1.5,"t":true}'),
        S("JSON.OBJKEYS", "k", "$.o"), S("JSON.OBJLEN", "k", "$.o"), S("JSON.OBJLEN", "k", "$.s"), S("JSON.OBJKEYS", "k", ".o"),
        S("JSON.STRLEN", "k", "$.s"), S("JSON.STRAPPEND", "k", "$.s", '"cd"'), S("JSON.GET", "k", "$.s"),
        S("JSON.STRAPPEND", "k", ".s", '"e"'), S("JSON.STRLEN", "k", ".s"),
        S("JSON.NUMINCRBY", "k", "$.n", "2"), S("JSON.NUMINCRBY", "k", "$.f", "0.25"), S("JSON.NUMMULTBY", "k", "$.n", "3"),
        S("JSON.NUMINCRBY", "k", ".n", "1"), S("JSON.NUMINCRBY", "k", "$.s", "1"), S("JSON.NUMMULTBY", "k", ".f", "2"),
        S("JSON.TOGGLE", "k", "$.t"), S("JSON.TOGGLE", "k", ".t"), S("JSON.TOGGLE", "k", "$.n"),
        S("JSON.CLEAR", "k", "$.o"), S("JSON.CLEAR", "k", "$.*"), S("JSON.GET", "k"),
        S("JSON.RESP", "k"), S("JSON.SET", "r", "$", '{"a":[1,"x",null,true,{"b":2.5}]}'), S("JSON.RESP", "r", "$.a"),
        S("JSON.DEBUG", "MEMORY", "r", "$.a[0]"))
    from tests.search import (
        stack_diff_config,
        stack_diff_explain,
        stack_diff_highlight,
        stack_diff_phonetic,
        stack_diff_suggest,
    )

    out += stack_diff_suggest.cases(S, setup, Case)
    out += stack_diff_phonetic.cases(S, setup, Case)
    out += stack_diff_config.cases(S, setup, Case)
    out += stack_diff_highlight.cases(S, setup, Case)
    out += stack_diff_explain.cases(S, setup, Case)
    _geoshape_cases(add)
    _chinese_cases(add)
    _folding_cases(add)
    return out


#: non-ASCII words Redis 8 case-folds and RediSearch 2.10.5 keeps (it lower-cases ASCII only)
FOLDED_QUERIES = ("@t:ÉCOLE", "@t:école", "@t:straße", "@t:STRASSE", "@t:ПРИВЕТ", "@t:νεανίας", "@g:{ÉCOLE}",
                  "@g:{grüßen}")
#: queries Redis 8 scores with BM25STD's b 0.75 where RediSearch 2.10.5 has 0.5
BM25STD_QUERIES = ("fox", "quick fox")


def _folding_cases(add) -> None:
    docs = ["École", "école", "Straße", "STRASSE", "ПРИВЕТ", "привет", "ΝΕΑΝΊΑΣ", "νεανίας", "GRÜẞEN",
            "the quick brown fox", "quick quick fox", "foxes run", "fox"]
    data = [setup("FT.CREATE", "cf", "ON", "HASH", "PREFIX", "1", "cf:", "SCHEMA", "t", "TEXT", "g", "TAG")]
    data += [setup("HSET", f"cf:{i}", "t", word, "g", word) for i, word in enumerate(docs)]
    add("folding_and_bm25std",
        *[S("FT.SEARCH", "cf", q, "NOCONTENT", "DIALECT", "2", norm="docs") for q in FOLDED_QUERIES],
        S("FT.SEARCH", "cf", "@t:fox", "NOCONTENT", "DIALECT", "2", norm="docs"),
        S("FT.SEARCH", "cf", "running", "NOCONTENT", "DIALECT", "2", norm="docs"),  # the bare stem run too
        S("FT.SEARCH", "cf", "running", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF", norm="scores"),
        S("FT.SEARCH", "cf", "-fox", "NOCONTENT", "DIALECT", "2", norm="docs"),  # Redis 8 excludes the stem +fox too
        S("FT.SEARCH", "cf", "quick ~foxes", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF", norm="scores"),
        *[S("FT.SEARCH", "cf", q, "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD", norm="scores")
          for q in BM25STD_QUERIES], data=data)


#: WKT texts as RediSearch's reader meets them: valid, unclosed rings, holes, and what it refuses
_SHAPES = {
    "big": "POLYGON((1 1, 1 100, 100 100, 100 1, 1 1))", "small": "POLYGON((1 1, 1 2, 2 2, 2 1, 1 1))",
    "pt": "POINT(50 50)", "garbage": "garbage", "line": "LINESTRING(0 0, 3 3)",
    "bowtie": "POLYGON((1 1, 2 2, 1 2, 2 1, 1 1))", "open": "POLYGON((1 1, 1 3, 3 3, 3 1))",
    "hole": "POLYGON((0 0, 0 10, 10 10, 10 0, 0 0),(2 2, 2 8, 8 8, 8 2, 2 2))",
    "multi": "MULTIPOLYGON(((1 1, 1 2, 2 2, 2 1, 1 1)))", "lower": "point(5 5)", "lead": " POINT(5 5)",
    "spaced": "POINT (5 5)", "wide": "POINT(5  5)", "tail": "POINT(5 5) ", "ccw": "POLYGON((0 0, 10 0, 10 10, 0 10, 0 0))",
    "xyz": "POINT(5 5 5)", "exp": "POINT(1e1 2.5)", "signs": "POINT(-5 +5)", "p77": "POINT(7 7)",
    "tri": "POLYGON((0 0, 0 10, 10 10))", "outside": "POLYGON((0 0, 0 10, 10 10, 10 0, 0 0), (20 20, 20 30, 30 30, 30 20, 20 20))",
    "empty": "POLYGON EMPTY", "inf": "POINT(inf 5)", "trailing": "POLYGON((0 0, 0 10, 10 10, 10 0, 0 0)) trailing",
}


def _geoshape_cases(add) -> None:
    data = [setup("FT.CREATE", "g", "ON", "HASH", "PREFIX", "1", "g:", "SCHEMA", "geom", "GEOSHAPE", "FLAT",
                  "name", "TEXT", "SORTABLE", "n", "NUMERIC")]
    data += [setup("HSET", f"g:{name}", "geom", wkt, "name", name, "n", str(len(name))) for name, wkt in _SHAPES.items()]
    data.append(setup("HSET", "g:none", "name", "none", "n", "4"))
    square = "POLYGON((0 0, 0 60, 60 60, 60 0, 0 0))"
    steps = []
    for op in ("WITHIN", "CONTAINS", "INTERSECTS", "DISJOINT"):
        for shape in (square, "POINT(7 7)", "POINT(1 1)", _SHAPES["small"]):
            steps.append(S("FT.SEARCH", "g", f"@geom:[{op} $p]", "PARAMS", "2", "p", shape, "NOCONTENT", "DIALECT", "2",
                           "LIMIT", "0", "100", "SORTBY", "name"))
        steps.append(S("FT.EXPLAIN", "g", f"@geom:[{op} $p]", "PARAMS", "2", "p", "POINT(1 2)", "DIALECT", "2"))
    steps += [
        S("FT.SEARCH", "g", "@geom:[WITHIN $p] @name:small", "PARAMS", "2", "p", square, "DIALECT", "2"),
        S("FT.SEARCH", "g", "-@geom:[WITHIN $p]", "PARAMS", "2", "p", square, "NOCONTENT", "DIALECT", "2", "LIMIT", "0",
          "100", "SORTBY", "name"),
        S("FT.SEARCH", "g", "@geom:[WITHIN $p] | @n:[3 3]", "PARAMS", "2", "p", square, "NOCONTENT", "DIALECT", "2",
          "LIMIT", "0", "100", "SORTBY", "name"),
        S("FT.SEARCH", "g", "@geom:[within $p]", "PARAMS", "2", "p", square, "NOCONTENT", "DIALECT", "2", "SORTBY", "name"),
        S("FT.SEARCH", "g", "@geom:[WITHIN $p]", "PARAMS", "2", "p", "bad wkt", "NOCONTENT", "DIALECT", "2"),
        S("FT.SEARCH", "g", "@geom:[WITHIN $p]", "PARAMS", "2", "p", "POLYGON((0 0, 20 20, 0 20, 20 0, 0 0))", "DIALECT", "2"),
        S("FT.SEARCH", "g", "@geom:[WITHIN $zz]", "DIALECT", "2"),
        S("FT.SEARCH", "g", "@name:[WITHIN $p]", "PARAMS", "2", "p", square, "DIALECT", "2"),
        S("FT.SEARCH", "g", "@nope:[WITHIN $p]", "PARAMS", "2", "p", square, "DIALECT", "2"),
        S("FT.AGGREGATE", "g", "@geom:[CONTAINS $p]", "PARAMS", "2", "p", "POINT(1.5 1.5)", "DIALECT", "2", "LOAD", "1",
          "@geom", "SORTBY", "2", "@geom", "ASC"),
        S("FT.INFO", "g", norm="info"),
        S("DEL", "g:small"),
        S("FT.SEARCH", "g", "@geom:[WITHIN $p]", "PARAMS", "2", "p", square, "NOCONTENT", "DIALECT", "2", "SORTBY", "name"),
        S("FT.CREATE", "w", "ON", "HASH", "PREFIX", "1", "w:", "SCHEMA", "geom", "GEOSHAPE", "BOGUS"),
        S("FT.CREATE", "s", "ON", "HASH", "PREFIX", "1", "s:", "SCHEMA", "geom", "GEOSHAPE"),
        S("HSET", "s:1", "geom", "POLYGON((34.9 29.7, 34.9 29.8, 35.0 29.8, 35.0 29.7, 34.9 29.7))"),
        S("FT.SEARCH", "s", "@geom:[INTERSECTS $p]", "PARAMS", "2", "p",
          "POLYGON((34.8 29.6, 34.8 29.9, 35.1 29.9, 35.1 29.6, 34.8 29.6))", "NOCONTENT", "DIALECT", "2"),
        S("FT.ALTER", "s", "SCHEMA", "ADD", "geom2", "GEOSHAPE", "FLAT"), wait_indexing("s"),
        S("FT.INFO", "s", norm="info"),
        S("FT.CREATE", "j", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA", "$.geom", "AS", "geom", "GEOSHAPE", "FLAT"),
        S("JSON.SET", "j:1", "$", '{"geom":"POINT(3 3)"}'), S("JSON.SET", "j:2", "$", '{"geom":5}'),
        S("FT.SEARCH", "j", "@geom:[WITHIN $p]", "PARAMS", "2", "p", square, "DIALECT", "2"),
    ]
    add("geoshape", *steps, data=data)


def _chinese_cases(add) -> None:
    data = [setup("FT.CREATE", "zh", "ON", "HASH", "PREFIX", "1", "zh:", "LANGUAGE", "chinese", "SCHEMA", "t", "TEXT"),
            setup("HSET", "zh:1", "t", "我爱北京天安门"),
            setup("HSET", "zh:2", "t", "上海是一个大城市, hello World running"),
            setup("HSET", "zh:3", "t", "北京大学的学生"),
            setup("HSET", "zh:4", "t", "他来到了网易杭研大厦。The quick brown foxes are running!")]
    words = ["北京", "天安门", "北京天安门", "大城市", "hello", "run", "running", "学生", "爱", "网易", "杭研", "大厦",
             "杭研大厦", "fox", "foxes", "the", "(北京|上海)", "北京*", '"北京 天安门"', "北京 -学生"]
    add("chinese", *[S("FT.SEARCH", "zh", w, "NOCONTENT", "SORTBY", "t") for w in words], data=data)


# ---------------------------------------------------------------------------------------------
# the runner

_FLOAT = re.compile(rb"^-?(\d+\.\d*|\d*\.\d+|\d+)(e[-+]?\d+)?$", re.I)


def _round(x: float) -> float:
    if x == 0 or math.isinf(x) or math.isnan(x):
        return x
    return round(x, 3 - int(math.floor(math.log10(abs(x)))))


def normalise(reply, norm: frozenset):
    if "scores" in norm:
        reply = _scores(reply)
    if "docs" in norm:
        reply = _docs(reply)
    if "set" in norm:
        reply = _set(reply)
    if "cursor" in norm:
        reply = _cursor(reply)
    if "info" in norm:
        reply = _info(reply)
    if "json" in norm and isinstance(reply, bytes):
        reply = json.loads(reply)
    if "syn" in norm:
        reply = _syn(reply)
    if "profile" in norm:
        reply = _profile(reply)
    return reply


def _profile(value):
    """FT.PROFILE: the reply, the iterator tree and the result processors' types, from RediSearch
    2.10's shape (``[reply, shard]``; RESP3 the reply's map with a ``profile``) or Redis 8's
    (``Shards``/``Coordinator``). Times and counters are the engine's own: Pion's counters are the
    sizes of the sets it built, RediSearch's the reads of its lazy iterators (``Counter`` and
    ``Time`` are dropped, and a NUMERIC/GEO range's ``Term`` and ``Size``, which are RediSearch's
    range-tree nodes); an intersection's children are compared as a set (each engine orders them
    its own way: Pion smallest result first, RediSearch smallest estimate first)."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, dict):
        if b"Results" in value:
            result, shard = value[b"Results"], value[b"Profile"][b"Shards"][0]
        else:
            result = {k: v for k, v in value.items() if k != b"profile"}
            shard = value[b"profile"]
        tree, stages = shard[b"Iterators profile"][0], shard[b"Result processors profile"]
    else:
        result, prof = value
        if prof and prof[0] == b"Shards":
            prof = prof[1][0]
        pairs = {p[0]: p[1:] for p in prof}
        tree, stages = pairs[b"Iterators profile"][0], pairs[b"Result processors profile"]
    return [_docs(result), _iterator(tree), [_stage_type(s) for s in stages]]


def _iterator(it) -> dict:
    if isinstance(it, list):
        fields, kids = {}, []
        i = 0
        while i < len(it):
            if it[i] == b"Child iterators" and isinstance(it[i + 1], list) if i + 1 < len(it) else False:
                kids = it[i + 1:]
                break
            fields[it[i]] = it[i + 1]
            i += 2
        if kids:
            fields[b"Child iterators"] = kids
        it = fields
    out = {k: v for k, v in it.items() if k not in (b"Time", b"Counter", b"Child iterators", b"Child iterator")}
    if out.get(b"Type") in (b"NUMERIC", b"GEO"):
        out.pop(b"Term", None)
        out.pop(b"Size", None)
    kids = it.get(b"Child iterators")
    if isinstance(kids, list):
        out[b"children"] = [_iterator(k) for k in kids]
        if out.get(b"Type") == b"INTERSECT":
            out[b"children"].sort(key=repr)
    elif kids is not None:
        out[b"children"] = kids  # LIMITED: the number of iterators in the union
    if it.get(b"Child iterator") is not None:
        out[b"child"] = _iterator(it[b"Child iterator"])
    return out


def _stage_type(stage):
    if isinstance(stage, dict):
        return stage[b"Type"]
    return stage[stage.index(b"Type") + 1]


def _scores(value):
    if isinstance(value, float):
        return _round(value)
    if isinstance(value, bytes) and _FLOAT.match(value) and b"." in value:
        return repr(_round(float(value))).encode()
    if isinstance(value, list):
        return [_scores(v) for v in value]
    if isinstance(value, dict):
        return {k: _scores(v) for k, v in value.items()}
    return value


def _docs(value):
    if isinstance(value, dict) and b"results" in value:
        return {**value, b"results": sorted(value[b"results"], key=lambda d: repr(d.get(b"id")))}
    if isinstance(value, list) and value and isinstance(value[0], int):
        rest = value[1:]
        if rest and all(isinstance(x, bytes) for x in rest):  # NOCONTENT
            return [value[0], *sorted(rest)]
        step = 3 if len(rest) % 3 == 0 and rest and not isinstance(rest[1], list) and len(rest) > 1 else 2
        groups = [rest[i:i + step] for i in range(0, len(rest), step)]
        return [value[0], *[x for g in sorted(groups, key=repr) for x in g]]
    return value


def _set(value):
    if isinstance(value, dict) and b"results" in value:
        return {**value, b"results": sorted(value[b"results"], key=repr)}
    if isinstance(value, (list, set)):
        items = list(value)
        if items and isinstance(items[0], int):  # an aggregate reply: the count, then rows
            return [items[0], *sorted(items[1:], key=repr)]
        return sorted(items, key=repr)
    return value


def _cursor(value):
    """A cursor reply is [rows, cursor id]: the id is the server's own number, only 0 / non-0 compares."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], int):
        return [value[0], value[1] != 0]
    return value


_INFO_KEEP = {b"index_name", b"index_options", b"index_definition", b"attributes", b"num_docs"}


def _info(value):
    """FT.INFO's statistics (memory, timings, GC) are the engine's own; its schema part compares."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k in _INFO_KEEP}
    if isinstance(value, list):
        pairs = dict(zip(value[::2], value[1::2], strict=False))
        return [x for k, v in pairs.items() if k in _INFO_KEEP for x in (k, v)]
    return value


def _syn(value):
    """FT.SYNDUMP's term order is a hash table's."""
    if isinstance(value, dict):
        return {k: sorted(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        pairs = sorted(zip(value[::2], value[1::2], strict=False))
        return [x for k, v in pairs for x in (k, sorted(v))]
    return value


def client(port: int, protocol: int) -> redis.Redis:
    """redis-py without its reply callbacks: the comparison sees the wire's shapes."""
    c = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=20)
    c.response_callbacks = CaseInsensitiveDict({})
    return c


def call(c: redis.Redis, args: tuple):
    try:
        return c.execute_command(*args)
    except redis.ResponseError as exc:
        return ("error", str(exc))


def reset(c: redis.Redis) -> None:
    for name in c.execute_command("FT._LIST") or []:
        try:
            c.execute_command("FT.DROPINDEX", name)
        except redis.ResponseError:
            pass
    c.execute_command("FLUSHALL")


@dataclass
class StepResult:
    index: int
    args: tuple
    ours: object
    theirs: object
    same: bool


def _wait_indexing(c: redis.Redis, index: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = c.execute_command("FT.INFO", index)
        pairs = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
        if str(pairs.get(b"indexing", 0)) in ("0", "0.0", "b'0'"):
            return
        time.sleep(0.02)


def run_case(case: Case, ours: redis.Redis, theirs: redis.Redis) -> list[StepResult]:
    reset(ours)
    reset(theirs)
    results = []
    for i, step in enumerate(case.steps):
        if step.args[0] == "!WAIT":
            for c in (ours, theirs):
                _wait_indexing(c, step.args[1])
            results.append(StepResult(i, step.args, None, None, True))
            continue
        a, b = call(ours, step.args), call(theirs, step.args)
        if step.setup:
            same = isinstance(a, tuple) == isinstance(b, tuple)
        else:
            a, b = normalise(a, step.norm), normalise(b, step.norm)
            same = a == b
        results.append(StepResult(i, step.args, a, b, same))
    return results


def show(args: tuple) -> str:
    return " ".join(x.decode("latin-1") if isinstance(x, bytes) and len(x) < 40 and x.isascii() else
                    ("<bin>" if isinstance(x, bytes) else str(x)) for x in args)


def main() -> int:  # pragma: no cover - a report for people, the tests assert
    import sys
    import tempfile
    from pathlib import Path

    from tests.search.stack_differences import listed
    from tests.support.servers import ThreadServer, make_settings
    from tests.support.stack import StackServer

    verbose = "-v" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        pion = ThreadServer(make_settings(Path(tmp) / "pion")).start()
        stack = StackServer(Path(tmp) / "stack").start()
        total = differ = unlisted = 0
        try:
            for proto in (2, 3):
                ours, theirs = client(pion.port, proto), client(stack.port, proto)
                for case in cases():
                    for res in run_case(case, ours, theirs):
                        if case.steps[res.index].setup:
                            continue
                        total += 1
                        if not res.same:
                            differ += 1
                            why = listed(case.name, res.args, proto)
                            unlisted += why is None
                            if verbose:
                                print(f"RESP{proto} {case.name}[{res.index}] {show(res.args)}"
                                      f"{'  (listed: ' + why[:60] + ')' if why else ''}\n"
                                      f"   pion:  {res.ours!r}\n   stack: {res.theirs!r}")
        finally:
            stack.stop()
            pion.stop()
    print(f"{differ} of {total} replies differ ({unlisted} not listed as intentional)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
