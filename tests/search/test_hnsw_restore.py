"""HNSW graphs are saved with the snapshot (and at a clean stop) and loaded at start instead of
rebuilt (``pion.vector.graph_store``): INFO ``# Search`` says which, results are the same before
and after the restart, writes the log replays after the snapshot land on the loaded graph, and
a damaged or mismatched graph file is refused and the graph rebuilt from the documents."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from tests.support.servers import ProcessServer

DIM = 16
N = 300


def _vec(rng: np.random.Generator) -> bytes:
    return rng.standard_normal(DIM).astype(np.float32).tobytes()


def _create(client: redis.Redis, m: int = 16) -> None:
    client.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "t", "TAG",
                           "v", "VECTOR", "HNSW", "8", "TYPE", "FLOAT32", "DIM", str(DIM),
                           "DISTANCE_METRIC", "L2", "M", str(m))


def _populate(client: redis.Redis, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    pipe = client.pipeline(transaction=False)
    for i in range(N):
        pipe.hset(f"doc:{i}", mapping={"t": "a" if i % 2 else "b", "v": _vec(rng)})
    pipe.execute()


def _search_info(client: redis.Redis) -> dict:
    return client.info("search")


def _settled(client: redis.Redis, timeout: float = 60.0) -> dict:
    """Wait until the rebuild scan is done and the graph builder has nothing queued."""
    deadline = time.time() + timeout
    while True:
        info = _search_info(client)
        done = int(client.ft("idx").info()["indexing"]) == 0 and info["search_hnsw_backlog"] == 0
        if done or time.time() > deadline:
            return info
        time.sleep(0.05)


def _queries() -> list[bytes]:
    rng = np.random.default_rng(99)
    return [_vec(rng) for _ in range(12)]


def _results(client: redis.Redis) -> list[list]:
    out = []
    for q in _queries():
        res = client.execute_command("FT.SEARCH", "idx", "*=>[KNN 10 @v $q EF_RUNTIME 200 AS d]", "PARAMS", "2", "q", q,
                                     "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2")
        out.append([(res[i], round(float(res[i + 1][1]), 4)) for i in range(1, len(res), 2)])
    return out


def _rebuilt_like(after: list[list], before: list[list]) -> bool:
    """A graph rebuilt from the documents is a new approximate graph: its answers may differ from
    the old graph's by a neighbour it misses (the same distance for every document both return,
    at least 8 of each 10 shared). A loaded graph must answer exactly as before (``==``)."""
    for got, was in zip(after, before, strict=True):
        old = dict(was)
        shared = [(key, d) for key, d in got if key in old]
        if len(shared) < 8 or any(old[key] != d for key, d in shared):
            return False
    return True


def _save(client: redis.Redis) -> None:
    assert client.bgsave()
    deadline = time.time() + 30
    while client.info("persistence")["rdb_bgsave_in_progress"] and time.time() < deadline:
        time.sleep(0.05)
    assert client.info("persistence")["rdb_last_bgsave_status"] == "ok"


@pytest.fixture
def proc(tmp_path):
    srv = ProcessServer(tmp_path / "data")
    yield srv
    srv.stop()


def _client(srv: ProcessServer) -> redis.Redis:
    return redis.Redis(port=srv.port, protocol=2, socket_timeout=30)


def test_kill_9_after_a_snapshot_loads_the_graph_and_replays_later_writes_onto_it(proc):
    client = _client(proc.start())
    _create(client)
    _populate(client)
    assert _settled(client)["search_hnsw_vectors_built"] == N
    _save(client)
    files = list((proc.datadir / "search").glob("*.hnsw"))
    assert len(files) == 1
    # writes after the snapshot: only the log has them
    rng = np.random.default_rng(7)
    client.hset("doc:5", "v", _vec(rng))
    client.delete("doc:7")
    client.hset("doc:new", mapping={"t": "a", "v": _vec(rng)})
    _settled(client)
    before = _results(client)
    proc.kill9()
    client = _client(proc.start())
    info = _settled(client)
    assert info["search_hnsw_graphs_loaded"] == 1 and info["search_hnsw_graphs_rebuilt"] == 0
    # every document whose vector the snapshot's graph holds claimed its entry; doc:5's old
    # vector and doc:7 were dropped; only doc:5's new vector and doc:new went to the builder
    assert info["search_hnsw_vectors_restored"] == N - 2
    assert info["search_hnsw_vectors_dropped"] == 2
    assert info["search_hnsw_vectors_built"] == 2
    assert int(client.ft("idx").info()["num_docs"]) == N
    assert _results(client) == before
    assert client.execute_command("FT.SEARCH", "idx", "@t:{a}=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q",
                                  client.hget("doc:new", "v"), "SORTBY", "d", "RETURN", "1", "d",
                                  "DIALECT", "2")[1] == b"doc:new"


def test_a_clean_stop_saves_the_graph_and_the_restart_rebuilds_nothing(proc):
    client = _client(proc.start())
    _create(client)
    _populate(client)
    _settled(client)
    before = _results(client)
    proc.stop()  # the log is on: no snapshot at stop, the graph file is written by search's stop
    client = _client(proc.start())
    info = _settled(client)
    assert info["search_hnsw_graphs_loaded"] == 1
    assert info["search_hnsw_vectors_restored"] == N
    assert info["search_hnsw_vectors_built"] == 0
    assert _results(client) == before


def _corrupt(path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flipped byte":
        data[len(data) // 2] ^= 0x40
    elif how == "truncated":
        data = data[: len(data) // 3]
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flipped byte", "truncated", "empty"])
def test_a_damaged_graph_file_is_refused_and_the_graph_rebuilt(proc, how):
    client = _client(proc.start())
    _create(client)
    _populate(client)
    _settled(client)
    before = _results(client)
    proc.stop()
    (path,) = (proc.datadir / "search").glob("*.hnsw")
    _corrupt(path, how)
    client = _client(proc.start())
    info = _settled(client)
    assert info["search_hnsw_graphs_loaded"] == 0 and info["search_hnsw_graphs_rebuilt"] == 1
    assert info["search_hnsw_graph_files_refused"] == 1
    assert info["search_hnsw_vectors_restored"] == 0 and info["search_hnsw_vectors_built"] == N
    assert _rebuilt_like(_results(client), before)
    assert "rebuilt from the documents" in proc.log()


def test_a_graph_file_of_other_parameters_is_refused(proc):
    client = _client(proc.start())
    _create(client, m=16)
    _populate(client)
    _settled(client)
    _save(client)  # the file holds an M 16 graph
    client.execute_command("FT.DROPINDEX", "idx")
    _create(client, m=8)  # same name and field, other parameters: only the log knows
    _settled(client)
    before = _results(client)
    proc.kill9()
    client = _client(proc.start())
    info = _settled(client)
    assert info["search_hnsw_graphs_loaded"] == 0 and info["search_hnsw_graph_files_refused"] == 1
    assert info["search_hnsw_vectors_built"] == N
    assert _rebuilt_like(_results(client), before)


def test_a_torn_temp_file_is_ignored_and_cleaned_up(proc):
    """kill -9 while a graph file was being written leaves ``.tmp`` beside the old file."""
    client = _client(proc.start())
    _create(client)
    _populate(client)
    _settled(client)
    _save(client)
    proc.kill9()
    (path,) = (proc.datadir / "search").glob("*.hnsw")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(path.read_bytes()[:1000])
    client = _client(proc.start())
    info = _settled(client)
    assert info["search_hnsw_graphs_loaded"] == 1 and info["search_hnsw_vectors_restored"] == N
    _save(client)
    assert not tmp.exists()
    assert path.exists()


def test_dropped_indexes_leave_no_graph_file(proc):
    client = _client(proc.start())
    _create(client)
    _populate(client)
    _settled(client)
    _save(client)
    assert list((proc.datadir / "search").glob("*.hnsw"))
    client.execute_command("FT.DROPINDEX", "idx")
    _save(client)
    assert not list((proc.datadir / "search").glob("*.hnsw"))


def test_multi_vector_json_documents_claim_their_entries(proc):
    client = _client(proc.start())
    client.execute_command("FT.CREATE", "j", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA", "$.v[*]", "AS", "v",
                           "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "COSINE")
    rng = np.random.default_rng(3)
    for i in range(40):
        client.json().set(f"j:{i}", "$", {"v": rng.standard_normal((3, 4)).round(3).tolist()})
    deadline = time.time() + 30
    while _search_info(client)["search_hnsw_backlog"] and time.time() < deadline:
        time.sleep(0.05)
    q = np.asarray([1, 0, 0, 0], dtype=np.float32).tobytes()
    query = ["FT.SEARCH", "j", "*=>[KNN 5 @v $q AS d]", "PARAMS", "2", "q", q, "SORTBY", "d", "RETURN", "1", "d",
             "DIALECT", "2"]
    before = client.execute_command(*query)
    proc.stop()
    client = _client(proc.start())
    deadline = time.time() + 30
    while int(client.ft("j").info()["indexing"]) and time.time() < deadline:
        time.sleep(0.05)
    info = _search_info(client)
    assert info["search_hnsw_graphs_loaded"] == 1
    assert info["search_hnsw_vectors_restored"] == 120 and info["search_hnsw_vectors_built"] == 0
    assert client.execute_command(*query) == before
