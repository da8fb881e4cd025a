"""A flipped byte in a K/V arena is never served (issue #13, item 8): after a restart the rows are
mapped, not read; each blob's crc is checked once (in the background, or when first used), and the
rows of a damaged blob are missing rows: LOOKUP answers MISS, V.FETCH and V.EXPORT refuse them,
SSM.PREFIX.FETCH answers nil; counted in INFO and logged. On main V.FETCH served the flipped byte."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import redis

from tests.recovery.helpers import DirServer, wait_for

DIM, TOKENS, LAYERS = 64, 64, 2


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data").start()
    yield srv
    srv.stop()


def store_prefix(r: redis.Redis, ns: str, seed: int) -> dict:
    rows = {}
    rng = np.random.default_rng(seed)
    r.execute_command("KV.PREFIX.REGISTER", ns, DIM, "fp16")
    for side in ("_pk", "_pv"):
        for layer in range(LAYERS):
            x = rng.standard_normal((TOKENS, DIM)).astype(np.float16)
            r.execute_command("V.STOREBATCH", ns + side, layer, 0, TOKENS, x.tobytes(), "FMT", "F16")
            rows[(side, layer)] = x
    return rows


def blob_of(node: DirServer, data: bytes):
    """The arena ref of the blob holding ``data`` (as the server stored it)."""
    arenas = node.server.parts.arenas
    for ref in node.call(lambda: list(arenas.refs())):
        if ref.length == len(data) and bytes(node.call(arenas.view, ref)) == data:
            return ref
    raise AssertionError("blob not found")


def flip(node: DirServer, ref) -> None:
    path = node.datadir / "arenas" / ("%06d.arena" % ref.arena_id)
    with open(path, "r+b") as handle:
        handle.seek(ref.offset + ref.length // 2)
        byte = handle.read(1)
        handle.seek(ref.offset + ref.length // 2)
        handle.write(bytes([byte[0] ^ 0x10]))


def test_a_damaged_arena_blob_is_a_missing_prefix_not_a_wrong_one(node, caplog):
    r = node.client()
    bad = store_prefix(r, "bad", 1)
    good = store_prefix(r, "good", 2)
    r.execute_command("SSM.PREFIX.STORE", "bad", 0, b"state" * 2000)
    victim = blob_of(node, bad[("_pv", 1)].tobytes())
    ssm = blob_of(node, b"state" * 2000)
    node.stop()
    flip(node, victim)
    flip(node, ssm)
    caplog.set_level(logging.WARNING, logger="pion.arena")
    node.start()
    r = node.client()
    assert r.execute_command("KV.PREFIX.LOOKUP", "good") == b"HIT"
    assert r.execute_command("KV.PREFIX.LOOKUP", "bad") == b"MISS"
    with pytest.raises(redis.ResponseError, match="does not hold rows"):
        r.execute_command("V.FETCH", "bad_pv", 1, "RANGE", 0, TOKENS, "FMT", "F16")
    with pytest.raises(redis.ResponseError, match="rows missing or damaged"):
        r.execute_command("V.EXPORT", "bad_pk", "bad_pv", 0, TOKENS, LAYERS, 1, DIM)
    assert r.execute_command("V.FETCH", "bad_pk", 0, "RANGE", 0, TOKENS, "FMT", "F16") == bad[("_pk", 0)].tobytes()
    for (side, layer), x in good.items():
        assert r.execute_command("V.FETCH", "good" + side, layer, "RANGE", 0, TOKENS, "FMT", "F16") == x.tobytes()
    assert r.execute_command("SSM.PREFIX.FETCH", "bad", 0) is None
    info = r.info("persistence")
    assert info["pion_arena_bad_blobs"] == 2
    assert sum("does not match its checksum" in rec.getMessage() for rec in caplog.records) == 2


def test_mapped_blobs_are_checked_in_the_background_after_a_start(node):
    r = node.client()
    store_prefix(r, "ns", 3)
    node.restart()
    r = node.client()
    wait_for(lambda: r.info("persistence")["pion_arena_verified_blobs"] >= 2 * LAYERS, timeout=10)
    assert r.info("persistence")["pion_arena_bad_blobs"] == 0
