"""langchain-redis, unchanged, against Pion in RESP2 and in redis-py's default RESP3:
RedisVectorStore (HASH), RedisCache (JSON.SET/JSON.GET), RedisSemanticCache and
RedisChatMessageHistory (JSON documents and an FT index over them)."""

from __future__ import annotations

import warnings

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import Generation
from langchain_redis import (
    RedisCache,
    RedisChatMessageHistory,
    RedisConfig,
    RedisSemanticCache,
    RedisVectorStore,
)
from redisvl.query.filter import Tag

from tests.support.embedder import embed

warnings.filterwarnings("ignore")


class HashEmbeddings(Embeddings):
    def embed_documents(self, texts):
        return [embed(t) for t in texts]

    def embed_query(self, text):
        return embed(text)


def test_vector_store_add_search_filter_and_delete(url_and_client):
    url, client = url_and_client
    store = RedisVectorStore(HashEmbeddings(), config=RedisConfig(index_name="lc", redis_client=client,
                                                                   metadata_schema=[{"name": "cat", "type": "tag"}]))
    ids = store.add_texts(["the cat sat on the mat", "dogs bark loudly", "cats purr softly"],
                          metadatas=[{"cat": "a"}, {"cat": "b"}, {"cat": "a"}])
    assert len(ids) == 3
    found = store.similarity_search("cat sat on the mat", k=2)
    assert found[0].page_content == "the cat sat on the mat"
    scored = store.similarity_search_with_score("dogs bark loudly", k=1)
    assert scored[0][0].page_content == "dogs bark loudly" and scored[0][1] < 0.05
    assert [d.metadata["cat"] for d in store.similarity_search("cat", k=3, filter=Tag("cat") == "b")] == ["b"]
    assert len(store.max_marginal_relevance_search("cats", k=2, fetch_k=3)) == 2
    assert store.delete([ids[1]])
    assert all(d.page_content != "dogs bark loudly" for d in store.similarity_search("dogs bark", k=3))
    store.index.delete(drop=True)


def test_exact_cache_uses_json_documents(url_and_client):
    url, client = url_and_client
    cache = RedisCache(redis_client=client, ttl=60)
    cache.update("prompt1", "llm1", [Generation(text="answer")])
    assert cache.lookup("prompt1", "llm1") == [Generation(text="answer")]
    assert cache.lookup("prompt2", "llm1") is None
    keys = client.keys("redis:*")
    assert keys and client.type(keys[0]) in (b"ReJSON-RL", "ReJSON-RL")
    assert 0 < client.ttl(keys[0]) <= 60
    cache.clear()
    assert cache.lookup("prompt1", "llm1") is None


def test_semantic_cache(url_and_client):
    url, client = url_and_client
    cache = RedisSemanticCache(embeddings=HashEmbeddings(), redis_client=client, distance_threshold=0.2)
    cache.update("what is the capital of france", "llm", [Generation(text="Paris")])
    assert cache.lookup("what is the capital of france", "llm") == [Generation(text="Paris")]
    assert cache.lookup("tell me a joke", "llm") is None
    cache.clear()
    assert cache.lookup("what is the capital of france", "llm") is None


def test_chat_message_history(url_and_client):
    url, client = url_and_client
    history = RedisChatMessageHistory(session_id="s1", redis_client=client)
    history.add_messages([HumanMessage(content="hello"), AIMessage(content="hi!")])
    assert [m.content for m in history.messages] == ["hello", "hi!"]
    assert [m["content"] for m in history.search_messages("hello")] == ["hello"]
    assert len(history) == 2
    if client.protocol_version == 3:
        # FT.INFO's index_definition is a map in RESP3, as RediSearch answers; langchain-redis reads it as a
        # list when the index exists (list.index), which fails the same way on Redis Stack 7.4 / RediSearch 2.10
        with pytest.raises(AttributeError, match="'dict' object has no attribute 'index'"):
            RedisChatMessageHistory(session_id="s2", redis_client=client)
        other = RedisChatMessageHistory(session_id="s2", redis_client=client, overwrite_index=True)
    else:
        other = RedisChatMessageHistory(session_id="s2", redis_client=client)
    other.add_message(HumanMessage(content="elsewhere"))
    assert [m.content for m in history.messages] == ["hello", "hi!"]  # sessions do not mix
    history.clear()
    assert history.messages == []
    assert [m.content for m in other.messages] == ["elsewhere"]
