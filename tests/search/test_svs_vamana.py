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
    schema.finish_svs(params)
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
    (("TYPE", "FLOAT64", "DIM", "4", "DISTANCE_METRIC", "L2"), "Not supported data type is given. Expected: FLOAT16, FLOAT32"),
    (("TYPE", "FLOAT33", "DIM", "4", "DISTANCE_METRIC", "L2"),
     "Bad arguments for vector similarity SVS-VAMANA index `TYPE`: Unknown argument"),
    (("TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "L3"),
     "Bad arguments for vector similarity SVS-VAMANA index `DISTANCE_METRIC`: Unknown argument"),
    (BASE + ("COMPRESSION", "PQ8"), "Bad arguments for vector similarity SVS-VAMANA index `COMPRESSION`: Unknown argument"),
    (BASE + ("TRAINING_THRESHOLD", "1024"), "TRAINING_THRESHOLD is irrelevant when compression was not requested"),
    (BASE + ("COMPRESSION", "LVQ8", "TRAINING_THRESHOLD", "100"),
     r"Invalid TRAINING_THRESHOLD: cannot be lower than DEFAULT_BLOCK_SIZE \(1024\)"),
    (BASE + ("COMPRESSION", "LVQ8", "REDUCE", "4"), "REDUCE is irrelevant when compression is not of type LeanVec"),
    (BASE + ("M", "16"), "Bad arguments for algorithm SVS-VAMANA: M"),
    (BASE + ("INITIAL_CAP", "16"), "Bad arguments for algorithm SVS-VAMANA: INITIAL_CAP"),
    (BASE + ("GRAPH_MAX_DEGREE", "0"),
     "Bad arguments for vector similarity SVS-VAMANA index `GRAPH_MAX_DEGREE`: Value is outside acceptable bounds"),
    (BASE + ("SEARCH_WINDOW_SIZE", "x"),
     "Bad arguments for vector similarity SVS-VAMANA index `SEARCH_WINDOW_SIZE`: Could not convert argument"),
    (BASE + ("EPSILON", "-1"), "index `EPSILON`: Value is outside acceptable bounds"),
    (("TYPE", "FLOAT32", "DISTANCE_METRIC", "L2"), "cannot create SVS-VAMANA index without specifying DIM argument"),
])
def test_create_checks_and_creates_nothing_on_error(r, params, error):
    client = r
    with pytest.raises(redis.ResponseError, match=error):
        _create(client, *params)
    assert client.execute_command("FT._LIST") == []


def _field_info(client: redis.Redis, name: str, protocol: int) -> dict:
    info = client.execute_command("FT.INFO", name)
    field = info[b"attributes"][0] if protocol == 3 else info[info.index(b"attributes") + 1][0]
    return field if protocol == 3 else dict(zip(field[::2], field[1::2], strict=False))


@pytest.mark.parametrize("protocol", [2, 3])
def test_info_reports_the_svs_attributes_as_redisearch_8_4(server, protocol):
    client = redis.Redis(port=server.port, protocol=protocol, socket_timeout=30)
    _create(client, *BASE, "COMPRESSION", "LeanVec8x8", "GRAPH_MAX_DEGREE", "48", "CONSTRUCTION_WINDOW_SIZE", "250",
            "SEARCH_WINDOW_SIZE", "20", "EPSILON", "0.02", "TRAINING_THRESHOLD", "2048", "REDUCE", "8")
    _create(client, *BASE, name="plain")
    field = _field_info(client, "idx", protocol)
    keys = [key for key in field if key != b"flags"]
    assert keys == [b"identifier", b"attribute", b"type", b"algorithm", b"data_type", b"dim", b"distance_metric",
                    b"graph_max_degree", b"construction_window_size", b"compression", b"training_threshold"]
    assert (field[b"algorithm"], field[b"data_type"], field[b"dim"]) == (b"SVS-VAMANA", b"FLOAT32", DIM)
    # every COMPRESSION kind runs as Redis's non-Intel fallback, which FT.INFO names
    assert (field[b"graph_max_degree"], field[b"construction_window_size"], field[b"compression"],
            field[b"training_threshold"]) == (48, 250, b"GlobalSQ8", 2048)
    plain = _field_info(client, "plain", protocol)
    assert (plain[b"graph_max_degree"], plain[b"construction_window_size"], plain[b"compression"]) == (
        32, 200, b"NO_COMPRESSION")
    assert b"training_threshold" not in plain


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


def test_query_time_parameters_as_vecsim_resolves_them(r):
    client = r
    _create(client, *BASE)
    client.execute_command("FT.CREATE", "h", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "v", "VECTOR", "HNSW", "6",
                           *BASE)
    data = _populate(client)
    q = data[17].tobytes()
    assert _knn(client, q)[0] == b"doc:17"
    assert _knn(client, q, "SEARCH_WINDOW_SIZE 50 SEARCH_BUFFER_CAPACITY 60 USE_SEARCH_HISTORY on")[0] == b"doc:17"
    assert _knn(client, q, "EF_RUNTIME 50", index="h")[0] == b"doc:17"
    bad = [("idx", "USE_SEARCH_HISTORY MAYBE", "Invalid value was given"),
           ("idx", "SEARCH_WINDOW_SIZE 0", "Invalid value was given"),
           ("idx", "SEARCH_WINDOW_SIZE 5 SEARCH_WINDOW_SIZE 6", "Parameter was specified twice"),
           ("idx", "EF_RUNTIME 50", "Invalid option"),  # HNSW's parameter
           ("h", "SEARCH_WINDOW_SIZE 50", "Invalid option")]  # SVS-VAMANA's parameter
    for _ in range(2):  # the second round goes through the KNN fast path's plan cache, if it took one
        for index, clause, why in bad:
            with pytest.raises(redis.ResponseError, match=f"^Error parsing vector similarity parameters: {why}$"):
                _knn(client, q, clause, index=index)
    # RediSearch takes the SVS parameters in the clause only, not as =>{$attributes}
    with pytest.raises(redis.ResponseError, match="Invalid attribute search_window_size"):
        client.execute_command("FT.SEARCH", "idx", "*=>[KNN 5 @v $q]=>{$search_window_size: 40}", "PARAMS", "2", "q", q,
                               "DIALECT", "2")


