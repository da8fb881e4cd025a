"""RedisVL, unchanged, against Pion in RESP2 and in redis-py's default RESP3: SearchIndex over HASH
and JSON with every query class, and the extensions (SemanticCache, SemanticRouter,
MessageHistory, SemanticMessageHistory). Embeddings come from the deterministic test embedder."""

from __future__ import annotations

import warnings

import pytest
from redisvl.extensions.cache.llm import SemanticCache
from redisvl.extensions.message_history import MessageHistory, SemanticMessageHistory
from redisvl.extensions.router import Route, SemanticRouter
from redisvl.index import SearchIndex
from redisvl.query import (
    AggregateHybridQuery,
    CountQuery,
    FilterQuery,
    HybridQuery,
    RangeQuery,
    TextQuery,
    VectorQuery,
)
from redisvl.query.filter import Num, Tag, Text
from redisvl.redis.utils import array_to_buffer
from redisvl.utils.vectorize import CustomTextVectorizer

from tests.support.embedder import DIM, embed

warnings.filterwarnings("ignore", category=UserWarning)  # HybridQuery is "experimental" in RedisVL

TEXTS = ["the quick brown fox", "jumps over the lazy dog", "hello world", "machine learning is fun",
         "redis vector search", "quick thinking fox"]


def _schema(storage: str, algorithm: str) -> dict:
    return {
        "index": {"name": f"docs_{storage}", "prefix": f"doc{storage}", "storage_type": storage},
        "fields": [
            {"name": "user", "type": "tag"},
            {"name": "text", "type": "text"},
            {"name": "age", "type": "numeric"},
            {"name": "emb", "type": "vector",
             "attrs": {"dims": DIM, "distance_metric": "cosine", "algorithm": algorithm, "datatype": "float32"}},
        ],
    }


@pytest.fixture(params=[("hash", "hnsw"), ("json", "flat")], ids=["hash-hnsw", "json-flat"])
def loaded(request, url_and_client):
    storage, algorithm = request.param
    _, client = url_and_client
    index = SearchIndex.from_dict(_schema(storage, algorithm), redis_client=client)
    index.create(overwrite=True)
    data = [{"user": f"u{i % 2}", "text": text, "age": 20 + i,
             "emb": array_to_buffer(embed(text), "float32") if storage == "hash" else embed(text)}
            for i, text in enumerate(TEXTS)]
    keys = index.load(data)
    yield index, keys, storage
    index.delete(drop=True)


def test_index_lifecycle_and_info(loaded, url_and_client):
    index, keys, storage = loaded
    _, client = url_and_client
    assert index.exists()
    assert len(keys) == len(TEXTS)
    assert int(index.info()["num_docs"]) == len(TEXTS)
    assert f"docs_{storage}" in index.listall()
    existing = SearchIndex.from_existing(f"docs_{storage}", redis_client=client)
    assert set(existing.schema.fields) == {"user", "text", "age", "emb"}
    assert existing.schema.fields["emb"].attrs.dims == DIM
    assert existing.schema.index.storage_type.value == storage


def test_vector_query_finds_the_nearest_text(loaded):
    index, _, _ = loaded
    results = index.query(VectorQuery(embed("quick fox"), "emb", return_fields=["text", "user"], num_results=3))
    assert len(results) == 3
    assert results[0]["text"] in ("the quick brown fox", "quick thinking fox")
    distances = [float(r["vector_distance"]) for r in results]
    assert distances == sorted(distances)


def test_vector_query_with_a_tag_filter_returns_only_matching_docs(loaded):
    index, _, _ = loaded
    results = index.query(VectorQuery(embed("quick fox"), "emb", return_fields=["text", "user"], num_results=3,
                                      filter_expression=Tag("user") == "u1"))
    assert len(results) == 3
    assert {r["user"] for r in results} == {"u1"}


def test_range_query_keeps_docs_within_the_threshold(loaded):
    index, _, _ = loaded
    results = index.query(RangeQuery(embed("hello world"), "emb", return_fields=["text"], distance_threshold=0.05))
    assert [r["text"] for r in results] == ["hello world"]
    assert float(results[0]["vector_distance"]) < 1e-5


