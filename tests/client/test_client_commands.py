"""``PionClient`` against a real Pion (in a thread): typed V.*, KV.PREFIX.*, SSM.PREFIX.*, PION.STATS."""

from __future__ import annotations

import numpy as np
import pytest

from pion.client import PionClient, errors
from pion.client.blocks import block_hashes, chain_seed, hash_blob, token_blob


@pytest.fixture
def client(server):
    with PionClient(f"pion://127.0.0.1:{server.port}") as c:
        yield c


def rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def test_ping_and_plain_redis_commands_through_the_same_client(client):
    assert client.ping()
    client.redis.set("k", "v")
    assert client.redis.get("k") == b"v"


def test_v_store_and_fetch_in_every_form(client):
    data = rows(5, 64)
    assert client.v_create("s", 64, "fp32") >= 0
    client.v_storebatch("s", 0, 0, data)
    client.v_storebatch("s", 1, 0, data.astype(np.float16))
    assert np.array_equal(client.v_fetch("s", 0, [4, 0]), data[[4, 0]])
    assert np.array_equal(client.v_fetch_range("s", 0, 1, 3), data[1:3])
    raw = client.v_fetch_range("s", 0, 0, 5, fmt="RAW", codec="fp32", dim=64)
    assert np.array_equal(raw, data)
    batch = client.v_fetch_batch("s", 0, 5, fmt="RAW", codecs=["fp32", "fp32"], dims=[64, 64])
    assert np.array_equal(batch[0], data)
    assert np.array_equal(batch[1], data.astype(np.float16).astype(np.float32))
    info = client.v_info("s")
    assert info["value_dim"] == 64 and info["num_layers"] == 2


def test_v_fetch_raw_of_a_block_codec_decodes_with_pion_codecs(client):
    data = rows(8, 64, seed=1)
    client.v_create("q", 64, "turbo4")
    client.v_storebatch("q", 0, 0, data)
    decoded = client.v_fetch_range("q", 0, 0, 8, fmt="RAW", codec="turbo4", dim=64)
    server_f32 = client.v_fetch_range("q", 0, 0, 8)
    assert np.array_equal(decoded, server_f32)
    assert np.abs(decoded - data).max() < 0.5


def test_schema_sessions_and_snapshots(client):
    client.v_create_schema("h", ["fmt=fp16,dim=32", "fmt=int8,dim=32"])
    client.v_storebatch("h", 0, 0, rows(4, 32))
    snap = client.v_snapshot("h")
    client.v_storebatch("h", 0, 4, rows(4, 32))
    assert client.v_info("h")["layer_0_tokens"] == 8
    client.v_restore("h", snap)
    assert client.v_info("h")["layer_0_tokens"] == 4
    assert client.v_commit("h", snap) is True


def test_prefix_register_lookup_manifest_match_and_drop(client):
    tokens = list(range(10))
    manifest = b'{"n_layers": 1, "token_count": 10}'
    client.kv_register("ns1", 32, "fp16", prefill_ms=12.4, chain=(4, token_blob(tokens)), manifest=manifest,
                       stage="tok")
    assert client.kv_lookup("ns1") is False  # staged, no rows yet: not a HIT
    for side in ("ns1_pk", "ns1_pv"):
        client.execute("V.STOREBATCH", side, 0, 0, 10, rows(10, 32).tobytes(), "TOKEN", "tok")
    assert client.kv_lookup("ns1") is False  # every row is in, but not published
    client.kv_publish("ns1", "tok")
    assert client.kv_lookup("ns1") is True
    assert client.kv_manifest("ns1") == manifest
    assert client.kv_abort("ns1", "tok") is False  # published: nothing left to abort
    probe = [*tokens[:8], 99, 99, 99, 99]
    assert client.kv_match(4, hash_blob(block_hashes(probe, 4)), token_blob(probe)) == ("ns1", 2)
    assert client.kv_match(4, hash_blob(block_hashes([5] * 8, 4))) is None
    assert "registered_prefixes" in client.kv_info()
    assert client.kv_drop("ns1", "nope") == 1
    assert client.kv_lookup("ns1") is False


def test_a_seeded_chain_matches_only_hashes_of_its_seed(client):
    tokens = list(range(8))
    seed = chain_seed("model-a/fp16")
    client.kv_register("sd", 32, "fp16", chain=(4, token_blob(tokens)), seed=seed)
    for side in ("sd_pk", "sd_pv"):
        client.v_storebatch(side, 0, 0, rows(8, 32))
    assert client.kv_match(4, hash_blob(block_hashes(tokens, 4, seed)), token_blob(tokens)) == ("sd", 2)
    assert client.kv_match(4, hash_blob(block_hashes(tokens, 4)), token_blob(tokens)) is None
    assert PionClient.register_args("x", 32, "fp16", chain=(4, b""), seed=seed)[-2:] == ["SEED", seed]
    with pytest.raises(ValueError, match="seed needs chain"):
        PionClient.register_args("x", 32, "fp16", seed=seed)
    with pytest.raises(ValueError, match="root must be 16 bytes"):
        PionClient.register_args("x", 32, "fp16", chain=(4, b""), seed=b"short")


