"""Large K/V batches on the wire: received into their own buffers, encoded/decoded in the worker
pool (``pion.server.deferred``) while the loop serves others, answered in pipeline order."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import redis
from tests.support.servers import ThreadServer, make_settings

from pion.codecs import get_codec
from pion.server import deferred
from pion.server.durability.persistence import WAL_DIR

TOKENS, DIM = 2048, 192  # 1.5 MB of fp32 a layer: over DEFER_MIN and the reader's BIG_ARG


def rows(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((TOKENS, DIM)).astype(np.float32)


class GatedPool(ThreadPoolExecutor):
    """Worker jobs wait for ``gate``: what other clients do meanwhile is observable."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.gate = threading.Event()
        self.started = threading.Event()

    def submit(self, fn, /, *args, **kwargs):
        def gated():
            self.started.set()
            assert self.gate.wait(10)
            return fn(*args, **kwargs)

        return super().submit(gated)


@pytest.fixture
def gated(monkeypatch):
    pool = GatedPool()
    monkeypatch.setattr(deferred, "workers", lambda: pool)
    yield pool
    pool.gate.set()
    pool.shutdown()


def test_pipelined_large_stores_and_fetches_answer_in_order(r):
    r.execute_command("V.CREATE", "s", DIM, "VQUANT", "turbo4")
    codec = get_codec("turbo4")
    pipe = r.pipeline(transaction=False)
    for layer in range(3):
        pipe.execute_command("V.STOREBATCH", "s", layer, 0, TOKENS, rows(layer).tobytes())
        pipe.execute_command("V.FETCH", "s", layer, "RANGE", 0, TOKENS, "FMT", "RAW")
        pipe.ping()
    pipe.execute_command("V.FETCH", "s", "BATCH", 0, TOKENS, "FMT", "RAW")
    replies = pipe.execute()
    for layer in range(3):
        assert replies[3 * layer] == b"OK"
        assert replies[3 * layer + 1] == codec.encode(rows(layer))  # the fetch saw the store before it
        assert replies[3 * layer + 2] is True
    assert replies[-1] == [codec.encode(rows(layer)) for layer in range(3)]


@pytest.mark.parametrize("fmt", ["NATIVE", "F32", "F16"])
def test_a_large_decoding_fetch_matches_the_codec(r, fmt):
    r.execute_command("V.CREATE", "s", DIM, "VQUANT", "int8")
    for layer in range(2):
        r.execute_command("V.STOREBATCH", "s", layer, 0, TOKENS, rows(layer).tobytes())
    got = r.execute_command("V.FETCH", "s", "BATCH", 0, TOKENS, 3, "FMT", fmt)
    codec = get_codec("int8")
    dtype = "<f2" if fmt == "F16" else "<f4"
    assert got == [codec.decode(codec.encode(rows(layer)), (TOKENS, DIM)).astype(dtype).tobytes() for layer in range(2)]


def start_gated_store(server, r, gated, codec: str):
    """``(other client, writer thread, its reply box)``: a large V.STOREBATCH into a new ``codec``
    session, held by the gate inside its encoding job."""
    r.execute_command("V.CREATE", "s", DIM, "VQUANT", codec)
    other = redis.Redis(port=server.port, socket_timeout=10)
    box: list = []
    writer = threading.Thread(target=lambda: box.append(
        r.execute_command("V.STOREBATCH", "s", 0, 0, TOKENS, rows(0).tobytes())))
    writer.start()
    assert gated.started.wait(10)
    return other, writer, box


def test_other_clients_run_while_a_store_is_encoded(server, r, gated):
    other, writer, box = start_gated_store(server, r, gated, "fp16")
    assert other.ping() is True
    assert b"layer_0_tokens" not in other.execute_command("V.INFO", "s")  # not stored before it is done
    gated.gate.set()
    writer.join(10)
    assert box == [b"OK"]
    assert other.execute_command("V.FETCH", "s", 0, "RANGE", 0, TOKENS, "FMT", "RAW") == get_codec("fp16").encode(rows(0))


