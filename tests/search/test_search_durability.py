"""Search indexes and JSON documents survive kill -9 (the log) and restarts from a snapshot
(the ``search`` snapshot extension), and are rebuilt from the keyspace before they answer."""

from __future__ import annotations

import time

import pytest
import redis

from tests.recovery.helpers import DirServer
from tests.support.embedder import DIM, blob
from tests.support.servers import ProcessServer


def _wait_indexed(client: redis.Redis, name: str, timeout: float = 30.0) -> dict:
    deadline = time.time() + timeout
    while True:
        info = client.ft(name).info()
        if int(info["indexing"]) == 0 or time.time() > deadline:
            return info
        time.sleep(0.05)


def _populate(client: redis.Redis, n: int = 40) -> None:
    client.execute_command(
        "FT.CREATE", "docs", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "title", "TEXT", "tag", "TAG",
        "n", "NUMERIC", "SORTABLE", "v", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", str(DIM),
        "DISTANCE_METRIC", "COSINE")
    client.execute_command("FT.CREATE", "jdocs", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA",
                           "$.name", "AS", "name", "TEXT", "$.n", "AS", "n", "NUMERIC")
    client.execute_command("FT.ALIASADD", "docs_alias", "docs")
    client.execute_command("FT.SYNUPDATE", "docs", "g1", "canine", "dog")
    for i in range(n):
        client.hset(f"doc:{i}", mapping={"title": f"dog number {i}" if i % 2 else f"cat number {i}",
                                         "tag": "even" if i % 2 == 0 else "odd", "n": i, "v": blob(f"word{i} shared")})
        client.json().set(f"j:{i}", "$", {"name": f"item {i}", "n": i})


def _check(client: redis.Redis, n: int = 40) -> None:
    info = _wait_indexed(client, "docs")
    assert int(info["num_docs"]) == n
    assert int(_wait_indexed(client, "jdocs")["num_docs"]) == n
    assert client.ft("docs").search("@tag:{even}").total == n // 2
    assert client.ft("docs_alias").search("canine").total == n // 2  # the alias and the synonyms came back
    res = client.execute_command("FT.SEARCH", "docs", "*=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", blob("word7 shared"),
                                 "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2")
    assert res[1] == b"doc:7"
    assert client.ft("jdocs").search(f"@n:[0 ({n // 2}]").total == n // 2
    assert client.json().get("j:3") == {"name": "item 3", "n": 3}


def test_kill_9_keeps_indexes_and_documents(tmp_path):
    srv = ProcessServer(tmp_path / "data").start()
    try:
        client = redis.Redis(port=srv.port, protocol=2, socket_timeout=20)
        _populate(client)
        client.delete("doc:0")
        client.execute_command("FT.CREATE", "gone", "SCHEMA", "x", "TEXT")
        client.execute_command("FT.DROPINDEX", "gone")
        srv.kill9()
        srv.start()
        client = redis.Redis(port=srv.port, protocol=2, socket_timeout=20)
        assert sorted(client.execute_command("FT._LIST")) == [b"docs", b"jdocs"]
        client.hset("doc:0", mapping={"title": "cat number 0", "tag": "even", "n": 0, "v": blob("word0 shared")})
        _check(client)
    finally:
        srv.stop()


def test_snapshot_restart_and_dropindex_dd_replay(tmp_path):
    server = DirServer(tmp_path / "data").start()
    client = server.client(protocol=2)
    _populate(client)
    assert client.bgsave()
    deadline = time.time() + 30
    while client.info("persistence")["rdb_bgsave_in_progress"] and time.time() < deadline:
        time.sleep(0.05)
    client.execute_command("FT.CREATE", "tmp", "PREFIX", "1", "tmp:", "SCHEMA", "x", "TEXT")
    client.hset("tmp:1", "x", "hello")
    client.execute_command("FT.DROPINDEX", "tmp", "DD")  # logged with the keys it deleted
    server.restart()
    client = server.client(protocol=2)
    _check(client)
    assert client.exists("tmp:1") == 0
    assert b"tmp" not in client.execute_command("FT._LIST")
    server.stop()


def test_debug_reload_keeps_indexes(tmp_path):
    server = DirServer(tmp_path / "data", enable_debug_command="yes").start()
    client = server.client(protocol=2)
    _populate(client, 10)
    assert client.execute_command("DEBUG", "RELOAD")
    _check(client, 10)
    server.stop()


@pytest.mark.parametrize("how", ["flushdb", "flushall"])
def test_flush_drops_the_databases_indexes(server, how):
    client = redis.Redis(port=server.port, protocol=2)
    client.execute_command("FT.CREATE", "a", "SCHEMA", "t", "TEXT")
    getattr(client, how)()
    assert client.execute_command("FT._LIST") == []
    with pytest.raises(redis.ResponseError, match="Unknown index name"):
        client.ft("a").info()


def test_indexes_belong_to_their_database(server):
    db0 = redis.Redis(port=server.port, protocol=2, db=0)
    db1 = redis.Redis(port=server.port, protocol=2, db=1)
    db0.execute_command("FT.CREATE", "same", "SCHEMA", "t", "TEXT")
    db1.execute_command("FT.CREATE", "same", "SCHEMA", "t", "TEXT")
    db0.hset("k", "t", "zero")
    db1.hset("k", "t", "one")
    assert db0.ft("same").search("zero").total == 1 and db0.ft("same").search("one").total == 0
    assert db1.ft("same").search("one").total == 1 and db1.ft("same").search("zero").total == 0
    db1.flushdb()
    assert db0.execute_command("FT._LIST") == [b"same"]


def test_swapdb_rebuilds_from_the_new_contents(server):
    db0 = redis.Redis(port=server.port, protocol=2, db=0)
    db1 = redis.Redis(port=server.port, protocol=2, db=1)
    db0.execute_command("FT.CREATE", "i", "SCHEMA", "t", "TEXT")
    db0.hset("a", "t", "apple")
    db1.hset("b", "t", "banana")
    db0.swapdb(0, 1)
    _wait_indexed(db0, "i")
    assert db0.ft("i").search("banana").total == 1
    assert db0.ft("i").search("apple").total == 0
