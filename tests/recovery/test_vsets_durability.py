"""Vector sets survive restarts (log replay and snapshots) and kill -9: every acknowledged VADD,
VREM and VSETATTR is there afterwards, with the stored vector bit-equal."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis

from tests.recovery.helpers import DirServer
from tests.support.servers import ProcessServer


def vset_state(r: redis.Redis, key: str) -> dict:
    """A canonical view of one vector set: per element its stored bytes, norm, attributes."""
    names = r.execute_command("VRANGE", key, "-", "+")
    return {name: (tuple(r.execute_command("VEMB", key, name, "RAW")), r.execute_command("VGETATTR", key, name))
            for name in names}


def fill(r: redis.Redis, rng: np.random.Generator) -> None:
    for quant in ("Q8", "NOQUANT", "BIN"):
        for i in range(60):
            vec = rng.normal(size=8).astype("<f4")
            attr = ["SETATTR", f'{{"i": {i}}}'] if i % 2 else []
            r.execute_command("VADD", f"v:{quant}", "FP32", vec.tobytes(), f"e{i}", quant, *attr)
    for i in range(20):
        r.execute_command("VADD", "v:reduced", "REDUCE", 4, "VALUES", 8, *rng.normal(size=8).tolist(), f"e{i}")
    for i in range(0, 60, 7):
        r.execute_command("VREM", "v:Q8", f"e{i}")
    r.execute_command("VSETATTR", "v:NOQUANT", "e3", "")
    r.execute_command("VSETATTR", "v:BIN", "e4", '{"new": true}')
    r.execute_command("VADD", "v:Q8", "VALUES", 8, *[1.0] * 8, "e1")  # an update


KEYS = ("v:Q8", "v:NOQUANT", "v:BIN", "v:reduced")


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data")
    yield srv
    srv.stop()


def test_vector_sets_come_back_from_the_log(node):
    node.start()
    r = node.client()
    fill(r, np.random.default_rng(1))
    before = {key: vset_state(r, key) for key in KEYS}
    query = ["VALUES", 8, *[0.5] * 8, "TRUTH", "WITHSCORES", "COUNT", 5]
    truth = r.execute_command("VSIM", "v:NOQUANT", *query)
    node.restart()
    r = node.client()
    assert {key: vset_state(r, key) for key in KEYS} == before
    assert r.execute_command("VSIM", "v:NOQUANT", *query) == truth
    assert r.vset().vinfo("v:reduced")[b"projection-input-dim"] == 8


def test_a_snapshot_keeps_the_graph_itself(node):
    node.start()
    r = node.client()
    fill(r, np.random.default_rng(2))
    links = {name: r.execute_command("VLINKS", "v:Q8", name) for name in r.execute_command("VRANGE", "v:Q8", "-", "+")}
    assert r.save()
    node.restart()
    r = node.client()
    assert {name: r.execute_command("VLINKS", "v:Q8", name) for name in links} == links
    r.execute_command("VADD", "v:Q8", "VALUES", 8, *[2.0] * 8, "after-snapshot")
    before = {key: vset_state(r, key) for key in KEYS}
    node.restart()
    assert {key: vset_state(node.client(), key) for key in KEYS} == before


def test_debug_reload_keeps_vector_sets(node):
    node.start(enable_debug_command="yes")
    r = node.client()
    fill(r, np.random.default_rng(3))
    before = {key: vset_state(r, key) for key in KEYS}
    assert r.execute_command("DEBUG", "RELOAD") == b"OK"
    assert {key: vset_state(r, key) for key in KEYS} == before


def test_acknowledged_vadds_survive_kill_9(tmp_path):
    srv = ProcessServer(tmp_path / "data").start()
    acked: list[tuple[bytes, bytes]] = []
    enough = threading.Event()
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(3000, 16)).astype("<f4")

    def keep_adding() -> None:
        client = redis.Redis(port=srv.port, socket_timeout=30)
        try:
            for i, vec in enumerate(vectors):
                name = b"e%d" % i
                client.execute_command("VADD", "k", "FP32", vec.tobytes(), name, "NOQUANT", "SETATTR", b'{"i": %d}' % i)
                acked.append((name, vec.tobytes()))
                if len(acked) >= 150:
                    enough.set()
        except redis.ConnectionError:
            return
        finally:
            enough.set()

    writer = threading.Thread(target=keep_adding, daemon=True)
    writer.start()
    try:
        assert enough.wait(120)
        srv.kill9()
        writer.join(10)
        done = list(acked)
        assert len(done) < len(vectors), "the kill came after the last VADD: nothing was in flight"
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        r = redis.Redis(port=srv.port, socket_timeout=30)
        card = r.execute_command("VCARD", "k")
        assert len(done) <= card <= len(done) + 1  # the one in flight may or may not have landed
        for name, blob in done:
            kind, raw, norm = r.execute_command("VEMB", "k", name, "RAW")
            unit = np.frombuffer(blob, dtype="<f4") / np.linalg.norm(np.frombuffer(blob, dtype="<f4"))
            assert kind == b"f32" and np.allclose(np.frombuffer(raw, dtype="<f4"), unit, atol=1e-6), name
            assert r.execute_command("VGETATTR", "k", name) == b'{"i": %d}' % int(name[1:])
    finally:
        srv.stop()
