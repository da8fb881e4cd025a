"""SVS-VAMANA vector fields (Redis 8.2): FT.CREATE's checks, FT.INFO's attributes, KNN recall
against an exact FLAT scan (uncompressed and with COMPRESSION's 8-bit codes), exact distances,
range queries, the query-time SEARCH_WINDOW_SIZE / USE_SEARCH_HISTORY attributes, and restarts
(an uncompressed graph is loaded from its file, a compressed one rebuilt from the documents)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from pion.vector import schema
from pion.vector.schema import VectorParams
from pion.vector.vectors import VectorField
from tests.support.servers import ProcessServer

DIM = 16


def _svs(metric: str, compression: str | None = None, threshold: int = 100) -> VectorField:
    params = VectorParams(algorithm="SVS-VAMANA", dim=DIM, metric=metric, compression=compression,
                          training_threshold=threshold)
    schema._check_svs(params, set())
    return VectorField(params)


def _settle(vec: VectorField, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    graph = vec.graph
    while time.time() < deadline:
        if not graph.queue and not graph.building and (graph.held or not len(graph.pending_slots(vec.slot_ver))):
            return
        time.sleep(0.01)


@pytest.mark.parametrize("compression", [None, "LVQ8"])
@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_knn_recall_against_exact_and_exact_distances(metric, compression):
    rng = np.random.default_rng(5)
    data = rng.standard_normal((600, DIM)).astype(np.float32)
    svs = _svs(metric, compression)
    flat = VectorField(VectorParams(algorithm="FLAT", dim=DIM, metric=metric))
    try:
        for i, row in enumerate(data):
            svs.put(i, row.reshape(1, -1))
            flat.put(i, row.reshape(1, -1))
        _settle(svs)
        assert len(svs.graph.index) == 600
        assert str(svs.graph.index.dtype).endswith("I8" if compression else "F32")
        shared = 0
        for _ in range(20):
            q = svs.prepare_query(rng.standard_normal(DIM).astype(np.float32).tobytes())
            docs, dists = svs.plan_knn(q, 10, None, 100, None)()
            exact_docs, exact_dists = flat.plan_knn(q, 10, None, None, None)()
            exact = dict(zip(exact_docs.tolist(), exact_dists.tolist(), strict=True))
            shared += len(set(docs.tolist()) & set(exact))
            for doc, dist in zip(docs.tolist(), dists.tolist(), strict=True):  # reported distances are exact
                if doc in exact:
                    assert dist == pytest.approx(exact[doc], abs=1e-5)
        assert shared / 200 >= 0.9
    finally:
        svs.close()


def test_compressed_rows_wait_for_the_training_threshold_and_are_found_meanwhile():
    rng = np.random.default_rng(8)
    data = rng.standard_normal((80, DIM)).astype(np.float32)
    svs = _svs("L2", "LVQ4x8", threshold=50)
    try:
        for i, row in enumerate(data[:40]):
            svs.put(i, row.reshape(1, -1))
        _settle(svs)
        assert len(svs.graph.index) == 0 and not svs.graph.trained  # below the threshold: nothing quantised
        docs, dists = svs.plan_knn(svs.prepare_query(data[7].tobytes()), 3, None, None, None)()
        assert docs[0] == 7 and dists[0] == pytest.approx(0.0, abs=1e-4)  # the held rows are scanned exactly
        svs.remove(3)
        for i, row in enumerate(data[40:], start=40):
            svs.put(i, row.reshape(1, -1))
        _settle(svs)
        assert svs.graph.trained and len(svs.graph.index) == 79  # the removed row was never added
        docs, dists = svs.plan_knn(svs.prepare_query(data[60].tobytes()), 1, None, None, None)()
        assert docs.tolist() == [60] and dists[0] == pytest.approx(0.0, abs=1e-4)
    finally:
        svs.close()


def test_range_query_matches_exact():
    rng = np.random.default_rng(9)
    data = rng.standard_normal((300, DIM)).astype(np.float32)
    svs, flat = _svs("L2"), VectorField(VectorParams(algorithm="FLAT", dim=DIM, metric="L2"))
    try:
        for i, row in enumerate(data):
            svs.put(i, row.reshape(1, -1))
            flat.put(i, row.reshape(1, -1))
        _settle(svs)
        q = svs.prepare_query(data[0].tobytes())
        got = svs.plan_range(q, 12.0, None)()
        want = flat.plan_range(q, 12.0, None)()
        assert sorted(got[0].tolist()) == sorted(want[0].tolist()) and len(want[0]) > 1
    finally:
        svs.close()


# -- over the wire ------------------------------------------------------------------------------


@pytest.fixture
def proc(tmp_path):
    srv = ProcessServer(tmp_path / "data")
    yield srv
    srv.stop()


def _client(srv: ProcessServer) -> redis.Redis:
    return redis.Redis(port=srv.port, protocol=2, socket_timeout=30)


def _create(client: redis.Redis, *params: str, name: str = "idx") -> None:
    client.execute_command("FT.CREATE", name, "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "v", "VECTOR",
                           "SVS-VAMANA", str(len(params)), *params)


BASE = ("TYPE", "FLOAT32", "DIM", str(DIM), "DISTANCE_METRIC", "L2")


@pytest.mark.parametrize("params, error", [
    (("TYPE", "FLOAT64", "DIM", "4", "DISTANCE_METRIC", "L2"), "index type: FLOAT64"),
    (("TYPE", "INT8", "DIM", "4", "DISTANCE_METRIC", "L2"), "index type: INT8"),
    (BASE + ("COMPRESSION", "PQ8"), "index compression: PQ8"),
    (BASE + ("TRAINING_THRESHOLD", "1024"), "TRAINING_THRESHOLD is only applicable with COMPRESSION"),
    (BASE + ("COMPRESSION", "LVQ8", "TRAINING_THRESHOLD", "102400"), "must be less than 102400"),
    (BASE + ("COMPRESSION", "LVQ8", "REDUCE", "4"), "REDUCE is only applicable with LeanVec"),
    (BASE + ("COMPRESSION", "LeanVec4x8", "REDUCE", "16"), "must be less than DIM 16"),
    (BASE + ("M", "16"), "Bad arguments for algorithm SVS-VAMANA: M"),
    (BASE + ("GRAPH_MAX_DEGREE", "0"), "Value is outside acceptable bounds"),
    (BASE + ("SEARCH_WINDOW_SIZE", "x"), "Could not convert argument to expected type"),
    (("TYPE", "FLOAT32", "DISTANCE_METRIC", "L2"), "without specifying DIM argument"),
])
def test_create_checks_and_creates_nothing_on_error(r, params, error):
    client = r
    with pytest.raises(redis.ResponseError, match=error):
        _create(client, *params)
    assert client.execute_command("FT._LIST") == []


@pytest.mark.parametrize("protocol", [2, 3])
def test_info_reports_the_svs_attributes(server, protocol):
    client = redis.Redis(port=server.port, protocol=protocol, socket_timeout=30)
    _create(client, *BASE, "COMPRESSION", "LeanVec8x8", "GRAPH_MAX_DEGREE", "48", "CONSTRUCTION_WINDOW_SIZE", "250",
            "SEARCH_WINDOW_SIZE", "20", "EPSILON", "0.02", "TRAINING_THRESHOLD", "2048")
    _create(client, *BASE, name="plain")
    attrs = client.execute_command("FT.INFO", "idx")
    field = attrs[b"attributes"][0] if protocol == 3 else attrs[attrs.index(b"attributes") + 1][0]
    if protocol == 2:
        field = dict(zip(field[::2], field[1::2], strict=False))
    assert field[b"algorithm"] == b"SVS-VAMANA" and field[b"compression"] == b"GlobalSQ8"
    assert (field[b"graph_max_degree"], field[b"construction_window_size"], field[b"search_window_size"]) == (48, 250, 20)
    assert float(field[b"epsilon"]) == pytest.approx(0.02)
    assert (field[b"training_threshold"], field[b"reduce"]) == (2048, DIM // 2)  # REDUCE's default: DIM / 2
    plain = client.execute_command("FT.INFO", "plain")
    plain = plain[b"attributes"][0] if protocol == 3 else plain[plain.index(b"attributes") + 1][0]
    plain = dict(zip(plain[::2], plain[1::2], strict=False)) if protocol == 2 else plain
    assert b"compression" not in plain and b"training_threshold" not in plain
    assert (plain[b"graph_max_degree"], plain[b"construction_window_size"], plain[b"search_window_size"]) == (32, 200, 10)


def _populate(client: redis.Redis, n: int = 200, seed: int = 1) -> np.ndarray:
    data = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    pipe = client.pipeline(transaction=False)
    for i, row in enumerate(data):
        pipe.hset(f"doc:{i}", "v", row.tobytes())
    pipe.execute()
    return data


def _knn(client: redis.Redis, q: bytes, clause: str = "", index: str = "idx") -> list[bytes]:
    res = client.execute_command("FT.SEARCH", index, f"*=>[KNN 5 @v $q {clause} AS d]", "PARAMS", "2", "q", q,
                                 "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2")
    return res[1::2]


def test_query_time_window_and_history_attributes(r):
    client = r
    _create(client, *BASE)
    data = _populate(client)
    q = data[17].tobytes()
    assert _knn(client, q)[0] == b"doc:17"
    assert _knn(client, q, "SEARCH_WINDOW_SIZE 50 USE_SEARCH_HISTORY ON")[0] == b"doc:17"
    res = client.execute_command("FT.SEARCH", "idx", "*=>[KNN 5 @v $q]=>{$search_window_size: 40; "
                                 "$use_search_history: auto; $yield_distance_as: d}", "PARAMS", "2", "q", q,
                                 "SORTBY", "d", "DIALECT", "2")
    assert res[1] == b"doc:17"
    with pytest.raises(redis.ResponseError, match="USE_SEARCH_HISTORY"):
        _knn(client, q, "USE_SEARCH_HISTORY MAYBE")
    with pytest.raises(redis.ResponseError, match="SEARCH_WINDOW_SIZE"):
        _knn(client, q, "SEARCH_WINDOW_SIZE 0")


def _settled(client: redis.Redis, timeout: float = 60.0) -> dict:
    deadline = time.time() + timeout
    while True:
        info = client.info("search")
        idle = all(int(client.ft(name).info()["indexing"]) == 0 for name in client.execute_command("FT._LIST"))
        if (idle and info["search_hnsw_backlog"] == 0) or time.time() > deadline:
            return info
        time.sleep(0.05)


def test_restart_loads_an_uncompressed_graph_and_rebuilds_a_compressed_one(proc):
    client = _client(proc.start())
    _create(client, *BASE, "GRAPH_MAX_DEGREE", "24")
    _create(client, *BASE, "COMPRESSION", "LVQ8", "TRAINING_THRESHOLD", "100", name="cidx")
    data = _populate(client)
    _settled(client)
    queries = [data[i].tobytes() for i in range(0, 200, 20)]
    before = [_knn(client, q) for q in queries]
    proc.stop()
    client = _client(proc.start())
    info = _settled(client)
    # the plain graph came back from its file; the compressed one (no file) was built again
    assert info["search_hnsw_graphs_loaded"] == 1 and info["search_hnsw_vectors_restored"] == 200
    assert info["search_hnsw_vectors_built"] == 200
    assert [_knn(client, q) for q in queries] == before
    assert int(client.ft("cidx").info()["num_docs"]) == 200
    for i, q in zip(range(0, 200, 20), queries, strict=True):
        assert _knn(client, q, index="cidx")[0] == f"doc:{i}".encode()
