"""FT.SEARCH ... WITHSCORES EXPLAINSCORE on Pion (RESP2 and RESP3): each explanation adds up to the
score it explains, under every scorer, and says what RediSearch says of each part
(``stack_diff_explain.py`` compares the texts with Redis Stack)."""

from __future__ import annotations

import re

import pytest
import redis

SCORERS = ["TFIDF", "TFIDF.DOCNORM", "BM25", "BM25STD", "DISMAX", "DOCSCORE", "BM25STD.TANH"]


def cmd(r, *args):
    return r.execute_command(*args)


def explained(r, *args) -> dict[bytes, tuple[float, object]]:
    """{key: (score, explanation)} whatever the protocol."""
    got = cmd(r, "FT.SEARCH", *args)
    if isinstance(got, dict):
        return {item[b"id"]: (item[b"score"][0], item[b"score"][1]) for item in got[b"results"]}
    out = {}
    for i in range(1, len(got), 2):
        score, tree = got[i + 1]
        out[got[i]] = (float(score), tree)
    return out


@pytest.fixture
def docs(rr):
    cmd(rr, "FT.CREATE", "e", "ON", "HASH", "PREFIX", "1", "e:", "SCORE_FIELD", "s", "SCHEMA", "t", "TEXT", "b", "TEXT",
        "n", "NUMERIC")
    rows = [("red apple", "a red fruit and a red skin", 1, 1.0), ("green apples", "apple pie", 2, 0.5),
            ("red shirt", "cotton", 3, 1.0), ("apple red", "red red", 4, 0.25)]
    for k, (t, b, n, s) in enumerate(rows):
        rr.hset(f"e:{k}", mapping={"t": t, "b": b, "n": n, "s": s})
    return rr


_FLOAT = rb"(-?\d+\.\d+)"
_AGG = re.compile(rb"^\(Weight " + _FLOAT + rb" \* (?:total )?children (?:TFIDF|BM25) " + _FLOAT + rb"\)$")
_DISMAX_AGG = re.compile(rb"^" + _FLOAT + rb" = Weight " + _FLOAT + rb" \* children DISMAX " + _FLOAT + rb"$")
_LEAF = re.compile(rb"^(?:\S+: )?(?:DISMAX |\((?:TFIDF )?)" + _FLOAT + rb" = ")


def _check_sums(node) -> float:
    """An aggregate's line states its children's total: check it, return the node's value."""
    if isinstance(node, bytes):
        if node == b"Irrelevant token -> score is 0" or node == b"Frequency 0 -> value 0":
            return 0.0
        return float(_LEAF.match(node).group(1))
    head, children = node
    values = [_check_sums(c) for c in children]
    dismax = _DISMAX_AGG.match(head)
    if dismax:
        value, weight, total = map(float, dismax.groups())
        assert min(abs(total - sum(values)), abs(total - max(values))) < 0.011 * len(values), (head, values)
        return value
    weight, total = map(float, _AGG.match(head).groups())
    assert abs(total - sum(values)) < 0.011 * len(values), (head, values)
    return weight * total


_FINAL = re.compile(rb"words (?:TFIDF|BM25) " + _FLOAT + rb" \* document score " + _FLOAT +
                    rb"(?: / norm (\d+))?(?: / slop (\d+))?$")


QUERIES = ["red apple", "red|apple", "apple", "@n:[1 3] red", "red ~apple", "*", "appl*", "(red apple)=>{$weight:2}"]


@pytest.mark.parametrize("scorer", SCORERS)
def test_explanations_add_up_to_the_score(docs, scorer):
    for query in QUERIES:
        _check_query(docs, scorer, query)


def _check_query(docs, scorer: str, query: str) -> None:
    found = explained(docs, "e", query, "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "SCORER", scorer)
    assert found, query
    for score, tree in found.values():
        if scorer == "DOCSCORE":
            assert tree.startswith(b"Document's score is ") and float(tree.split()[-1]) == round(score, 2)
            continue
        if scorer == "DISMAX":
            assert abs(_check_sums(tree) - score) < 0.011
            continue
        head, (inner,) = tree
        if scorer == "BM25STD.TANH":
            assert head.startswith(b"Final Normalized BM25 : tanh(stretch factor 1/4 * Final BM25 ")
            head, (inner,) = inner
        words = _check_sums(inner)
        raw, doc_score, norm, slop = _FINAL.search(head).groups()
        raw, doc_score = float(raw), float(doc_score)
        assert abs(raw - words) < 0.011 * 4, (head, words)
        expected = raw * doc_score / int(norm or 1) / int(slop or 1)
        if scorer == "BM25STD.TANH":
            import math

            expected = math.tanh(expected / 4)
        assert abs(expected - score) < 0.01, (head, score)
        assert (norm is not None) == scorer.startswith("TFIDF")
        assert (slop is not None) == (scorer.startswith("TFIDF") or scorer == "BM25")


def test_texts_of_the_parts(docs):
    found = explained(docs, "e", "@n:[1 3] red", "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "SCORER", "TFIDF")
    score, (head, (inner,)) = found[b"e:0"]
    assert head == b"Final TFIDF : words TFIDF 4.00 * document score 1.00 / norm 3 / slop 1"
    # the number range a virtual result; red 3 times in e:0, IDF the binary exponent of 1 + (4 + 1) / 3: 1;
    # both estimate 3 documents, so the intersection keeps the query's order
    assert inner == [b"(Weight 1.00 * total children TFIDF 4.00)",
                     [b"(TFIDF 1.00 = Weight 1.00 * Frequency 1)", b"(TFIDF 3.00 = Weight 1.00 * TF 3 * IDF 1.00)"]]
    assert abs(score - 4 / 3) < 1e-9
    low = explained(docs, "e", "apple", "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "SCORER", "TFIDF")
    head, _ = low[b"e:1"][1]
    assert b"document score 0.50" in head  # SCORE_FIELD
    with pytest.raises(redis.ResponseError, match="EXPLAINSCORE must be accompanied with WITHSCORES"):
        cmd(docs, "FT.SEARCH", "e", "red", "EXPLAINSCORE")
