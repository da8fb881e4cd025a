"""Stage 2's warm/cold tier, durability, error replies and work off the event loop."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis
from tests.server.attend_support import TOL, prefix, reference, store, store_vstore_prefix
from tests.support.servers import ThreadServer, free_port, make_settings
from tests.unit.attention import reference as ref

from pion.attention.dense import grouped_map
from pion.server.commands.attention import prefix as attend_prefix


def query(r, sid, q, n, *extra):
    return r.execute_command("ATTEND.PREFIX.QUERY", sid, 0, q.shape[0], q.shape[2], n, q.tobytes(), *extra)


def test_lookup_hit_cold_miss_and_coldmiss_until_warm(r):
    rng = np.random.default_rng(0)
    k, v = prefix(rng, 2, 256, 64)
    store(r, "a", 0, k, v)
    store(r, "b", 0, k, v)
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "a", 0) == b"HIT"
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "nope", 0) == b"MISS"
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "a", 1) == b"MISS"
    r.config_set("attention-warm-bytes", "1")  # nothing but the newest view fits
    q = rng.standard_normal((2, 1, 64)).astype(np.float32)
    store(r, "c", 0, k, v)
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "a", 0) == b"COLD"
    with pytest.raises(redis.ResponseError) as err:
        query(r, "a", q, 256)
    assert str(err.value) == "COLDMISS session evicted to cold tier (call KV.PREFIX.WARM)"
    r.config_set("attention-warm-bytes", "1gb")
    assert r.execute_command("KV.PREFIX.WARM", "a", 2, 64) == b"1"
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "a", 0) == b"HIT"
    got = np.frombuffer(query(r, "a", q, 256), "<f4").reshape(2, 1, 64)
    assert ref.rel_err(got, reference(q, k, v, [0, 1])[0]) < TOL
    info = dict(line.split(":") for line in r.execute_command("KV.PREFIX.INFO").decode().split())
    assert int(info["sdpa_demotions"]) >= 1 and int(info["sdpa_rehydrates"]) >= 1


def test_coldmiss_raw_reply(raw):
    k = np.ones((1, 64, 32), np.float32)
    raw.cmd("ATTEND.PREFIX.STORE", "a", "0", "1", "64", "32", k.tobytes(), k.tobytes())
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    raw.cmd("CONFIG", "SET", "attention-warm-bytes", "1")
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    raw.cmd("ATTEND.PREFIX.QUERY", "a", "0", "1", "32", "64", np.ones(32, np.float32).tobytes())
    want = b"-COLDMISS session evicted to cold tier (call KV.PREFIX.WARM)\r\n"
    assert raw.read_exactly(want) == want


def test_warm_rehydrates_a_stage_one_prefix_under_another_sid_and_reports_skips(r):
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((100, 128)).astype(np.float32)
    store_vstore_prefix(r, "ns", 0, rows, rows, "fp16")
    store_vstore_prefix(r, "ns", 1, rows, rows, "fp16")
    r.execute_command("V.CREATE", "other_pk", 64)
    assert r.execute_command("KV.PREFIX.WARM", "ns", 2, 64, "ns_attn") == b"2"
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "ns_attn", 1) == b"HIT"
    assert r.execute_command("KV.PREFIX.WARM", "ns", 4, 64) == b"0 skipped_dim=2"
    with pytest.raises(redis.ResponseError, match="KV.PREFIX.WARM namespace not registered"):
        r.execute_command("KV.PREFIX.WARM", "missing", 2, 64)
    with pytest.raises(redis.ResponseError, match="invalid H/D"):
        r.execute_command("KV.PREFIX.WARM", "ns", 0, 64)


def test_a_plain_query_on_a_stage_one_prefix_is_cold_and_from_loads_it(r):
    rng = np.random.default_rng(2)
    rows = rng.standard_normal((300, 128)).astype(np.float32)
    store_vstore_prefix(r, "pc", 0, rows, rows, "fp16")
    q = rng.standard_normal((4, 1, 64)).astype(np.float32)
    with pytest.raises(redis.ResponseError, match="cold tier"):
        query(r, "pc", q, 300)
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "pc", 0) == b"COLD"
    first = query(r, "pc", q, 300, "FROM", "pc")
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "pc", 0) == b"HIT"
    assert query(r, "pc", q, 300) == first  # warm now, no FROM needed
    r.execute_command("V.STOREBATCH", "pc_pk", 0, 0, 1, rows[:1].tobytes() * 0 + np.zeros((1, 128), np.float32).tobytes())
    assert query(r, "pc", q, 300) != first  # the rows changed: the view is rebuilt from them


def test_dropping_the_rows_drops_the_view(r):
    rng = np.random.default_rng(3)
    k, v = prefix(rng, 2, 64, 32)
    store(r, "a", 0, k, v)
    assert r.execute_command("KV.PREFIX.DROP", "a") == 1
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "a", 0) == b"MISS"
    with pytest.raises(redis.ResponseError, match="session not found"):
        query(r, "a", rng.standard_normal((2, 1, 32)).astype(np.float32), 64)


def test_store_replaces_a_layer_and_refuses_another_codec(r):
    rng = np.random.default_rng(4)
    k, v = prefix(rng, 2, 100, 32)
    store(r, "a", 0, k, v)
    k2, v2 = prefix(rng, 2, 40, 32)
    store(r, "a", 0, k2, v2)
    assert r.execute_command("V.INFO", "a_pk").decode().count("layer_0_tokens:40") == 1
    q = rng.standard_normal((2, 1, 32)).astype(np.float32)
    got = np.frombuffer(query(r, "a", q, 40), "<f4").reshape(2, 1, 32)
    assert ref.rel_err(got, reference(q, k2, v2, [0, 1])[0]) < TOL
    store_vstore_prefix(r, "p", 0, np.zeros((4, 64), np.float32), np.zeros((4, 64), np.float32), "fp16")
    with pytest.raises(redis.ResponseError, match="holds fp16 rows"):
        store(r, "p", 0, k, v)
    with pytest.raises(redis.ResponseError, match="holds fp32 rows 64 wide"):
        store(r, "a", 0, *prefix(rng, 4, 10, 32))


@pytest.mark.parametrize(("argv", "text"), [
    (["ATTEND.PREFIX.STORE", "s", 0, 0, 4, 32, b"", b""], "invalid H/N/D (must be > 0)"),
    (["ATTEND.PREFIX.STORE", "s", 0, 1, 4, 32, b"x" * 511, b"x" * 512], "K/V blob size mismatch (expected H*N*D*4 each)"),
    (["ATTEND.PREFIX.STORE", "s", 0, 1, 4, 2048, b"", b""], "ATTEND.PREFIX.STORE failed (unsupported D?"),
    (["ATTEND.PREFIX.STORE", "s", "x", 1, 4, 32, b"", b""], "invalid layer"),
    (["ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 0, b"\0" * 256], "top_k must be > 0"),
    (["ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 8, b"\0" * 255], "Q blob size mismatch"),
    (["ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 8, b"\0" * 256, "BOGUS"], "unexpected argument 'BOGUS'"),
    (["ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 8, b"\0" * 256, -2], "invalid fa_window"),
    (["ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 8, b"\0" * 256, "SCALE", "-1"], "SCALE must be a positive number"),
    (["ATTEND.PREFIX.QUERY", "s", 0, 3, 32, 8, b"\0" * 384], "H_q must be a multiple of H_kv (GQA)"),
    (["ATTEND.PREFIX.QUERY", "s", 0, 2, 48, 8, b"\0" * 384], "rows are 64 wide, not a multiple of D=48"),
    (["ATTEND.PREFIX.QUERY", "nope", 0, 2, 32, 8, b"\0" * 256], "ATTEND.PREFIX.QUERY failed (session not found, or unsupported D)"),
    (["ATTEND.PREFIX.QUERY_FUSED", "s", 0, 3, 32, 0, 2, b"\0" * 384, b"", b"", b""], "H_q must be a multiple of H_kv (GQA)"),
    (["ATTEND.PREFIX.QUERY_FUSED", "s", 0, 2, 32, 1, 2, b"\0" * 256, b"", b"", b""], "K_suf/V_suf blob size mismatch"),
    (["ATTEND.PREFIX.QUERY_FUSED", "s", 0, 2, 32, 0, 2, b"\0" * 256, b"", b"", b"\x00"], "head_map must be H_q=2 bytes"),
    (["ATTEND.PREFIX.QUERY_FUSED", "s", 0, 2, 32, 0, 2, b"\0" * 256, b"", b"", b"\x00\x05"], "head_map values must be < H_kv=2"),
    (["ATTEND.PREFIX.QUERY_FUSED", "s", 0, 2, 32, 0, 1, b"\0" * 256, b"", b"", b""], "the query says H_kv*D = 32"),
    (["ATTEND.PREFIX.QUERY_SPARSE_AUTO", "s", 0, 2, 32, 64, 4, 2, b"\0" * 256, b"", -1, 4], "selector_id must be 0"),
    (["ATTEND.PREFIX.QUERY_SPARSE_AUTO", "s", 0, 2, 32, 0, 4, 2, b"\0" * 256, b""], "invalid B"),
    (["ATTEND.PREFIX.QUERY_SPARSE_AUTO", "s", 0, 2, 32, 64, 4, 2, b"\0" * 512, b""], "Q blob size mismatch (expected H*D*4"),
    (["ATTEND.PREFIX.QUERY_SPARSE", "s", 0, 2, 32, 2, b"\0" * 256, b"\0" * 15, b"\0" * 8], "indices blob size mismatch"),
    (["ATTEND.PREFIX.QUERY_SPARSE", "s", 0, 2, 32, 2, b"\0" * 256, b"\0" * 16, b"\x03\0\0\0" * 2], "counts must be <= K_sparse_max"),
])
def test_bad_input_gets_a_clear_error_and_changes_nothing(r, argv, text):
    k = np.ones((2, 8, 32), np.float32)
    store(r, "s", 0, k, k)
    before = r.execute_command("V.INFO", "s_pk")
    with pytest.raises(redis.ResponseError) as err:
        r.execute_command(*argv)
    assert text in str(err.value)
    assert r.execute_command("V.INFO", "s_pk") == before
    assert r.ping()


def test_arity_errors_are_redis_style(r):
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'attend.prefix.store' command"):
        r.execute_command("ATTEND.PREFIX.STORE", "s", 0)


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_a_stage_two_prefix_survives_a_restart(tmp_path, snapshot):
    rng = np.random.default_rng(5)
    k, v = prefix(rng, 2, 300, 64)
    settings = make_settings(tmp_path)
    srv = ThreadServer(settings).start()
    r = redis.Redis(port=srv.port, socket_timeout=30)
    store(r, "a", 2, k, v)
    q = rng.standard_normal((4, 3, 64)).astype(np.float32)
    before = r.execute_command("ATTEND.PREFIX.QUERY", "a", 2, 4, 64, 300, q.tobytes())
    if snapshot:
        assert r.save()  # the rows now live in the snapshot, the log it covered is gone
    srv.stop()
    srv = ThreadServer(settings.with_changes(port=free_port())).start()
    try:
        r = redis.Redis(port=srv.port, socket_timeout=30)
        assert r.execute_command("ATTEND.PREFIX.LOOKUP", "a", 2) == b"COLD"
        assert r.execute_command("KV.PREFIX.WARM", "a", 2, 64) == b"1"
        assert r.execute_command("ATTEND.PREFIX.QUERY", "a", 2, 4, 64, 300, q.tobytes()) == before
        assert r.execute_command("ATTEND.PREFIX.QUERY", "x", 2, 4, 64, 300, q.tobytes(), "FROM", "a") == before
    finally:
        srv.stop()


def test_a_big_query_runs_off_the_loop_while_other_clients_are_served(server, monkeypatch):
    """The kernel is held inside the worker until a PING from another client has been answered."""
    released = threading.Event()
    entered = threading.Event()
    real = attend_prefix.pieces

    def held(job):
        entered.set()
        assert released.wait(20)
        return job()

    monkeypatch.setattr(attend_prefix, "pieces", lambda *args: [lambda job=job: held(job) for job in real(*args)])
    rng = np.random.default_rng(6)
    k, v = prefix(rng, 2, 32768, 64)  # well above the work that runs on the loop (attend_prefix.INLINE_MAX)
    a = redis.Redis(port=server.port, socket_timeout=30)
    b = redis.Redis(port=server.port, socket_timeout=30)
    store(a, "big", 0, k, v)
    q = rng.standard_normal((2, 1, 64)).astype(np.float32)
    box: list = []
    worker = threading.Thread(target=lambda: box.append(query(a, "big", q, 32768)))
    worker.start()
    assert entered.wait(20), "the query never reached its kernel"
    assert b.ping() and b.set("k", "v") and b.get("k") == b"v"  # answered while the kernel is held
    assert worker.is_alive() and not box
    released.set()
    worker.join(20)
    got = np.frombuffer(box[0], "<f4").reshape(2, 1, 64)
    assert ref.rel_err(got, reference(q, k, v, grouped_map(2, 2))[0]) < TOL


def test_attend_prefix_info_counts_queries_and_the_attended_fraction(r):
    rng = np.random.default_rng(7)
    k, v = prefix(rng, 1, 6400, 32)
    store(r, "a", 0, k, v)
    q = rng.standard_normal((1, 1, 32)).astype(np.float32)
    r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO", "a", 0, 1, 32, 64, 1, 1, q.tobytes(), b"", -1, 1)
    info = dict(line.split(":") for line in r.execute_command("ATTEND.PREFIX.INFO").decode().split())
    assert info["sparse_queries"] == "1" and info["attended_tokens"] == "64" and info["prefix_tokens"] == "6400"
    assert float(info["attended_fraction"]) == pytest.approx(0.01)


def test_tenants_never_see_each_others_stage_two_prefixes(make_server):
    srv = make_server(requirepass="adm1n", tenants=("alice:apw", "bob:bpw"))
    alice = redis.Redis(port=srv.port, username="alice", password="apw", socket_timeout=10)
    bob = redis.Redis(port=srv.port, username="bob", password="bpw", socket_timeout=10)
    rng = np.random.default_rng(8)
    k, v = prefix(rng, 2, 100, 32)
    store(alice, "s", 0, k, v)
    q = rng.standard_normal((2, 1, 32)).astype(np.float32)
    assert alice.execute_command("ATTEND.PREFIX.LOOKUP", "s", 0) == b"HIT"
    assert bob.execute_command("ATTEND.PREFIX.LOOKUP", "s", 0) == b"MISS"
    for extra in ((), ("FROM", "s")):
        with pytest.raises(redis.ResponseError, match="session not found"):
            query(bob, "s", q, 100, *extra)
    with pytest.raises(redis.ResponseError, match="not registered"):
        bob.execute_command("KV.PREFIX.WARM", "s", 2, 32)
    store(bob, "s", 0, *prefix(rng, 2, 100, 32))  # bob's own "s" is another prefix
    assert query(alice, "s", q, 100) != query(bob, "s", q, 100)
    got = np.frombuffer(query(alice, "s", q, 100), "<f4").reshape(2, 1, 32)
    assert ref.rel_err(got, reference(q, k, v, [0, 1])[0]) < TOL


def test_an_acknowledged_store_survives_kill_9(tmp_path):
    from tests.support.servers import ProcessServer

    rng = np.random.default_rng(9)
    k, v = prefix(rng, 2, 5000, 64)  # large: the rows go through a log arena, written by the workers
    srv = ProcessServer(tmp_path / "data").start()
    try:
        r = redis.Redis(port=srv.port, socket_timeout=30)
        store(r, "a", 0, k, v)
        q = rng.standard_normal((2, 1, 64)).astype(np.float32)
        before = query(r, "a", q, 5000)
        srv.kill9()
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        r = redis.Redis(port=srv.port, socket_timeout=30)
        assert r.execute_command("KV.PREFIX.WARM", "a", 2, 64) == b"1"
        assert query(r, "a", q, 5000) == before
    finally:
        srv.stop()
