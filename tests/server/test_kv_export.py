"""V.EXPORT: the safetensors file a client on this host maps (layout, dtypes, freshness, errors, budget)."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import redis
import safetensors.numpy
from tests.support.servers import ProcessServer

from pion.client.local_lane import open_export
from pion.kvcache.export import RECORD, clean_stale

H, D = 3, 64


def rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, H * D)).astype(np.float32)


def heads_major(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], H, D).transpose(1, 0, 2)[None]


def fill(r, ns: str = "ns", layers: int = 2, n: int = 50, fmt: str = "fp32", seed: int = 0) -> dict:
    """Store ``layers`` layers of random rows in ``ns_pk``/``ns_pv``; the fp32 inputs by (side, layer)."""
    data = {}
    for side in ("pk", "pv"):
        r.execute_command("V.CREATE", f"{ns}_{side}", H * D, "VQUANT", fmt)
        for layer in range(layers):
            data[side, layer] = x = rows(n, seed + 10 * layer + (side == "pv"))
            r.execute_command("V.STOREBATCH", f"{ns}_{side}", layer, 0, n, x.tobytes())
    return data


def export(r, *args, ns: str = "ns") -> str:
    return r.execute_command("V.EXPORT", f"{ns}_pk", f"{ns}_pv", *args).decode()


def test_f32_export_is_the_stored_rows_head_major_bit_for_bit(r):
    data = fill(r)
    path = export(r, 10, 40, 2, H, D, "DTYPE", "F32")
    assert os.path.isabs(path)
    tensors = safetensors.numpy.load_file(path)
    assert sorted(tensors) == ["k.0", "k.1", "v.0", "v.1"]
    for layer in range(2):
        assert np.array_equal(tensors[f"k.{layer}"], heads_major(data["pk", layer][10:40]))
        assert np.array_equal(tensors[f"v.{layer}"], heads_major(data["pv", layer][10:40]))
    mapped = open_export(path, 2, (1, H, 30, D), "F32")
    assert np.array_equal(mapped[1][0], tensors["k.1"])
    mapped[1][0][...] = 0  # a private mapping: the reader's writes never reach the file
    assert np.array_equal(safetensors.numpy.load_file(path)["k.1"], tensors["k.1"])


def test_default_dtype_is_fp16_as_the_reference_and_bf16_is_exact_for_bf16_rows(r):
    data = fill(r)
    tensors = safetensors.numpy.load_file(export(r, 0, 50, 1, H, D))
    assert tensors["k.0"].dtype == np.float16
    assert np.array_equal(tensors["k.0"], heads_major(data["pk", 0]).astype(np.float16))
    fill(r, "b", fmt="bf16", seed=5)
    stored = np.frombuffer(r.execute_command("V.FETCH", "b_pv", 1, "RANGE", 0, 50, "FMT", "RAW"), ml_dtypes.bfloat16)
    got = open_export(export(r, 0, 50, 2, H, D, "DTYPE", "BF16", ns="b"), 2, (1, H, 50, D), "BF16")
    assert np.array_equal(got[1][1].view(np.uint16), heads_major(stored.reshape(50, H * D)).view(np.uint16))


def test_a_lossy_codec_exports_what_v_fetch_decodes(r):
    fill(r, fmt="int8")
    fetched = np.frombuffer(r.execute_command("V.FETCH", "ns_pk", 1, "RANGE", 5, 45), np.float32).reshape(40, H * D)
    got = open_export(export(r, 5, 45, 2, H, D, "DTYPE", "F32"), 2, (1, H, 40, D), "F32")
    assert np.array_equal(got[1][0], heads_major(fetched))


def test_same_request_same_file_until_either_session_changes(r):
    fill(r)
    first = export(r, 0, 50, 2, H, D, "DTYPE", "F32")
    assert export(r, 0, 50, 2, H, D, "DTYPE", "F32") == first
    other = export(r, 0, 20, 2, H, D, "DTYPE", "F32")
    assert other != first and os.path.exists(first)
    r.execute_command("V.STOREBATCH", "ns_pv", 1, 49, 1, rows(1, 99).tobytes())
    second = export(r, 0, 50, 2, H, D, "DTYPE", "F32")
    assert second != first and not os.path.exists(first) and not os.path.exists(other)
    assert np.array_equal(safetensors.numpy.load_file(second)["v.1"][0, :, 49], rows(1, 99).reshape(H, D))
    r.execute_command("V.TRUNCATE", "ns_pk", 0, 50)  # a no-op truncate still counts as a change
    assert export(r, 0, 50, 2, H, D, "DTYPE", "F32") != second


def test_dropped_sessions_take_their_exports_with_them(r):
    fill(r)
    fill(r, "b")
    path = export(r, 0, 50, 2, H, D)
    r.execute_command("V.DROP", "ns_pv")
    export(r, 0, 50, 2, H, D, ns="b")  # any export sweeps the stale ones
    assert not os.path.exists(path)


def recorded_base(srv) -> Path:
    return Path((Path(srv.settings.dir) / RECORD).read_text().strip())


def test_files_are_private_in_a_fresh_directory_removed_at_shutdown(make_server):
    srv = make_server()
    r = redis.Redis(port=srv.port)
    fill(r)
    path = export(r, 0, 50, 2, H, D)
    base = recorded_base(srv)
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        assert str(base).startswith(f"/dev/shm/pion-export-{os.getuid()}-")  # memory, not the data disk
    assert os.path.dirname(path) == str(base / "default")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(base).st_mode) == stat.S_IMODE(os.stat(base / "default").st_mode) == 0o700
    assert os.lstat(base).st_uid == os.getuid() and not os.path.islink(base)
    r.close()
    srv.stop()
    assert not base.exists() and not (Path(srv.settings.dir) / RECORD).exists()


@pytest.mark.parametrize("removed", ["base", "space"])
def test_a_directory_removed_under_the_running_server_is_made_again(make_server, removed):
    import shutil

    srv = make_server()
    r = redis.Redis(port=srv.port)
    data = fill(r)
    first = export(r, 0, 50, 2, H, D, "DTYPE", "F32")
    base = recorded_base(srv)
    shutil.rmtree(base if removed == "base" else base / "default")  # a clean-up of /dev/shm
    again = export(r, 0, 50, 2, H, D, "DTYPE", "F32")  # used to answer an internal error until restart
    assert again != first and os.path.exists(again) and not os.path.exists(first)
    new_base = recorded_base(srv)
    assert (new_base != base) == (removed == "base")  # a gone base is never reused: a new random name
    assert os.path.dirname(again) == str(new_base / "default")
    assert stat.S_IMODE(os.stat(new_base / "default").st_mode) == 0o700
    assert np.array_equal(safetensors.numpy.load_file(again)["k.0"], heads_major(data["pk", 0]))
    assert export(r, 0, 50, 2, H, D, "DTYPE", "F32") == again  # and it is cached as before
    r.close()
    srv.stop()
    assert not new_base.exists()


def test_a_planted_link_at_the_old_predictable_name_is_never_followed(make_server, tmp_path):
    """Issue 12, defect 5: the export base had a name anyone could compute, in a world-writable
    directory, and was used without checks: a link planted there made V.EXPORT empty its target."""
    victim = tmp_path / "victim"
    (victim / "default").mkdir(parents=True)
    (victim / "default" / "precious").write_text("keep me")
    os.chmod(victim, 0o755)
    srv = make_server()
    data = os.path.abspath(srv.settings.dir)
    parent = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else data
    name = f"pion-export-{os.getuid()}-{hashlib.sha256(data.encode()).hexdigest()[:16]}" if parent == "/dev/shm" \
        else "export"
    planted = Path(parent) / name
    planted.symlink_to(victim, target_is_directory=True)
    try:
        r = redis.Redis(port=srv.port)
        fill(r)
        path = export(r, 0, 50, 2, H, D)
        assert not path.startswith(str(planted))
        assert (victim / "default" / "precious").read_text() == "keep me"
        assert stat.S_IMODE(os.stat(victim).st_mode) == 0o755
    finally:
        planted.unlink()


def test_exports_of_a_killed_server_are_removed_at_the_next_start(tmp_path):
    """Issue 12, defect 6: after kill -9 the export files stayed in shared memory."""
    srv = ProcessServer(tmp_path / "data").start()
    try:
        r = redis.Redis(port=srv.port, socket_timeout=10)
        fill(r)
        path = export(r, 0, 50, 2, H, D)
        srv.kill9()
        assert os.path.exists(path)
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(os.path.dirname(path)))
        assert "removed the exports a previous server left" in srv.log()
    finally:
        srv.stop()


def test_a_recorded_directory_that_is_not_ours_is_left_alone(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    foreign = Path(tempfile.mkdtemp(prefix=f"pion-export-{os.getuid()}-", dir=tmp_path))
    (foreign / "theirs").write_text("x")
    link = tmp_path / f"pion-export-{os.getuid()}-link"
    link.symlink_to(foreign, target_is_directory=True)
    for recorded, why in ((link, "it is a symbolic link"), (foreign, "it belongs to uid 65534")):
        if why.startswith("it belongs") and os.getuid() != 0:
            continue  # only root can give a directory away
        if why.startswith("it belongs"):
            os.chown(foreign, 65534, 65534)
        (data / RECORD).write_text(f"{recorded}\n")
        line = clean_stale(str(data))
        assert line is not None and why in line
        assert (foreign / "theirs").read_text() == "x"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ns_pk", "nope", 0, 1, 1, H, D), "session not found"),
        (("ns_pk", "ns_pv", 5, 5, 1, H, D), "invalid RANGE: end must exceed start (>=0)"),
        (("ns_pk", "ns_pv", -1, 5, 1, H, D), "invalid RANGE: end must exceed start (>=0)"),
        (("ns_pk", "ns_pv", 0, 1, 3, H, D), "V.EXPORT: n_layers 3 exceeds the K session's 2 stored layers"),
        (("ns_pk", "ns_pv", 0, 1, 0, H, D), "V.EXPORT: n_layers must be 1..4096"),
        (("ns_pk", "ns_pv", 0, 1, 1, 4, D),
         "V.EXPORT: n_kv_heads*head_dim = 256 but layer 0 of the K session stores width 192"),
        (("ns_pk", "ns_pv", 0, 51, 1, H, D), "V.EXPORT: layer 0 of the K session holds 50 tokens, fewer than end 51"),
        (("ns_pk", "ns_pv", 0, 1, 1, H, D, "DTYPE", "I8"), "V.EXPORT: unknown DTYPE (expected F16|F32|BF16)"),
        (("ns_pk", "ns_pv", 0, 1, 1, H, D, "DTYPE"), "syntax error"),
        (("ns_pk", "ns_pv", 0, 1, 1, H), "wrong number of arguments for 'v.export' command"),
    ],
)
def test_errors_change_nothing_and_leave_the_connection_usable(r, args, message):
    fill(r)
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command("V.EXPORT", *args)
    assert str(exc.value) == message
    assert r.ping()


def test_budget_drops_least_recently_used_exports_and_refuses_what_never_fits(r):
    fill(r)
    one = 4096 + 2 * 2 * H * 50 * D * 2  # header page + 4 fp16 tensors
    r.config_set("kv-export-maxbytes", 2 * one)
    assert r.config_get("kv-export-maxbytes") == {"kv-export-maxbytes": str(2 * one)}
    a = export(r, 0, 50, 2, H, D)
    b = export(r, 0, 50, 2, H, D, "DTYPE", "BF16")
    assert export(r, 0, 50, 2, H, D) == a  # a is now the most recently used
    export(r, 0, 50, 2, H, D, "DTYPE", "F32")  # twice the size of one: both others go
    assert not os.path.exists(a) and not os.path.exists(b)
    r.config_set("kv-export-maxbytes", one)
    with pytest.raises(redis.ResponseError, match=r"the export needs \d+ bytes, more than kv-export-maxbytes"):
        export(r, 0, 49, 2, H, D, "DTYPE", "F32")
    r.config_set("kv-export-maxbytes", 0)
    with pytest.raises(redis.ResponseError, match=r"V.EXPORT is disabled \(kv-export-maxbytes is 0\)"):
        export(r, 0, 50, 2, H, D)


def test_export_inside_multi_answers_in_place(r):
    fill(r, n=600)  # big enough to run in the worker pool outside MULTI
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("V.EXPORT", "ns_pk", "ns_pv", 0, 600, 2, H, D, "DTYPE", "F32")
    pipe.execute_command("V.EXPORT", "ns_pk", "ns_pv", 0, 600, 2, H, D, "DTYPE", "F32")
    first, second = pipe.execute()
    assert first == second and os.path.exists(first.decode())
    assert export(r, 0, 600, 2, H, D, "DTYPE", "F32") == first.decode()  # the deferred path finds it


def test_a_large_export_from_the_worker_pool_is_complete(r):
    data = fill(r, layers=3, n=2000)
    got = safetensors.numpy.load_file(export(r, 0, 2000, 3, H, D, "DTYPE", "F32"))
    for layer in range(3):
        assert np.array_equal(got[f"v.{layer}"], heads_major(data["pv", layer]))
