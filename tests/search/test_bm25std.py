"""SCORER BM25STD with RediSearch's parameters: k1 1.2 and b 0.5 (RediSearch's EXPLAINSCORE prints
``1 - b 0.5 + b 0.5 * Doc Len``; the textbook b 0.75 ranked these documents differently). The
expected scores are Redis Stack's (RediSearch 2.10.5) for the same corpus, to four decimals; Redis
8's tests of the scorer (test_scorers.py) print the same b."""

from __future__ import annotations

import pytest

DOCS = ["the quick brown fox jumps over the lazy dog", "quick quick quick fox",
        "a lazy dog sleeps all day long in the warm sun", "brown bread and brown butter", "fox",
        "dog days of summer are lazy and long and hot", "running foxes run quickly"]


def _scores(reply) -> list[tuple[str, float]]:
    if isinstance(reply, dict):
        return [(item[b"id"].decode(), round(float(item[b"score"]), 4)) for item in reply[b"results"]]
    return [(reply[i].decode(), round(float(reply[i + 1]), 4)) for i in range(1, len(reply), 2)]


@pytest.fixture
def corpus(rr):
    rr.execute_command("FT.CREATE", "a", "ON", "HASH", "PREFIX", "1", "a:", "SCHEMA", "t", "TEXT", "NOSTEM")
    rr.execute_command("FT.CREATE", "c", "ON", "HASH", "PREFIX", "1", "c:", "SCHEMA", "t", "TEXT", "NOSTEM",
                       "u", "TEXT", "NOSTEM", "WEIGHT", "2")
    for i, text in enumerate(DOCS):
        rr.hset(f"a:{i}", "t", text)
        rr.hset(f"c:{i}", mapping={"t": text, "u": "fox dog" if i % 2 else "cat"})
    return rr


@pytest.mark.parametrize("index, query, expected", [
    ("a", "fox", [("a:4", 1.0552), ("a:1", 0.8685), ("a:0", 0.7379)]),
    ("a", "quick fox", [("a:1", 2.7436), ("a:0", 1.7761)]),
    ("a", "fox|dog", [("a:0", 1.4758), ("a:4", 1.0552), ("a:1", 0.8685), ("a:5", 0.7768), ("a:2", 0.7027)]),
    ("c", "fox", [("c:1", 0.5857), ("c:3", 0.5117), ("c:5", 0.4881), ("c:4", 0.4496), ("c:0", 0.3584)]),
    ("c", "lazy dog", [("c:5", 1.3298), ("c:0", 1.1491), ("c:2", 1.1115)]),
])
def test_bm25std_scores_as_redisearch(corpus, index, query, expected):
    reply = corpus.execute_command("FT.SEARCH", index, query, "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD",
                                   "DIALECT", "2")
    assert _scores(reply) == expected


@pytest.fixture
def expansions(rr):
    rr.execute_command("FT.CREATE", "x", "ON", "HASH", "PREFIX", "1", "x:", "SCHEMA", "t", "TEXT")
    rr.execute_command("FT.SYNUPDATE", "x", "g1", "dog", "hound")
    for i, text in enumerate(["foxes in the wood", "fox dog", "the dog", "lazy hound", "lazies dog", "running dogs"]):
        rr.hset(f"x:{i}", "t", text)
    return rr


@pytest.mark.parametrize("query, expected", [
    ("-fox", ["x:0", "x:2", "x:3", "x:4", "x:5"]),  # x:0 has only the stem +fox: not excluded
    ("dog -run", ["x:1", "x:2", "x:3", "x:4", "x:5"]),  # running: stem +run, not excluded
    ("fox -hound", ["x:0", "x:1"]),  # the synonym group of hound (dog) is not excluded
    ("-(fox|lazy)", ["x:0", "x:2", "x:4", "x:5"]),
])
def test_negated_words_are_not_expanded(expansions, query, expected):
    """RediSearch's query expander walks unions and non-exact phrases only: under NOT (and under
    OPTIONAL) a word reads itself, without its stem, synonyms or sound (as Redis Stack answers)."""
    reply = expansions.execute_command("FT.SEARCH", "x", query, "NOCONTENT", "DIALECT", "2")
    assert sorted(doc for doc, _ in _scores_of_ids(reply)) == expected


def test_optional_word_scores_without_its_stem(expansions):
    reply = expansions.execute_command("FT.SEARCH", "x", "dog ~lazy", "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD",
                                       "DIALECT", "2")
    scores = dict(_scores(reply))
    assert scores["x:3"] == 1.9343 and scores["x:4"] == 1.1075  # lazies (stem +lazi) adds nothing


def _scores_of_ids(reply) -> list[tuple[str, None]]:
    if isinstance(reply, dict):
        return [(item[b"id"].decode(), None) for item in reply[b"results"]]
    return [(x.decode(), None) for x in reply[1:] if isinstance(x, bytes)]