def _settled(client: redis.Redis, timeout: float = 60.0) -> dict:
    deadline = time.time() + timeout
    while True:
        info = client.info("search")
        idle = all(int(client.ft(name).info()["indexing"]) == 0 for name in client.execute_command("FT._LIST"))
        if (idle and info["search_hnsw_backlog"] == 0) or time.time() > deadline:
            return info
        time.sleep(0.05)


N_RESTART = 1100  # past the smallest TRAINING_THRESHOLD (1024), so the compressed graph is built


def test_restart_loads_both_graphs_and_a_compressed_one_keeps_its_code_map(proc):
    client = _client(proc.start())
    _create(client, *BASE, "GRAPH_MAX_DEGREE", "24")
    _create(client, *BASE, "COMPRESSION", "LVQ8", "TRAINING_THRESHOLD", "1024", name="cidx")
    _create(client, *BASE, "COMPRESSION", "LVQ4x8", "TRAINING_THRESHOLD", "5000", name="untrained")
    data = _populate(client, N_RESTART)
    _settled(client)
    queries = [data[i].tobytes() for i in range(0, N_RESTART, 110)]
    before = {name: [_knn(client, q, index=name) for q in queries] for name in ("idx", "cidx", "untrained")}
    rng = np.random.default_rng(77)
    proc.stop()  # a clean stop writes the graph files (the log is on)
    client = _client(proc.start())
    info = _settled(client)
    # the scan that claims the loaded entries may still be under way when the builders look idle:
    # wait (bounded) for its count to reach the documents before reading it
    deadline = time.time() + 30
    while info["search_hnsw_vectors_restored"] < 2 * N_RESTART and time.time() < deadline:
        time.sleep(0.1)
        info = _settled(client)
    # both trained graphs came back from their files; the untrained one had none (its rows wait,
    # scanned exactly, as before the restart)
    assert info["search_hnsw_graphs_loaded"] == 2 and info["search_hnsw_vectors_restored"] == 2 * N_RESTART
    assert info["search_hnsw_vectors_built"] == 0
    assert {name: [_knn(client, q, index=name) for q in queries] for name in before} == before
    # a write after the restart is coded with the loaded map and found
    new = rng.standard_normal(DIM).astype(np.float32).tobytes()
    client.hset("doc:new", "v", new)
    _settled(client)
    assert _knn(client, new, index="cidx")[0] == b"doc:new"
    for name in before:
        assert int(client.ft(name).info()["num_docs"]) == N_RESTART + 1


@pytest.mark.parametrize("compression", [None, "LVQ8"])
def test_redisvl_svs_index_and_its_runtime_parameters(server, compression):
    """RedisVL, unchanged: an ``svs-vamana`` field (its schema sends every SVS parameter), a
    VectorQuery with SEARCH_WINDOW_SIZE / USE_SEARCH_HISTORY / SEARCH_BUFFER_CAPACITY as $params,
    and ``from_existing`` reading a compressed field back from FT.INFO (an uncompressed one it
    cannot read: this RedisVL refuses RediSearch's ``compression NO_COMPRESSION``, on Redis too)."""
    from redisvl.index import SearchIndex
    from redisvl.query import VectorQuery

    attrs = {"dims": DIM, "distance_metric": "cosine", "algorithm": "svs-vamana", "datatype": "float32"}
    if compression:
        attrs |= {"compression": compression, "training_threshold": 1024}
    schema_ = {"index": {"name": "vl", "prefix": "vl", "storage_type": "hash"},
               "fields": [{"name": "tag", "type": "tag"}, {"name": "v", "type": "vector", "attrs": attrs}]}
    client = redis.Redis(port=server.port, socket_timeout=30)
    index = SearchIndex.from_dict(schema_, redis_client=client)
    index.create(overwrite=True)
    data = np.random.default_rng(3).standard_normal((60, DIM)).astype(np.float32)
    index.load([{"tag": "a" if i % 2 else "b", "v": row.tobytes()} for i, row in enumerate(data)],
               keys=[f"vl:{i}" for i in range(len(data))])
    query = VectorQuery(data[11].tolist(), "v", return_fields=["tag"], num_results=3, search_window_size=40,
                        use_search_history="ON", search_buffer_capacity=50)
    found = index.query(query)
    assert found[0]["id"] == "vl:11" and float(found[0]["vector_distance"]) == pytest.approx(0.0, abs=1e-5)
    if compression:
        field = SearchIndex.from_existing("vl", redis_client=client).schema.fields["v"]
        assert (field.attrs.algorithm.value, field.attrs.dims) == ("SVS-VAMANA", DIM)
        assert field.attrs.graph_max_degree == 40  # RedisVL's default, which its schema sent
    index.delete(drop=True)
