"""The server says at start which graph code its vector sets run (compiled kernel or pure
Python, ``PION_PURE=1``), and a set written by one answers identically when loaded by the other:
DUMP from a compiled server, RESTORE into a pure one, the same VSIM replies and VLINKS."""

from __future__ import annotations

import pytest
import redis
from tests.support.servers import ProcessServer
from tests.unit.vector.conftest import clustered

from pion.vector.vset import kernel

N = 4500  # past VSIM's exact-scan size, so both servers walk the graph


def _start(tmp_path, name: str, monkeypatch, pure: bool) -> ProcessServer:
    if pure:
        monkeypatch.setenv(kernel.PURE_ENV, "1")
    else:
        monkeypatch.delenv(kernel.PURE_ENV, raising=False)
    return ProcessServer(tmp_path / name).start()


def test_the_log_names_the_pure_path(tmp_path, monkeypatch):
    srv = _start(tmp_path, "pure", monkeypatch, pure=True)
    try:
        redis.Redis(port=srv.port).ping()
    finally:
        srv.stop()
    assert "vector sets: pure-Python HNSW" in srv.log()
    assert srv.log().count("vector sets:") == 1


@pytest.mark.skipif(not kernel.available(), reason="the compiled vector-set kernel is not built")
def test_a_set_dumped_by_the_compiled_server_answers_alike_on_a_pure_one(tmp_path, monkeypatch):
    compiled = _start(tmp_path, "compiled", monkeypatch, pure=False)
    pure = ProcessServer(tmp_path / "pure")
    try:
        pure = _start(tmp_path, "pure", monkeypatch, pure=True)
        a, b = (redis.Redis(port=srv.port, socket_timeout=120) for srv in (compiled, pure))
        data = clustered(N, 12, seed=3)
        for lo in range(0, N, 500):
            pipe = a.pipeline(transaction=False)
            for i in range(lo, min(N, lo + 500)):
                vec = data[i].astype("<f4").tobytes()
                pipe.execute_command("VADD", "vs", "FP32", vec, f"e{i}", "SETATTR", f'{{"c": {i % 10}}}')
            pipe.execute()
        b.restore("vs", 0, a.dump("vs"))
        for q in clustered(20, 12, seed=4):
            for extra in ([], ["EF", 20], ["FILTER", ".c < 2", "FILTER-EF", 300]):
                args = ["VSIM", "vs", "FP32", q.astype("<f4").tobytes(), "WITHSCORES", "COUNT", 10, *extra]
                want = a.execute_command(*args)
                assert want and b.execute_command(*args) == want
        for name in ("e0", "e17", "e4000"):
            assert b.execute_command("VLINKS", "vs", name, "WITHSCORES") == a.execute_command("VLINKS", "vs", name, "WITHSCORES")
    finally:
        compiled.stop()
        pure.stop()
    assert "vector sets: compiled HNSW kernel" in compiled.log()
    assert "vector sets: pure-Python HNSW (PION_PURE=1)" in pure.log()
