"""Where Pion answers differently from Redis Stack (RediSearch 2.10.5, RedisJSON 2.8.3), in one place.

Each entry names the case of ``stack_diff.py``, the command it applies to (its first arguments), the
protocols, whether it is ``intentional`` (Pion answers so on purpose) or ``open`` (a known gap, not yet
closed), and why. ``test_stack_diff.py`` skips a listed difference with its reason and fails on an
unlisted one, and fails too when a listed one no longer differs (the list stays true).
docs/compat-differences.md is this list for people.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Difference:
    case: str
    prefix: tuple[str, ...]  # the command's first arguments, compared case-insensitively
    protocols: tuple[int, ...]
    kind: str  # "intentional" or "open"
    reason: str
    whole: bool = False  # ``prefix`` is the whole command, not its start


BOTH = (2, 3)

_DEFAULT_SCORER = ("Pion's default scorer is BM25STD, Redis 8's default; RediSearch 2.10 defaults to TFIDF "
                   "(SCORER TFIDF gives RediSearch 2.10's scores on Pion)")
_UNION_EXPANSIONS = ("a term under a union inside an intersection: RediSearch's union iterator reported only the "
                     "first matching expansion of `apple` (not its stem `+appl`) for one document, so its score "
                     "differs; Pion scores every expansion, as the documented formula does (the distance penalty "
                     "agrees)")
_PHONETIC_REPEATS = ("a phonetic term inside an intersection, on a document where words under MIN_PHONETIC_TERM_LEN "
                     "repeat the code before them (\"Jon x y z\" holds <JN 4 times, as RediSearch 2.10.5 indexes it): "
                     "RediSearch counts the repeats in TFIDF's norm but scores the union under the intersection "
                     "without them (TFIDF 0.75, DISMAX 3); Pion adds the code's frequency (1.75, 5); alone the term "
                     "scores the same on both")
_TFIDF_VECTOR_NORM = ("TFIDF's norm on a document with a vector field: RediSearch 2.10 counted the vector into the "
                      "document's highest term frequency (+1); Redis 8.4 does not (redis-py 8.1's FT.HYBRID tests "
                      "expect TFIDF 2 for `shoes` in `red shoes` with two vector fields), and Pion follows 8.4")
_STREAMING_TOTAL = ("FT.AGGREGATE total_results of a pipeline without SORTBY or GROUPBY: RediSearch counts the rows "
                    "its iterator had read when the reply was built (here 1 for 2 rows); Pion counts every match")
_JSONPATH_ERRORS = ("JSONPath syntax errors: RedisJSON quotes the path with a `<<<<----` marker and lists the "
                    "expected tokens; Pion names the position and what it expected")

_EXPLAIN_BM25 = ("EXPLAINSCORE under BM25 and BM25STD: Redis 8 words a term's line with its weight (`(0.71 = Weight "
                 "1.00 * IDF 2.00 * F 2 / ...`) and BM25STD's with b 0.75, the b it scores with; RediSearch 2.10 leaves "
                 "the weight out and prints b 0.5")

_NOT_EXPANDED = ("a word under NOT (`-`) or OPTIONAL (`~`) is expanded (stem, synonyms) as Redis 8's expander walks every "
                 "node (RediSearch 8.4's QueryNode_Expand), so FT.EXPLAIN prints its UNION; RediSearch 2.10's expander "
                 "walked only unions and phrases")
_CASE_FOLDING = ("TEXT terms and TAG values are Unicode case-folded as in Redis 8's Query Engine (`ÉCOLE` is "
                 "`école`, `straße` is `strasse`, a final `ς` is `σ`); RediSearch 2.10.5 lower-cases ASCII only")
_BM25STD_B = ("SCORER BM25STD: Redis 8's length normalisation b is 0.75, RediSearch 2.10.5's 0.5 (with b 0.5 "
              "Pion's formula gives Redis Stack's scores, tests/search/test_bm25std.py)")

DIFFERENCES: list[Difference] = [
    *[Difference(case, (cmd, *args), BOTH, "intentional", _NOT_EXPANDED, whole=True)
      for case, cmd, args in (
          ("redispy_parity", "FT.EXPLAIN", ("e", "-@title:jumps", "DIALECT", "2")),
          ("redispy_parity", "FT.EXPLAIN", ("e", "~dogs", "DIALECT", "2")),
          ("explain", "FT.EXPLAIN", ("idx", "-apple")), ("explain", "FT.EXPLAIN", ("idx", "-apple red", "DIALECT", "2")),
          ("explain", "FT.EXPLAIN", ("idx", "@name:apple -red")), ("explain", "FT.EXPLAIN", ("idx", "@name:apple ~red")),
          ("explain", "FT.EXPLAIN", ("idx", "red -shirt")), ("explain", "FT.EXPLAIN", ("idx", "~apple")),
          ("explain", "FT.EXPLAIN", ("idx", "~red apple")), ("explain", "FT.EXPLAINCLI", ("idx", "@name:apple -red")))],
    *[Difference("explainscore", ("FT.SEARCH", "idx", q, "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "SCORER", s), BOTH,
                 "intentional", _EXPLAIN_BM25, whole=True) for q, s in (("red apple", "BM25"), ("red", "BM25STD"))],
    *[Difference("folding_and_bm25std", ("FT.SEARCH", "cf", q, "NOCONTENT", "DIALECT", "2"), BOTH, "intentional",
                 _CASE_FOLDING, whole=True)
      for q in ("@t:ÉCOLE", "@t:école", "@t:straße", "@t:STRASSE", "@t:ПРИВЕТ", "@t:νεανίας", "@g:{ÉCOLE}",
                "@g:{grüßen}")],
    *[Difference("folding_and_bm25std", args, BOTH, "intentional",
                 "a word under NOT or OPTIONAL is expanded (stem, synonyms) as Redis 8's expander walks every node; "
                 "RediSearch 2.10's walked only unions and phrases, so `-fox` kept `foxes run` (stem +fox) and "
                 "`~foxes` scored only the word", whole=True)
      for args in (("FT.SEARCH", "cf", "-fox", "NOCONTENT", "DIALECT", "2"),
                   ("FT.SEARCH", "cf", "quick ~foxes", "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF"))],
    *[Difference("folding_and_bm25std", ("FT.SEARCH", "cf", q, "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD"),
                 BOTH, "intentional", _BM25STD_B, whole=True) for q in ("fox", "quick fox")],
    Difference("highlight_json", ("FT.SEARCH", "j", "dog", "HIGHLIGHT", "FIELDS", "1", "title"), BOTH, "intentional",
               "HIGHLIGHT/SUMMARIZE FIELDS on a JSON index: RediSearch 2.10 answers `No such property` for every "
               "attribute (it looks the name up as a JSON path); Pion highlights the attribute, as on a hash"),
    Difference("highlight_chinese", ("FT.SEARCH", "c", "天安门", "HIGHLIGHT"), BOTH, "intentional",
               "LANGUAGE chinese: which words a text holds is the segmenter's (Pion: jieba, RediSearch: friso); "
               "friso cuts the second `天安门` of `天安门，天安门上` into other words, so RediSearch highlights one"),
    Difference("search_scores", ("FT.SEARCH", "idx", "apple", "WITHSCORES", "NOCONTENT"), BOTH, "intentional",
               _DEFAULT_SCORER, whole=True),
    *[Difference("search_scores", ("FT.SEARCH", "idx", q, "WITHSCORES", "NOCONTENT", "SCORER", "TFIDF"), BOTH,
                 "intentional", _TFIDF_VECTOR_NORM, whole=True) for q in ("red", "apple sweet")],
    *[Difference("explainscore", ("FT.SEARCH", "idx", q, "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "SCORER", s),
                 BOTH, "intentional", _TFIDF_VECTOR_NORM, whole=True)
      for q, s in (("apple", "TFIDF"), ("red apple", "TFIDF"), ("red|banana", "TFIDF"),
                   ("@price:[1 30] red", "TFIDF"), ("appl*", "TFIDF"), ('"red apple"', "TFIDF"),
                   ("apple=>{$weight:2} sweet", "TFIDF"), ("red ~apple", "TFIDF"))],
    Difference("explainscore", ("FT.SEARCH", "idx", "*", "WITHSCORES", "EXPLAINSCORE", "SCORER", "TFIDF", "SORTBY"),
               BOTH, "intentional", _TFIDF_VECTOR_NORM),
    Difference("profile", ("FT.PROFILE", "idx", "SEARCH", "QUERY", "~red apple", "WITHSCORES", "SCORER", "TFIDF"),
               BOTH, "intentional", _TFIDF_VECTOR_NORM),
    Difference("profile", ("FT.PROFILE", "idx", "SEARCH", "QUERY", "red", "SORTBY", "price", "WITHSCORES", "SCORER",
                           "TFIDF"), BOTH, "intentional", _TFIDF_VECTOR_NORM),
    Difference("redispy_parity", ("FT.SEARCH", "e", "quick", "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD"), BOTH,
               "intentional", "SCORER BM25STD: Redis 8.4's length normalisation b is 0.75 (RediSearch 8.4's "
               "`static const float b = 0.75f`), RediSearch 2.10.5's 0.5; Pion follows 8.4 "
               "(tests/search/test_redispy_parity.py checks the formula gives Stack's scores with b 0.5)", whole=True),
    *[Difference("tfidf_text_only", ("FT.SEARCH", "t", "(red|sweet) apple", "WITHSCORES", "NOCONTENT", "SCORER", s),
                 BOTH, "intentional", _UNION_EXPANSIONS, whole=True) for s in ("TFIDF", "TFIDF.DOCNORM", "BM25")],
    Difference("aggregate", ("FT.AGGREGATE", "idx", "@tags:{red}", "LOAD", "1", "@v"), BOTH, "intentional",
               _STREAMING_TOTAL),
    Difference("info_definition", ("FT.INFO",), BOTH, "intentional",
               "FT.INFO's index_definition carries Redis 8's `indexes_all` (false), which RediSearch 2.10 lacks"),
    Difference("phonetic_errors", ("FT.INFO",), BOTH, "intentional",
               "FT.INFO's index_definition carries Redis 8's `indexes_all` (false), which RediSearch 2.10 lacks"),
    *[Difference("phonetic_filters", ("FT.SEARCH", "pf", q, "NOCONTENT", "WITHSCORES", "SCORER", s), BOTH, "open",
                 _PHONETIC_REPEATS, whole=True)
      for q in ("@name:jon @n:[1 20]", "@name:jon @t:jon") for s in ("TFIDF", "BM25", "DISMAX")],
    Difference("geoshape", ("FT.INFO",), BOTH, "intentional",
               "FT.INFO's index_definition carries Redis 8's `indexes_all` (false), which RediSearch 2.10 lacks"),
    Difference("geoshape", ("FT.SEARCH", "g", "@geom:[WITHIN $p]", "PARAMS", "2", "p",
                            "POLYGON((0 0, 20 20, 0 20, 20 0, 0 0))"), BOTH, "intentional",
               "an invalid query polygon: the reason after `invalid geometry:` is GEOS's (Pion checks shapes with "
               "shapely: `Self-intersection[10 10]`), not boost.geometry's (`Geometry has wrong orientation`)"),
    Difference("json_objects_strings_numbers", ("JSON.DEBUG", "MEMORY"), BOTH, "intentional",
               "JSON.DEBUG MEMORY reports the size of Pion's own representation (Python objects), not RedisJSON's"),
    Difference("json_bad_input", ("JSON.GET", "k"), BOTH, "open", _JSONPATH_ERRORS),
]


def _text(x: object) -> str:
    return x.decode("latin-1") if isinstance(x, bytes) else str(x)


def listed(case: str, args: tuple, protocol: int) -> str | None:
    """The reason a difference of this step is intentional, or None."""
    words = [_text(a).upper() for a in args]
    for diff in DIFFERENCES:
        if diff.case != case or protocol not in diff.protocols or (diff.whole and len(diff.prefix) != len(words)):
            continue
        if [p.upper() for p in diff.prefix] == words[: len(diff.prefix)]:
            return f"{diff.kind}: {diff.reason}"
    return None