def test_blocks_and_membership_use_the_reference_u64_table(client):
    table = np.array([11, 22, 33], dtype="<u8")
    client.kv_register("nb", 32, "fp16", blocks=(16, table.tobytes()))
    size, hashes = client.kv_blocks("nb")
    assert size == 16 and list(hashes) == [11, 22, 33]
    assert client.kv_membership("nb", [22, 44]) == [True, False]
    assert client.kv_blocks("unknown") is None


def test_ssm_prefix_round_trip(client):
    client.ssm_store("m", 3, b"\x00state\xff")
    assert client.ssm_fetch("m", 3) == b"\x00state\xff"
    client.ssm_drop("m", 3)
    assert client.ssm_fetch("m", 3) is None


def test_stats_receipt_counts_a_measured_hit(client):
    client.stats_reset()
    client.kv_register("st", 32, "fp16", prefill_ms=1200)
    for side in ("st_pk", "st_pv"):
        client.v_storebatch(side, 0, 0, rows(3, 32))
    client.kv_lookup("st")
    client.kv_lookup("missing")
    stats = client.stats()
    assert stats["kvprefix_hits"] == 1 and stats["kvprefix_misses"] == 1
    assert stats["prefill_seconds_avoided_measured"] == pytest.approx(1.2)


def test_error_replies_raise_pion_exception_classes(client):
    with pytest.raises(errors.SessionNotFound):
        client.v_storebatch("absent", 0, 0, rows(1, 8))
    with pytest.raises(errors.CodecRefused):
        client.kv_register("bad", 32, "nonsense")
    with pytest.raises(errors.PionResponseError):
        client.execute("V.FETCH", "absent", 0, "RANGE", 5, 1)


def test_fast_pipeline_reads_the_same_replies_as_redis_py(client):
    client.v_create("f", 16, "fp32")
    data = rows(300, 16)
    client.v_storebatch("f", 0, 0, data)
    commands = [["V.FETCH", "f", "BATCH", 0, 300, "FMT", "RAW"], ["PING"], ["V.FETCH", "nope", 0, 1]]
    fast = client.pipeline_execute(commands, fast=True)
    slow = client.pipeline_execute(commands)
    assert bytes(fast[0][0]) == slow[0][0] == data.tobytes()
    assert isinstance(fast[2], errors.SessionNotFound) and isinstance(slow[2], errors.SessionNotFound)
    assert client.ping()  # the connection is still in step after the fast read


def test_unreachable_server_raises_connection_error():
    from tests.support.servers import free_port

    with PionClient(f"pion://127.0.0.1:{free_port()}", socket_timeout=2) as c:
        with pytest.raises(errors.PionConnectionError):
            c.ping()


def test_password_in_the_url_and_unix_socket_urls(make_server, tmp_path):
    sock = tmp_path / "pion.sock"
    srv = make_server(requirepass="s3cret", unixsocket=str(sock), unixsocketperm=0o700)
    with PionClient(f"pion://:s3cret@127.0.0.1:{srv.port}") as c:
        assert c.ping()
    with PionClient(f"pion://127.0.0.1:{srv.port}") as c:
        with pytest.raises(errors.AuthError):
            c.kv_info()
    with PionClient(f"unix://:s3cret@{sock}") as c:
        c.ssm_store("u", 0, b"x")
        assert c.pipeline_execute([["SSM.PREFIX.FETCH", "u", 0]], fast=True) == [bytearray(b"x")]


def _self_signed(tmp_path):
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_pions_url_speaks_tls_including_the_fast_read_path(make_server, tmp_path):
    from tests.support.servers import free_port

    cert, key = _self_signed(tmp_path)
    tls_port = free_port()
    make_server(tls_port=tls_port, tls_cert_file=str(cert), tls_key_file=str(key), tls_auth_clients="no")
    with PionClient(f"pions://127.0.0.1:{tls_port}", ssl_ca_certs=str(cert)) as c:
        c.v_create("t", 32, "fp32")
        data = rows(100, 32)
        c.v_storebatch("t", 0, 0, data)
        reply = c.pipeline_execute([["V.FETCH", "t", "BATCH", 0, 100, "FMT", "RAW"]], fast=True)
        assert bytes(reply[0][0]) == data.tobytes()
