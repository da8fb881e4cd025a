"""K/V rows survive kill -9: every acknowledged store is fetched back bit-equal after a restart."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import redis
from tests.support.servers import ProcessServer

from pion.codecs import get_codec

DIM, TOKENS = 64, 32


def batches(layers: int):
    rng = np.random.default_rng(7)
    for layer in range(layers):
        for side in ("_pk", "_pv"):
            yield side, layer, rng.standard_normal((TOKENS, DIM)).astype(np.float32)


def run_crash(tmp_path, layers: int, fmt: str, kill_after: int) -> None:
    """Stage ``layers`` layers per side from a second client; kill -9 once ``kill_after`` are acked.

    After the restart the staging is still open (it was logged): the writer sends what was not
    acknowledged, publishes, and every row, acknowledged before the crash or sent after, is
    fetched back bit-equal.
    """
    srv = ProcessServer(tmp_path / "data").start()
    try:
        r = redis.Redis(port=srv.port, socket_timeout=30)
        manifest = json.dumps({"n_layers": layers, "token_count": TOKENS, "state_layers": [0]})
        r.execute_command("KV.PREFIX.REGISTER", "ns", DIM, fmt, "PREFILL_MS", 100, "MANIFEST", manifest,
                          "STAGE", "t1")
        r.execute_command("SSM.PREFIX.STORE", "ns", 0, b"recurrent-state" * 1000, "TOKEN", "t1")
        acked: list[tuple[str, int, np.ndarray]] = []
        enough = threading.Event()

        def keep_storing() -> None:
            other = redis.Redis(port=srv.port, socket_timeout=30)
            try:
                for side, layer, rows in batches(layers):
                    other.execute_command("V.STOREBATCH", "ns" + side, layer, 0, TOKENS, rows.tobytes(), "TOKEN", "t1")
                    acked.append((side, layer, rows))
                    if len(acked) >= kill_after:
                        enough.set()
            except redis.ConnectionError:
                return
            enough.set()

        writer = threading.Thread(target=keep_storing, daemon=True)
        writer.start()
        assert enough.wait(60)
        srv.kill9()
        writer.join(10)
        done = list(acked)
        assert len(done) < 2 * layers, "the kill came after the last store: nothing was in flight"
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        r = redis.Redis(port=srv.port, socket_timeout=30)
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"  # staged, not published: never a hit
        assert r.execute_command("KV.PREFIX.MANIFEST", "ns") is None
        info = r.execute_command("KV.PREFIX.INFO").decode()
        assert "staged_prefixes:1\r\n" in info
        for side, layer, rows in list(batches(layers))[len(done):]:
            r.execute_command("V.STOREBATCH", "ns" + side, layer, 0, TOKENS, rows.tobytes(), "TOKEN", "t1")
        assert r.execute_command("KV.PREFIX.PUBLISH", "ns", "t1") == b"OK"
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
        codec = get_codec(fmt)
        for side, layer, rows in batches(layers):
            got = r.execute_command("V.FETCH", "ns" + side, layer, "RANGE", 0, TOKENS, "FMT", "RAW")
            assert got == codec.encode(rows), (side, layer)
        assert r.execute_command("SSM.PREFIX.FETCH", "ns", 0) == b"recurrent-state" * 1000
        assert r.execute_command("KV.PREFIX.MANIFEST", "ns") == manifest.encode()
    finally:
        srv.stop()


@pytest.mark.parametrize("fmt", ["fp16", "turbo4"])
def test_acknowledged_stores_survive_kill_9(tmp_path, fmt):
    run_crash(tmp_path, layers=400, fmt=fmt, kill_after=40)


@pytest.mark.slow
def test_thousands_of_acknowledged_stores_survive_kill_9(tmp_path):
    run_crash(tmp_path, layers=3000, fmt="fp16", kill_after=2000)