def test_filter_count_and_text_queries(loaded):
    index, _, _ = loaded
    rows = index.query(FilterQuery(return_fields=["text", "age"], filter_expression=(Num("age") > 21) & (Tag("user") == "u0")))
    assert sorted(int(r["age"]) for r in rows) == [22, 24]
    assert index.query(CountQuery(filter_expression=Tag("user") == "u1")) == 3
    text_rows = index.query(TextQuery("quick fox dog", "text", num_results=3, return_fields=["text"]))
    assert text_rows and all(any(w in r["text"] for w in ("quick", "fox", "dog")) for r in text_rows)
    assert index.query(FilterQuery(return_fields=["text"], filter_expression=Text("text") % "mach*"))[0]["text"] == "machine learning is fun"


def test_hybrid_queries_fuse_text_and_vector(loaded):
    index, _, _ = loaded
    hybrid = index.query(HybridQuery(text="quick fox", text_field_name="text", vector=embed("quick fox"),
                                     vector_field_name="emb", num_results=3, return_fields=["text"]))
    assert len(hybrid) == 3 and "fox" in hybrid[0]["text"]
    agg = index.query(AggregateHybridQuery(text="quick fox", text_field_name="text", vector=embed("quick fox"),
                                           vector_field_name="emb", num_results=3, return_fields=["text"]))
    assert len(agg) == 3 and "fox" in agg[0]["text"]
    scores = [float(r["hybrid_score"]) for r in agg]
    assert scores == sorted(scores, reverse=True)


def _vectorizer() -> CustomTextVectorizer:
    return CustomTextVectorizer(embed=embed, embed_many=lambda texts: [embed(t) for t in texts])


def test_semantic_cache_hits_misses_and_clears(url_and_client):
    _, client = url_and_client
    cache = SemanticCache(name="llmcache", redis_client=client, vectorizer=_vectorizer(), distance_threshold=0.2,
                          overwrite=True)
    cache.store(prompt="what is the capital of france", response="paris")
    hit = cache.check(prompt="what is the capital of france")
    assert hit and hit[0]["response"] == "paris"
    assert cache.check(prompt="tell me a joke about cats") == []
    cache.clear()
    assert cache.check(prompt="what is the capital of france") == []
    cache.delete()


def test_semantic_router_routes_and_persists_its_config(url_and_client):
    _, client = url_and_client
    routes = [Route(name="greeting", references=["hello there", "hi how are you"], distance_threshold=0.6),
              Route(name="farewell", references=["goodbye friend", "see you later"], distance_threshold=0.6)]
    router = SemanticRouter(name="router", routes=routes, vectorizer=_vectorizer(), redis_client=client, overwrite=True)
    assert router("hello there friend").name == "greeting"
    matches = router.route_many("see you later", max_k=2)
    assert matches[0].name == "farewell" and float(matches[0].distance) < 1e-6
    config = client.json().get("router:route_config")
    assert {r["name"] for r in config["routes"]} == {"greeting", "farewell"}
    router.delete()


def test_message_histories(url_and_client):
    _, client = url_and_client
    history = MessageHistory(name="hist", redis_client=client)
    history.add_messages([{"role": "user", "content": "hello"}, {"role": "llm", "content": "hi there"}])
    assert [m["content"] for m in history.get_recent(top_k=5)] == ["hello", "hi there"]
    history.clear()
    assert history.get_recent(top_k=5) == []
    history.delete()
    semantic = SemanticMessageHistory(name="shist", redis_client=client, vectorizer=_vectorizer(),
                                      distance_threshold=0.7, overwrite=True)
    semantic.add_messages([{"role": "user", "content": "what is redis"}, {"role": "llm", "content": "redis is a database"},
                           {"role": "user", "content": "tell me about cats"}])
    relevant = [m["content"] for m in semantic.get_relevant("redis database", top_k=2)]
    assert "redis is a database" in relevant and "tell me about cats" not in relevant
    assert len(semantic.get_recent(top_k=2)) == 2
    semantic.delete()
