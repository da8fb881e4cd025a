"""Vector fields: FLAT is exact, HNSW agrees with it, writes are visible before the graph has
them, updated and deleted vectors never answer from stale graph entries, filtered KNN returns
k, distances are RediSearch's (squared L2, 1 - dot, 1 - cos)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pion.vector.schema import VectorParams
from pion.vector.vectors import VectorField

RNG = np.random.default_rng(3)


def field(algorithm: str, metric: str = "COSINE", dim: int = 16) -> VectorField:
    return VectorField(VectorParams(algorithm=algorithm, dim=dim, metric=metric))


def wait_built(vec: VectorField, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while vec.graph is not None and time.time() < deadline:
        if not len(vec.graph.pending_slots(vec.slot_ver)) and not vec.graph.queue and not vec.graph.building:
            return
        time.sleep(0.01)


@pytest.mark.parametrize("metric", ["COSINE", "IP", "L2"])
def test_flat_distances_match_redisearch_definitions(metric):
    vec = field("FLAT", metric, dim=3)
    rows = np.array([[1, 0, 0], [0, 2, 0], [1, 1, 0]], dtype=np.float32)
    for i, row in enumerate(rows):
        vec.put(i + 1, row.reshape(1, -1))
    q = np.array([1, 0, 0], dtype=np.float32)
    docs, dists = vec.plan_knn(vec.prepare_query(q.tobytes()), 3, None, None, None)()
    got = dict(zip(docs.tolist(), dists.tolist(), strict=True))
    if metric == "L2":
        assert got == pytest.approx({1: 0.0, 2: 5.0, 3: 1.0})
    elif metric == "IP":
        assert got == pytest.approx({1: 0.0, 2: 1.0, 3: 0.0})
    else:
        assert got == pytest.approx({1: 0.0, 2: 1.0, 3: 1 - 1 / np.sqrt(2)}, abs=1e-6)


def test_hnsw_agrees_with_flat_and_sees_pending_writes():
    flat, hnsw = field("FLAT"), field("HNSW")
    data = RNG.standard_normal((600, 16)).astype(np.float32)
    for i, row in enumerate(data):
        flat.put(i, row.reshape(1, -1))
        hnsw.put(i, row.reshape(1, -1))
    q = hnsw.prepare_query(RNG.standard_normal(16).astype(np.float32).tobytes())
    exact = flat.plan_knn(q, 10, None, None, None)()[0].tolist()
    early = hnsw.plan_knn(q, 10, None, 200, None)()[0].tolist()  # maybe nothing in the graph yet: pending rows scanned
    wait_built(hnsw)
    built = hnsw.plan_knn(q, 10, None, 200, None)()[0].tolist()
    assert early == exact
    assert len(set(built) & set(exact)) >= 9
    hnsw.close()


def test_updates_and_deletes_never_answer_stale():
    vec = field("HNSW", "L2", dim=4)
    for i in range(50):
        vec.put(i, np.full((1, 4), float(i), dtype=np.float32))
    wait_built(vec)
    q = vec.prepare_query(np.zeros(4, dtype=np.float32).tobytes())
    assert vec.plan_knn(q, 1, None, 50, None)()[0].tolist() == [0]
    vec.put(0, np.full((1, 4), 100.0, dtype=np.float32))  # moved far away
    vec.remove(1)
    docs = vec.plan_knn(q, 2, None, 50, None)()[0].tolist()
    assert docs == [2, 3]
    wait_built(vec)
    assert vec.plan_knn(q, 2, None, 50, None)()[0].tolist() == [2, 3]
    assert len(vec) == 49
    vec.close()


@pytest.mark.parametrize("policy", [None, "ADHOC_BF", "BATCHES"])
def test_filtered_knn_returns_k_even_when_selective(policy):
    vec = field("HNSW")
    data = RNG.standard_normal((3000, 16)).astype(np.float32)
    for i, row in enumerate(data):
        vec.put(i, row.reshape(1, -1))
    wait_built(vec)
    allowed = np.arange(0, 3000, 100, dtype=np.int64)  # 1%
    q = vec.prepare_query(data[5].tobytes())
    docs, dists = vec.plan_knn(q, 10, allowed, None, policy)()
    assert len(docs) == 10 and set(docs.tolist()) <= set(allowed.tolist())
    normed = data[allowed] / np.linalg.norm(data[allowed], axis=1, keepdims=True)
    exact = allowed[np.argsort(1 - normed @ q)[:10]]
    assert set(docs.tolist()) == set(exact.tolist())
    assert list(dists) == sorted(dists)
    vec.close()


def test_multi_vector_documents_use_their_nearest_vector():
    vec = field("FLAT", "L2", dim=2)
    vec.put(1, np.array([[10, 10], [0, 0]], dtype=np.float32))
    vec.put(2, np.array([[1, 1]], dtype=np.float32))
    q = vec.prepare_query(np.zeros(2, dtype=np.float32).tobytes())
    docs, dists = vec.plan_knn(q, 5, None, None, None)()
    assert docs.tolist() == [1, 2] and dists.tolist() == [0.0, 2.0]
    docs, _ = vec.plan_range(q, 1.0, None)()
    assert docs.tolist() == [1]


def test_query_blob_size_is_checked():
    from pion.protocol.errors import ReplyError

    vec = field("FLAT", dim=4)
    with pytest.raises(ReplyError, match="does not match index's expected size"):
        vec.prepare_query(b"\x00" * 12)
