"""Text scorers, with RediSearch's formulas (``ext/default.c``, ``redisearch_rs/idf``).

A term's contribution to a document is computed where the term matches (``term_score``); the
query tree sums contributions (intersections and unions add their children, as RediSearch's
recursive scorers do), then ``finish`` applies the per-document part (document score, TFIDF's
normalisation). BM25STD is the default, as in Redis 8.
"""

from __future__ import annotations

import math

from pion.protocol.errors import ReplyError

SCORERS = ("BM25STD", "BM25", "TFIDF", "TFIDF.DOCNORM", "DISMAX", "DOCSCORE", "BM25STD.TANH", "BM25STD.NORM",
           "HAMMING")
#: BM25STD and its two normalised forms share the per-term formula
BM25STD_FAMILY = ("BM25STD", "BM25STD.TANH", "BM25STD.NORM")
DEFAULT = "BM25STD"
TANH_FACTOR = 4.0
#: RediSearch declares BM25's k1 ``static const float k1 = 1.2`` and computes in double: the
#: constant is 1.2 rounded to single precision (and BM25STD's ``k1 + 1`` is 2.2 so rounded), which
#: shows in a score's eighth digit (redis-py's scorer tests compare all of them)
K1 = 1.2000000476837158
K1_PLUS_1 = 2.200000047683716
#: BM25STD's length normalisation b: Redis 8's Query Engine declares ``static const float b = 0.75f``
#: (RediSearch 8.4's src/ext/default.c; its EXPLAINSCORE prints ``1 - b 0.75 + b 0.75``). RediSearch
#: 2.10 (Redis Stack 7.4) used 0.5, BM25's: Pion follows 8.x, listed in docs/compat-differences.md
BM25STD_B = 0.75


def check(name: str) -> str:
    upper = name.upper()
    if upper not in SCORERS:
        raise ReplyError(f"Scoring function `{name}` not found")
    return upper


def idf(total_docs: int, term_docs: int) -> float:
    """TFIDF's IDF: the binary exponent of 1 + (N + 1) / n (RediSearch uses ilogb)."""
    term_docs = term_docs or 1
    value = 1.0 + (total_docs + 1) / term_docs
    return float(math.frexp(value)[1] - 1)


def idf_bm25(total_docs: int, term_docs: int) -> float:
    total = max(total_docs, term_docs)
    return math.log(1.0 + (total - term_docs + 0.5) / (term_docs + 0.5))


def term_score(scorer: str, freq: float, weight: float, total_docs: int, term_docs: int,
               doc_len: int, avg_len: float) -> float:
    if scorer in BM25STD_FAMILY:
        b = BM25STD_B
        norm = doc_len / avg_len if avg_len else 0.0
        return weight * idf_bm25(total_docs, term_docs) * freq * K1_PLUS_1 / (freq + K1 * (1.0 - b + b * norm))
    if scorer == "BM25":
        b = 0.5
        return weight * idf(total_docs, term_docs) * freq / (freq + K1 * (1.0 - b + b * avg_len))
    if scorer in ("TFIDF", "TFIDF.DOCNORM"):
        return weight * freq * idf(total_docs, term_docs)
    if scorer == "DISMAX":
        return weight * freq
    return 0.0


def filter_score(scorer: str, avg_len: float) -> float:
    """What a tag, numeric or geo child of an intersection adds (a result of frequency 1 and no term):
    its frequency under TFIDF and DISMAX, BM25's saturation of it without an IDF. BM25STD scores
    terms only."""
    if scorer in ("TFIDF", "TFIDF.DOCNORM", "DISMAX"):
        return 1.0
    if scorer == "BM25":
        return 1.0 / (1.0 + K1 * (0.5 + 0.5 * avg_len))
    return 0.0


def finish(scorer: str, raw: float, doc_score: float, max_freq: int, doc_len: int) -> float:
    if scorer == "DOCSCORE":
        return doc_score
    if scorer in ("TFIDF", "TFIDF.DOCNORM"):
        norm = max_freq if scorer == "TFIDF" else doc_len
        if doc_score == 0 or norm == 0:
            return 0.0
        return doc_score * raw / norm
    if scorer == "DISMAX":
        return raw
    score = doc_score * raw
    if scorer == "BM25STD.TANH":
        return math.tanh(score / TANH_FACTOR)
    return score


def normalise(scorer: str, scores: dict[int, float]) -> None:
    """BM25STD.NORM (Redis 8.4): every matched document's BM25STD score divided by the largest of
    them (RediSearch's "Score Max Normalizer" runs over all matches, before sorting and LIMIT), so
    the best match scores 1. Other scorers are left as they are."""
    if scorer != "BM25STD.NORM" or not scores:
        return
    top = max(scores.values())
    if top > 0:
        for doc, score in scores.items():
            scores[doc] = score / top


def wildcard_score(scorer: str, doc_score: float, doc_len: int, avg_len: float, max_freq: int) -> float:
    """The score of a document matched by ``*`` (RediSearch's virtual result: weight 1, freq 1)."""
    if scorer in BM25STD_FAMILY:
        norm = doc_len / avg_len if avg_len else 0.0
        raw = K1_PLUS_1 / (1.0 + K1 * (1.0 - BM25STD_B + BM25STD_B * norm))  # (k1 + 1) / (1 + k1 (1 - b + b len/avg)), idf 1
        return finish(scorer, raw, doc_score, max_freq, doc_len)
    if scorer == "BM25":
        return finish(scorer, 1.0 / (1.0 + K1 * (0.5 + 0.5 * avg_len)), doc_score, max_freq, doc_len)
    if scorer in ("TFIDF", "TFIDF.DOCNORM"):
        return finish(scorer, 1.0, doc_score, max(max_freq, 1), max(doc_len, 1))
    if scorer == "DISMAX":
        return 1.0
    return doc_score
