"""Agent memory's keyword side (``semantic.memory.keyword_ranking``, numpy over the postings)
ranks exactly as the query engine's ``@content:(w1|w2|...)`` under BM25STD does, restricted
to the allowed documents: same ids, same order (ties by doc id)."""

from __future__ import annotations

import random

import numpy as np

from pion.semantic import memory
from pion.storage.hash_value import HashValue
from pion.vector import search
from pion.vector.engine import SearchEngine

WORDS = ["coffee", "meeting", "meetings", "project", "deadline", "garden", "gardens", "holiday", "invoice",
         "running", "runs", "run", "the", "and", "note", "after"]


class _Db:
    id = 0
    data: dict = {}


def _engine_ranking(index, text: str, allowed, limit: int) -> list[int]:
    words = [w for w in dict.fromkeys(memory._WORD.findall(text.casefold())) if len(w) > 1][:64]
    req = search.SearchRequest(query="@content:(" + "|".join(words) + ")", dialect=2, limit=1_000_000)
    _, rows = search.finish(search.plan(index, req), None)
    keep = None if allowed is None else set(allowed.tolist())
    return [row.doc_id for row in rows if keep is None or row.doc_id in keep][:limit]


def test_keyword_ranking_matches_the_query_engine():
    engine = SearchEngine()
    index = engine.create(_Db(), memory.create_argv(4), hidden=True)
    rng = random.Random(5)
    for i in range(400):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        fields = {b"content": f"note {i} {words}".encode(), b"s": b"x", b"r": b"y",
                  b"v": np.ones(4, dtype=np.float32).tobytes(), b"created": b"1"}
        index.index_key(memory.PREFIX + str(i).encode(), HashValue(fields))
    for query in ["coffee meeting", "what about the gardens and running", "note", "runs deadline invoice",
                  "the and", "zzz unknown", "holiday holiday project"]:
        for allowed in (None, np.asarray(sorted(rng.sample(range(1, 401), 150)), dtype=np.int64)):
            for limit in (5, 40, 1000):
                want = _engine_ranking(index, query, allowed, limit)
                assert memory.keyword_ranking(index, query, allowed, limit) == want, (query, limit)
