"""The PHONETIC cases of the differential suite (``stack_diff.py`` adds them to its cases).

Names that sound alike (John/Jon/Joan/Jean, Smith/Smyth/Schmidt, Catherine/Kathryn, Philip/Filip,
Knight/Night), words under MIN_PHONETIC_TERM_LEN, a phonetic field beside plain ones, JSON arrays,
the ``$phonetic`` attribute, phrases, prefixes and fuzzy terms (never expanded by sound), the
matcher errors and FT.CONFIG MIN_PHONETIC_TERM_LEN read at indexing. Scores under TFIDF, BM25 and
DISMAX (RediSearch 2.10's default is TFIDF; Pion's BM25STD is listed in stack_differences.py).
"""

from __future__ import annotations

NAMES = ["John", "Jon", "Jonathan", "Smith", "Smyth", "Schmidt", "Catherine", "Kathryn", "Philip", "Filip",
         "Al", "Ed", "Bob", "Joan", "Jean", "Xavier", "Thomas", "Knight", "Night"]


def cases(S, setup, Case) -> list:
    out = []

    def add(name, *steps):
        out.append(Case(name, list(steps)))

    data = [setup("FT.CREATE", "ph", "ON", "HASH", "PREFIX", "1", "p:", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en",
                  "t", "TEXT", "other", "TEXT", "n", "NUMERIC")]
    data += [setup("HSET", f"p:{i}", "name", name, "other", f"x{i % 3}", "n", str(i)) for i, name in enumerate(NAMES)]
    data += [setup("HSET", "p:a", "name", "John Smith went home", "other", "x0", "t", "jon"),
             setup("HSET", "p:b", "name", "Jon Smyth", "other", "x1")]

    def q(query, *extra, scorer="TFIDF"):
        return S("FT.SEARCH", "ph", query, "NOCONTENT", "WITHSCORES", "SCORER", scorer, *extra, norm="scores")

    add("phonetic_names", *data,
        *[q(f"@name:{w}") for w in ("jon", "john", "jean", "smith", "schmidt", "kathryn", "filip", "nite",
                                    "thomas", "bob", "al", "ed", "xavier", "zzzz")],
        q("jon"), q("@t:jon"), q("@name|t:jon"), q("@name:jon", scorer="BM25"), q("@name:jon", scorer="DISMAX"),
        q("@name:jon", "VERBATIM"), q("@name:jon", "EXPANDER", "SYNONYM"), q("jon", "INFIELDS", "1", "t"),
        q("jon", "INFIELDS", "1", "name"), S("FT.EXPLAIN", "ph", "@name:jon"), S("FT.EXPLAIN", "ph", "@t:jon=>{$phonetic:true}"),
        S("FT.SEARCH", "ph", "@name:smith", "RETURN", "1", "name", "SCORER", "TFIDF", norm="docs"))
    add("phonetic_attribute", *data,
        q("@name:jon=>{$phonetic:false}"), q("@name:jon=>{$phonetic:true}"), q("@name:jon=>{$phonetic:TRUE}"),
        q("@name:jon=>{$phonetic:0}"), q("@name:jon=>{$phonetic:1}"), q("jon=>{$phonetic:true}"),
        q("@name|t:jon=>{$phonetic:true}"), q("@t:jon=>{$phonetic:true}"), q("@t:jon=>{$phonetic:false}"),
        q("@name:jon=>{$phonetic:maybe}"), q("@name:jon=>{$phonetic:$p}", "PARAMS", "2", "p", "false", "DIALECT", "2"),
        q("@name:jon=>{$weight:2}"), q("@name:jon=>{$weight:2; $phonetic:false}"))
    add("phonetic_query_shapes", *data,
        q('@name:"jon smyth"'), q('@name:"john smith"'), q("@name:jo*"), q("@name:%jon%"),
        q("@name:jon @other:x0"), q("@name:(jon|smith)"), q("@name:smyth @n:[15 +inf]"),
        q("@name:jon -@other:x2"), q("@name:kathryn ~@other:x1"),
        S("FT.SEARCH", "ph", "@name:jon", "NOCONTENT", "SORTBY", "n", "LIMIT", "0", "3"),
        S("FT.AGGREGATE", "ph", "@name:smith", "LOAD", "1", "@name", "SORTBY", "1", "@name"))
    add("phonetic_errors",
        setup("FT.CREATE", "ok", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en"),
        *[S("FT.CREATE", f"m{i}", "SCHEMA", "name", "TEXT", "PHONETIC", m)
          for i, m in enumerate(("dm:fr", "dm:pt", "dm:es", "dm:xx", "xx:en", "DM:EN", "dm", "dm:en:x"))],
        S("FT.CREATE", "e1", "SCHEMA", "name", "TEXT", "PHONETIC"),
        S("FT.CREATE", "e2", "SCHEMA", "name", "TAG", "PHONETIC", "dm:en"),
        S("FT.CREATE", "e3", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en", "PHONETIC", "dm:fr"),
        S("FT.CREATE", "e4", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en", "NOSTEM", "SORTABLE"),
        S("FT.CREATE", "e5", "SCHEMA", "name", "TEXT", "WEIGHT", "2", "PHONETIC", "dm:en", "NOINDEX"),
        S("FT.INFO", "e4", norm="info"), S("FT.INFO", "e5", norm="info"),
        S("FT.ALTER", "ok", "SCHEMA", "ADD", "p2", "TEXT", "PHONETIC", "dm:es"),
        S("FT.ALTER", "ok", "SCHEMA", "ADD", "p3", "TEXT", "PHONETIC", "es"))
    add("phonetic_min_len",
        setup("FT.CREATE", "ml", "ON", "HASH", "PREFIX", "1", "m:", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en"),
        setup("HSET", "m:1", "name", "Al"), setup("HSET", "m:2", "name", "Alan"),
        S("FT.CONFIG", "GET", "MIN_PHONETIC_TERM_LEN"), S("FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "2"),
        S("HSET", "m:3", "name", "El"), S("HSET", "m:4", "name", "Ed Elan"),
        S("FT.SEARCH", "ml", "@name:al", "NOCONTENT", "SORTBY", "name"),
        S("FT.SEARCH", "ml", "@name:ed", "NOCONTENT", "SORTBY", "name"),
        S("FT.SEARCH", "ml", "@name:alan", "NOCONTENT", "SORTBY", "name"),
        S("FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "5"), S("HSET", "m:5", "name", "Ellen Allen"),
        S("FT.SEARCH", "ml", "@name:alen", "NOCONTENT", "SORTBY", "name"),
        S("FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "0"), S("FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "x"),
        S("FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "3"), S("FT.CONFIG", "GET", "MIN_PHONETIC_TERM_LEN"))
    add("phonetic_filters",
        setup("FT.CREATE", "pf", "ON", "HASH", "PREFIX", "1", "f:", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en",
              "t", "TEXT", "n", "NUMERIC", "g", "TAG"),
        *[setup("HSET", f"f:{i}", "name", name, "t", "jon", "n", str(i), "g", "a" if i % 2 else "b")
          for i, name in enumerate(["Jon", "Jon Jon", "John", "Joan", "Jonas", "Smith", "Jon x y z", "Jon ab cd",
                                    "x Jon", "Jon 123 ab", "ab Smith cd Jon ef"])],
        setup("HSET", "f:20", "name", "ab cd", "t", "Jon"),
        *[S("FT.SEARCH", "pf", query, "NOCONTENT", "WITHSCORES", "SCORER", scorer, norm="scores")
          for query in ("@name:jon @n:[1 20]", "@name:jon @g:{a}", "@name:jon @t:jon", "@name:john @n:[0 3]",
                        "@name:jon", "@name:jon=>{$phonetic:false}", "@name:smith", '@name:"jon ab"', "ab")
          for scorer in ("TFIDF", "BM25", "DISMAX")])
    add("phonetic_json",
        setup("FT.CREATE", "pj", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA", "$.name", "AS", "name", "TEXT",
              "PHONETIC", "dm:en", "$.city", "AS", "city", "TEXT"),
        setup("JSON.SET", "j:1", "$", '{"name":"John Smith","city":"Jonesboro"}'),
        setup("JSON.SET", "j:2", "$", '{"name":["Jon","Smyth"],"city":"Smithfield"}'),
        setup("JSON.SET", "j:3", "$", '{"name":"Catherine Philip","city":"Philadelphia"}'),
        *[S("FT.SEARCH", "pj", query, "NOCONTENT", "WITHSCORES", "SCORER", "TFIDF", norm="scores")
          for query in ("@name:jon", "@name:smith", "@name:kathryn", "@city:jon", "jon", "filip", "smith")])
    return out