def test_a_store_takes_effect_against_the_session_as_it_is_when_done(server, r, gated):
    other, writer, box = start_gated_store(server, r, gated, "turbo4")
    assert other.execute_command("V.DROP", "s") == 1
    assert other.execute_command("V.CREATE", "s", DIM, "VQUANT", "int8") == 0  # another codec meanwhile
    gated.gate.set()
    writer.join(10)
    assert box == [b"OK"]
    assert other.execute_command("V.FETCH", "s", 0, "RANGE", 0, TOKENS, "FMT", "RAW") == get_codec("int8").encode(rows(0))
    assert server.call(lambda: dict(server.server.parts.arenas._inflight)) == {}  # its arena room given up
    other.execute_command("V.DROP", "s")
    with pytest.raises(redis.ResponseError, match="session not found"):
        r.execute_command("V.STOREBATCH", "s", 0, 0, TOKENS, rows(0).tobytes())


def test_inside_multi_a_large_store_is_encoded_at_once(r):
    r.execute_command("V.CREATE", "s", DIM, "VQUANT", "fp8")
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("V.STOREBATCH", "s", 0, 0, TOKENS, rows(0).tobytes())
    pipe.execute_command("V.FETCH", "s", 0, "RANGE", 0, TOKENS, "FMT", "RAW")
    assert pipe.execute() == [b"OK", get_codec("fp8").encode(rows(0))]


def test_large_stores_are_logged_and_come_back_after_a_restart(tmp_path):
    settings = make_settings(tmp_path, appendonly=True, appendfsync="always")
    srv = ThreadServer(settings).start()
    client = redis.Redis(port=srv.port, socket_timeout=10)
    client.execute_command("KV.PREFIX.REGISTER", "ns", DIM, "turbo3")
    client.execute_command("V.CREATE", "raw", DIM, "VQUANT", "fp32")
    pipe = client.pipeline(transaction=False)
    for layer in range(2):
        pipe.execute_command("V.STOREBATCH", "ns_pk", layer, 0, TOKENS, rows(layer).tobytes())
        pipe.execute_command("V.STOREBATCH", "ns_pv", layer, 0, TOKENS, rows(10 + layer).tobytes())
        pipe.execute_command("V.STOREBATCH", "raw", layer, 0, TOKENS, rows(20 + layer).tobytes())  # stored as sent
    assert pipe.execute() == [b"OK"] * 6
    log_bytes = sum(f.stat().st_size for f in (tmp_path / WAL_DIR).iterdir())
    assert log_bytes < 64 * 1024  # the blobs went to arenas once; the log only references them
    client.close()
    srv.stop()
    srv = ThreadServer(settings).start()
    client = redis.Redis(port=srv.port, socket_timeout=10)
    try:
        codec = get_codec("turbo3")
        assert client.execute_command("V.FETCH", "ns_pk", "BATCH", 0, TOKENS, "FMT", "RAW") == [
            codec.encode(rows(layer)) for layer in range(2)]
        assert client.execute_command("V.FETCH", "ns_pv", "BATCH", 0, TOKENS, "FMT", "RAW") == [
            codec.encode(rows(10 + layer)) for layer in range(2)]
        assert client.execute_command("V.FETCH", "raw", "BATCH", 0, TOKENS, "FMT", "NATIVE") == [
            rows(20 + layer).tobytes() for layer in range(2)]
        assert client.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    finally:
        client.close()
        srv.stop()


def test_large_values_of_ordinary_commands_round_trip(rr):
    value = np.random.default_rng(1).bytes(3_000_000)
    pipe = rr.pipeline(transaction=False)
    pipe.set("k", value)
    pipe.get("k")
    pipe.set("j", value[:400_000])
    pipe.mget("k", "missing", "j")
    assert pipe.execute() == [True, value, True, [value, None, value[:400_000]]]
    assert rr.slowlog_get() is not None  # a slow large write is shown in the slowlog (bytes, cut)
