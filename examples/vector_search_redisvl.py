"""Vector search through RedisVL, unchanged: a ``SearchIndex`` on Pion, KNN with a tag filter.

Prerequisites: the ``[compat]`` extra (``redisvl``) on the client's side, and the ``[search]``
and ``[embed]`` extras on the server's side (HNSW from usearch; the packaged all-MiniLM-L6-v2
that ``AI.EMBED`` runs in a worker process: the client needs no model). 20-40 s the first time
a server embeds (the model loads); ``--smoke`` indexes fewer documents.

    python examples/vector_search_redisvl.py          # starts a throwaway Pion server
    python examples/vector_search_redisvl.py --url pion://127.0.0.1:1974

RedisVL talks to Pion as to Redis (``redis://``): ``SearchIndex.from_dict(schema).create()``
sends ``FT.CREATE``, ``index.load`` writes hashes, and ``VectorQuery`` runs ``FT.SEARCH ...
KNN`` with a filter expression. The embeddings come from the server itself (``AI.EMBED``),
wrapped in RedisVL's ``CustomVectorizer``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import pion_server  # noqa: E402

DOCS = [
    ("Pion keeps a prompt prefix's K/V rows on disk, so a restart keeps the cache.", "kvcache"),
    ("A staged store makes a prefix visible all at once, or not at all.", "kvcache"),
    ("HNSW graphs answer nearest-neighbour queries over millions of vectors.", "search"),
    ("The log is fsynced before a write is acknowledged.", "durability"),
    ("Snapshots are written to a temporary file and renamed into place.", "durability"),
    ("BM25 ranks documents by the words they share with the query.", "search"),
]
MORE = [
    ("Mixture-of-experts models page their experts in from the server.", "moe"),
    ("Sparse attention picks the blocks whose keys matter for the query.", "attention"),
]


def run(url: str, smoke: bool) -> int:
    import numpy as np
    import redis
    from redisvl.index import SearchIndex
    from redisvl.query import VectorQuery
    from redisvl.query.filter import Tag

    try:
        from redisvl.utils.vectorize import CustomVectorizer
    except ImportError:  # RedisVL before 0.11 names it CustomTextVectorizer
        from redisvl.utils.vectorize import CustomTextVectorizer as CustomVectorizer

    # the first AI.EMBED waits for the server to load the model: allow it time
    client = redis.Redis.from_url(url.replace("pion://", "redis://", 1), socket_timeout=120)

    def embed(text: str) -> list[float]:
        return np.frombuffer(client.execute_command("AI.EMBED", text)[0], "<f4").tolist()

    def embed_many(texts: list[str], **_) -> list[list[float]]:
        return [np.frombuffer(blob, "<f4").tolist() for blob in client.execute_command("AI.EMBED", *texts)]

    vectorizer = CustomVectorizer(embed=embed, embed_many=embed_many)
    schema = {"index": {"name": "pion_docs", "prefix": "doc"},
              "fields": [{"name": "text", "type": "text"}, {"name": "topic", "type": "tag"},
                         {"name": "embedding", "type": "vector",
                          "attrs": {"dims": vectorizer.dims, "distance_metric": "cosine", "algorithm": "hnsw",
                                    "datatype": "float32"}}]}
    index = SearchIndex.from_dict(schema, redis_client=client)
    index.create(overwrite=True)
    try:
        docs = DOCS if smoke else DOCS + MORE
        vectors = vectorizer.embed_many([text for text, _ in docs], as_buffer=True)
        index.load([{"text": text, "topic": topic, "embedding": vec} for (text, topic), vec in zip(docs, vectors,
                                                                                              strict=True)])
        print(f"indexed {index.info()['num_docs']} documents ({vectorizer.dims} dims) in {index.name}")
        question = "does the cache survive a crash?"
        query = VectorQuery(vector=vectorizer.embed(question), vector_field_name="embedding",
                            return_fields=["text", "topic", "vector_distance"], num_results=2)
        top = index.query(query)
        for row in top:
            print(f"  {float(row['vector_distance']):.3f}  [{row['topic']}] {row['text']}")
        query.set_filter(Tag("topic") == "search")
        filtered = index.query(query)
        print(f"with the filter topic == search: {[row['text'] for row in filtered]}")
        ok = top[0]["topic"] in ("kvcache", "durability") and all(row["topic"] == "search" for row in filtered)
        ok = ok and len(filtered) == 2
        print(f"nearest documents as expected: {ok}")
        return 0 if ok else 1
    finally:
        index.delete(drop=True)
        client.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running Pion server (default: start a throwaway one)")
    parser.add_argument("--smoke", action="store_true", help="fewer documents")
    args = parser.parse_args(argv)
    if args.url:
        return run(args.url, args.smoke)
    with pion_server("--appendonly", "no") as url:
        return run(url, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
