"""The FT.EXPLAIN / FT.EXPLAINCLI and EXPLAINSCORE cases of the differential suite (``stack_diff.py``
adds them): the expanded query tree (stems, synonyms, phonetic codes, field masks, numbers as
``%f``, attributes) and the score explanation of each scorer both servers have."""

from __future__ import annotations

#: queries whose FT.EXPLAIN both servers must print alike (on the products index)
EXPLAINED = [
    "apple", "hello", "running", "42", "@name:apple @price:[1 5]", "red -shirt", "appl*", "%aple%", "%%aple%%",
    "*ple", "*ppl*", "@name:appl*", '"red apple"', '@name:"red apple"', "@tags:{red|blue}", "-@tags:{red}",
    "@loc:[-74 40.7 50 km]", "@loc:[2.3 48.8 10 mi]", "~red apple", "~apple", "-apple", "*", "@price:[(10 +inf]",
    "@price:[1.5 (7]", "the", "a b", "red the apple", "apple|banana|pie", "(apple red) | banana",
    "@name:apple red", "@name|desc:apple", "@name:(apple red)", "@name:apple red @price:[1 5]",
    "@name:apple @price:[1 5] red", "@name:apple|red", "@name:apple -red", "@name:apple ~red",
    "@name:apple @tags:{x}", "@name:hello @desc:world", "@tags:{red} @price:[1 30]", "apple -@price:[1 5]",
    "apple=>{$weight:2}", "(red apple)=>{$weight:2;$slop:1}", "@tags:{red | blue}=>{$weight:3}",
    "@price:[1 5]=>{$weight:3}", '"red apple"=>{$slop:2}',
]
EXPLAINED_D2 = ["hello world", "w'ap*e'", "@tags:{red*}", "@name:apple red", "@name:apple|red", "-apple red"]


def cases(S, setup, Case) -> list:
    from tests.search.stack_diff import _products, vec

    P = _products()
    explain = [S("FT.EXPLAIN", "idx", q) for q in EXPLAINED]
    explain += [S("FT.EXPLAIN", "idx", q, "DIALECT", "2") for q in EXPLAINED_D2]
    explain += [S("FT.EXPLAIN", "idx", "apple", "VERBATIM"), S("FT.EXPLAIN", "idx", "apple", "INFIELDS", "1", "name"),
                S("FT.EXPLAIN", "idx", "*=>[KNN 3 @v $q]", "PARAMS", "2", "q", "aaaaaaaa", "DIALECT", "2"),
                S("FT.EXPLAIN", "idx", "(@price:[10 20])=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", "aaaaaaaa",
                  "DIALECT", "2"),
                S("FT.EXPLAIN", "idx", "@v:[VECTOR_RANGE 0.5 $q]", "PARAMS", "2", "q", "aaaaaaaa", "DIALECT", "2"),
                S("FT.EXPLAINCLI", "idx", "apple|banana"), S("FT.EXPLAINCLI", "idx", "@name:apple -red")]
    phonetic = [setup("FT.CREATE", "ph", "ON", "HASH", "PREFIX", "1", "ph:", "SCHEMA", "name", "TEXT", "PHONETIC",
                      "dm:en", "raw", "TEXT", "NOSTEM", "t", "TEXT"),
                setup("FT.SYNUPDATE", "ph", "g1", "running", "jogging"),
                *[S("FT.EXPLAIN", "ph", q) for q in ("@name:jon", "jon", "@raw:running", "@t:running",
                                                      "@raw|t:running", "running", "@name:jon=>{$phonetic:false}")],
                S("FT.EXPLAIN", "ph", "running", "EXPANDER", "SYNONYM")]
    profiled = [
        ("apple", "NOCONTENT"), ("red apple",), ("apple|banana -red", "SORTBY", "price", "LIMIT", "0", "2"),
        ("@tags:{red|fruit} @price:[1 30]", "NOCONTENT"), ("*",), ("~red apple", "WITHSCORES", "SCORER", "TFIDF"),
        ("appl*",), ("%aple%",), ('"red apple"',), ("@loc:[-74 40.7 50 km]",), ("nothing",), ("the",),
        ("apple", "HIGHLIGHT"), ("*", "LIMIT", "1", "2", "SORTBY", "price", "NOCONTENT"), ("*ple", "NOCONTENT"),
        ("w'ap*e'", "NOCONTENT", "DIALECT", "2"), ("@tags:{red}", "NOCONTENT"), ("@tags:{re*}", "NOCONTENT", "DIALECT", "2"),
        ("apple|nothing", "NOCONTENT"), ("@name:red", "NOCONTENT"), ("red", "SORTBY", "price", "WITHSCORES", "SCORER", "TFIDF", "NOCONTENT"),
        ("-red", "NOCONTENT"), ("*=>[KNN 2 @v $q]", "PARAMS", "2", "q", vec(1.0, 0.0), "DIALECT", "2", "RETURN", "1", "name"),
        ("(@price:[1 30])=>[KNN 2 @v $q]", "PARAMS", "2", "q", vec(1.0, 0.0), "DIALECT", "2", "NOCONTENT"),
    ]
    profile = [S("FT.PROFILE", "idx", "SEARCH", "QUERY", *q, norm="profile") for q in profiled]
    profile += [S("FT.PROFILE", "idx", "SEARCH", "LIMITED", "QUERY", "%aple% appl*", "NOCONTENT", norm="profile"),
                S("FT.PROFILE", "idx", "AGGREGATE", "QUERY", "*", "LOAD", "1", "@name", "APPLY", "upper(@name)", "AS",
                  "u", "FILTER", "@price>5", "GROUPBY", "1", "@tags", "REDUCE", "COUNT", "0", "AS", "n", "SORTBY", "4",
                  "@n", "DESC", "@tags", "ASC", "LIMIT", "0", "3", norm="profile"),
                S("FT.PROFILE", "idx", "SEARCH", "QUERY"), S("FT.PROFILE", "idx", "NOPE", "QUERY", "x"),
                S("FT.PROFILE", "nosuch", "SEARCH", "QUERY", "x")]
    scored = [("apple", "TFIDF"), ("red apple", "TFIDF"), ("red apple", "TFIDF.DOCNORM"), ("red apple", "DISMAX"),
              ("red apple", "DOCSCORE"), ("red|banana", "TFIDF"), ("red|banana", "DISMAX"), ("@price:[1 30] red", "TFIDF"),
              ("appl*", "TFIDF"), ('"red apple"', "TFIDF"), ("apple=>{$weight:2} sweet", "TFIDF"), ("red ~apple", "TFIDF"),
              ("red apple", "BM25"), ("red", "BM25STD")]
    explainscore = [S("FT.SEARCH", "idx", q, "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "SCORER", scorer, norm="scores")
                    for q, scorer in scored]
    explainscore += [S("FT.SEARCH", "idx", "*", "WITHSCORES", "EXPLAINSCORE", "SCORER", "TFIDF", "SORTBY", "price",
                       "LIMIT", "0", "2", "RETURN", "1", "price", norm="scores"),
                     S("FT.SEARCH", "idx", "apple", "EXPLAINSCORE", "NOCONTENT")]
    return [Case("explain", [*P, *explain]), Case("explainscore", [*P, *explainscore]), Case("explain_expanders", phonetic), Case("profile", [*P, *profile])]
