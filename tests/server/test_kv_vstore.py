"""V.*: every command's happy path and each error text, on the wire (redis-py and raw bytes)."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from pion.codecs import get_codec


def err(r, *args) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


def rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


# -- V.CREATE -------------------------------------------------------------------------------------


def test_create_returns_the_session_index_and_re_create_touches(r):
    assert r.execute_command("V.CREATE", "a", 64) == 0
    assert r.execute_command("V.CREATE", "b", 64, "VQUANT", "fp16") == 1
    assert r.execute_command("V.CREATE", "a", 64) == 0
    assert r.execute_command("V.CREATE", "b", "64", "vquant", "FP16") == 1
    assert r.execute_command("V.DROP", "a") == 1
    assert r.execute_command("V.CREATE", "c", 32) == 0  # lowest free index


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("a", 0), "invalid value_dim (must be 1-8192)"),
        (("a", 8193), "invalid value_dim (must be 1-8192)"),
        (("a", "x"), "invalid value_dim (must be 1-8192)"),
        (("a", 64, "VQUANT", "int4"),
         "V.CREATE: unknown VQUANT format 'int4' (want int8|turbo4|turbo3|turbo2|fp16|fp8|mlx4g32|fp32|bf16)"),
        (("a", 64, "VQUANT", "bf16_rope_fp8_body"),
         "V.CREATE: bf16_rope_fp8_body requires SCHEMA form with per-layer rope=N"),
        (("a", 100, "VQUANT", "turbo4"), "V.CREATE: VQUANT 'turbo4' needs value_dim divisible by 32 (got 100)"),
        (("a", 100, "VQUANT", "mlx4g32"), "V.CREATE: VQUANT 'mlx4g32' needs value_dim divisible by 32 (got 100)"),
        (("a", 64, "VQUANT"), "syntax error"),
    ],
)
def test_create_errors(r, args, message):
    assert err(r, "V.CREATE", *args) == message


def test_create_with_a_different_shape_is_refused(r):
    r.execute_command("V.CREATE", "a", 64, "VQUANT", "fp16")
    assert err(r, "V.CREATE", "a", 64, "VQUANT", "int8") == "V.CREATE: session 'a' exists with a different shape"
    assert err(r, "V.CREATE", "a", 32) == "V.CREATE: session 'a' exists with a different shape"


def test_schema_form_has_no_59_layer_cap(r):
    specs = ["fmt=fp16,dim=64"] * 70
    assert r.execute_command("V.CREATE", "s", "SCHEMA", 70, *specs) == 0
    info = r.execute_command("V.INFO", "s").decode()
    assert "num_layers:70\r\n" in info and "schema:heterogeneous\r\n" in info and "layer_69_fmt:fp16\r\n" in info
    assert r.execute_command("V.CREATE", "t", 64, "SCHEMA", 2, "fmt=turbo4", "fmt=bf16_rope_fp8_body,rope=32") == 1
    info = r.execute_command("V.INFO", "t").decode()
    assert "layer_1_rope:32\r\n" in info and "layer_0_dim:64\r\n" in info and "v_format:turbo4\r\n" in info


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("SCHEMA", 2, "fmt=fp16,dim=64"), "V.CREATE SCHEMA: expected 2 layer specs, got 1"),
        (("SCHEMA", 0), "V.CREATE SCHEMA: N must be 1..4096"),
        (("SCHEMA", 1, "fmt=fp16"), "V.CREATE SCHEMA: layer 0 needs dim= (the default dim is 0)"),
        (("SCHEMA", 1, "fmt=turbo4,dim=48"), "V.CREATE SCHEMA: layer 0 turbo/fp8 dim must be multiple of 32"),
        (("SCHEMA", 1, "fmt=mlx4g32,dim=48"), "V.CREATE SCHEMA: layer 0 mlx4g32 dim must be multiple of 32"),
        (("SCHEMA", 1, "fmt=int3,dim=48"),
         "V.CREATE SCHEMA: layer 0 unknown fmt 'int3' (want int8|turbo4|fp16|turbo3|turbo2|fp8|mlx4g32|fp32|bf16|bf16_rope_fp8_body)"),
        (("SCHEMA", 1, "s=1,dim=48"),
         "V.CREATE SCHEMA: layer 0 S-tensor reserved (route SSM/SWA-tail state through STATE.*)"),
        (("SCHEMA", 1, "x=1"), "V.CREATE SCHEMA: layer 0 unknown key 'x' (want fmt, dim, rope)"),
        (("SCHEMA", 1, "fmt=bf16_rope_fp8_body,dim=64,rope=40"),
         "V.CREATE SCHEMA: layer 0 bf16_rope_fp8_body needs 0<rope<dim and (dim-rope)%32==0"),
        ((9000, "SCHEMA", 1, "fmt=fp16"), "V.CREATE SCHEMA: default_dim must be 0..8192"),
    ],
)
def test_schema_errors(r, args, message):
    assert err(r, "V.CREATE", "s", *args) == message


# -- V.STOREBATCH -------------------------------------------------------------------------------


def test_store_and_fetch_each_form_and_format(r):
    r.execute_command("V.CREATE", "s", 64, "VQUANT", "fp16")
    x = rows(6, 64)
    assert r.execute_command("V.STOREBATCH", "s", 0, 0, 6, x.tobytes()) == b"OK"
    as16 = x.astype(np.float16)
    assert r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 6) == as16.astype(np.float32).tobytes()
    assert r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 6, "FMT", "NATIVE") == as16.tobytes()
    assert r.execute_command("V.FETCH", "s", 0, "RANGE", 2, 4, "fmt", "raw") == as16[2:4].tobytes()
    assert r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 6, "FMT", "F16") == as16.tobytes()
    ids = r.execute_command("V.FETCH", "s", 0, 5, 1, 9)
    expected = np.concatenate([as16[5:6], as16[1:2], np.zeros((1, 64), np.float16)]).astype(np.float32)
    assert ids == expected.tobytes()
    with pytest.raises(redis.ResponseError, match="does not hold rows"):  # not zero-filled past the rows stored
        r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 8, "FMT", "NATIVE")


def test_store_input_formats(r):
    r.execute_command("V.CREATE", "s", 32, "VQUANT", "fp32")
    x = rows(3, 32)
    r.execute_command("V.STOREBATCH", "s", 0, 0, 3, x.astype(np.float16).tobytes(), "FMT", "F16")
    assert r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 3) == x.astype(np.float16).astype(np.float32).tobytes()
    bf = (x.view(np.uint32) >> 16).astype(np.uint16)
    r.execute_command("V.STOREBATCH", "s", 1, 0, 3, bf.tobytes(), "FMT", "BF16")
    widened = (bf.astype(np.uint32) << 16).view(np.float32)
    assert r.execute_command("V.FETCH", "s", 1, "RANGE", 0, 3) == widened.tobytes()


def test_quantized_layers_keep_encoded_rows_and_ship_them_raw(r):
    r.execute_command("V.CREATE", "q", 64, "VQUANT", "turbo4")
    x = rows(4, 64)
    r.execute_command("V.STOREBATCH", "q", 0, 0, 4, x.tobytes())
    codec = get_codec("turbo4")
    raw = r.execute_command("V.FETCH", "q", 0, "RANGE", 0, 4, "FMT", "RAW")
    assert raw == codec.encode(x) and len(raw) == 4 * codec.bytes_per_row(64)
    assert r.execute_command("V.FETCH", "q", 0, "RANGE", 0, 4, "FMT", "NATIVE") == codec.decode(raw, (4, 64)).tobytes()
    r.execute_command("V.STOREBATCH", "q", 1, 0, 4, raw, "FMT", "RAW")
    assert r.execute_command("V.FETCH", "q", 1, "RANGE", 0, 4, "FMT", "RAW") == raw
    info = r.execute_command("V.INFO", "q").decode()
    assert f"bytes:{2 * len(raw)}\r\n" in info


def test_int8_batches_keep_their_own_scales(r):
    r.execute_command("V.CREATE", "i", 64)
    small, large = rows(2, 64) * 0.01, rows(2, 64, 1) * 100
    r.execute_command("V.STOREBATCH", "i", 0, 0, 2, small.tobytes())
    r.execute_command("V.STOREBATCH", "i", 0, 2, 2, large.tobytes())
    got = np.frombuffer(r.execute_command("V.FETCH", "i", 0, "RANGE", 0, 2), np.float32).reshape(2, 64)
    assert np.abs(got - small).max() < np.ptp(small) / 254


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("s", 0, 0, 2, b"\0" * 100), "V.STOREBATCH: blob size 100 != expected 512 (count=2 × per_layer_dim=64 × 4)"),
        (("s", 0, 0, 2, b"\0" * 512, "FMT", "F16"), "V.STOREBATCH: blob size 512 != expected 256 (count=2 × per_layer_dim=64 × 2)"),
        (("s", 0, 0, 2, b"\0" * 512, "FMT", "RAW"),
         "V.STOREBATCH: blob size 512 != expected 256 (count=2 × row_bytes=128, FMT RAW)"),
        (("s", 0, 0, 2, b"\0" * 512, "FMT", "F64"), "V.STOREBATCH: unknown option (expected FMT F32|F16|BF16|RAW, TOKEN token)"),
        (("s", 0, 0, 2, b"\0" * 512, "EXTRA"), "V.STOREBATCH: unknown option (expected FMT F32|F16|BF16|RAW, TOKEN token)"),
        (("s", -1, 0, 2, b""), "invalid layer_id/start_id/count"),
        (("s", 0, -1, 2, b""), "invalid layer_id/start_id/count"),
        (("s", 0, 0, 0, b""), "invalid layer_id/start_id/count"),
        (("s", "x", 0, 1, b""), "invalid layer_id/start_id/count"),
        (("s", 4096, 0, 1, b""), "V.STOREBATCH: layer_id exceeds MAX_VS_LAYERS"),
        (("nope", 0, 0, 1, b""), "session not found"),
        (("s", 0, 16777215, 2, b"\0" * 512), "V.STOREBATCH failed"),
    ],
)
def test_storebatch_errors(r, args, message):
    r.execute_command("V.CREATE", "s", 64, "VQUANT", "fp16")
    assert err(r, "V.STOREBATCH", *args) == message


def test_schema_layers_past_n_without_default_dim_are_refused(r):
    r.execute_command("V.CREATE", "s", "SCHEMA", 1, "fmt=fp16,dim=32")
    assert err(r, "V.STOREBATCH", "s", 1, 0, 1, b"\0" * 128) == "layer 1 is past the session's SCHEMA and it has no default dim"
    r.execute_command("V.CREATE", "t", 16, "SCHEMA", 1, "fmt=fp16,dim=32")
    assert r.execute_command("V.STOREBATCH", "t", 1, 0, 1, b"\0" * 64) == b"OK"  # default dim, int8
    assert "layer_1_tokens:1" in r.execute_command("V.INFO", "t").decode()


# -- V.FETCH ------------------------------------------------------------------------------------


def test_batch_returns_one_element_per_layer_with_nil_for_empty_layers(r):
    r.execute_command("V.CREATE", "s", 32, "VQUANT", "fp16")
    x = rows(4, 32)
    r.execute_command("V.STOREBATCH", "s", 0, 0, 4, x.tobytes())
    r.execute_command("V.STOREBATCH", "s", 2, 0, 4, x.tobytes())
    out = r.execute_command("V.FETCH", "s", "BATCH", 0, 4, "FMT", "NATIVE")
    assert [len(o) if o is not None else None for o in out] == [256, None, 256]
    assert len(r.execute_command("V.FETCH", "s", "BATCH", 0, 4, 2)) == 2
    assert len(r.execute_command("V.FETCH", "s", "BATCH", 0, 4, 9)) == 3
    assert r.execute_command("V.FETCH", "s", 1, "RANGE", 0, 4) is None
    assert r.execute_command("V.FETCH", "s", 5, 0) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("s", 0, 1, "FMT", "NATIVE"), "FMT NATIVE requires the RANGE or BATCH form"),
        (("s", 0, "RANGE", 4, 4), "invalid RANGE: end must exceed start (>=0)"),
        (("s", 0, "RANGE", -1, 4), "invalid RANGE: end must exceed start (>=0)"),
        (("s", "BATCH", 3, 1), "invalid RANGE: end must exceed start (>=0)"),
        (("s", 0, "RANGE", 0, 4, "FMT", "F8"), "V.FETCH: unknown FMT (expected F32|F16|NATIVE|RAW)"),
        (("nope", 0, 1), "session not found"),
        (("s", 0, *range(1025)), "V.FETCH: at most 1024 ids (use RANGE or BATCH)"),
        (("s", 0, "RANGE", 0, 16000000), "V.FETCH: layer 0 does not hold rows [0, 16000000) (1 rows stored, up to position 1)"),
        (("s", 0, "RANGE", 0, 2), "V.FETCH: layer 0 does not hold rows [0, 2) (1 rows stored, up to position 1)"),
        (("s", "BATCH", 0, 2), "V.FETCH: layer 0 does not hold rows [0, 2) (1 rows stored, up to position 1)"),
    ],
)
def test_fetch_errors(r, args, message):
    r.execute_command("V.CREATE", "s", 32, "VQUANT", "fp16")
    r.execute_command("V.STOREBATCH", "s", 0, 0, 1, b"\0" * 128)
    assert err(r, "V.FETCH", *args) == message


def test_fetch_counts_bytes_served_and_rows(r):
    r.execute_command("V.CREATE", "s", 32, "VQUANT", "fp16")
    r.execute_command("V.STOREBATCH", "s", 0, 0, 4, rows(4, 32).tobytes())
    r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 4, "FMT", "NATIVE")
    r.execute_command("V.FETCH", "s", "BATCH", 0, 2)
    stats = dict(zip(*[iter(r.execute_command("PION.STATS"))] * 2, strict=True))
    assert stats[b"kvprefix_bytes_served"] == 4 * 64 + 2 * 128
    assert b"total_fetches:6\r\n" in r.execute_command("V.INFO")


# -- V.INFO, rollback, drop ---------------------------------------------------------------------


def test_info_exact_text(raw):
    raw.cmd("V.CREATE", "s", "64", "VQUANT", "fp16")
    raw.read_exactly(b":0\r\n")
    raw.cmd("V.STOREBATCH", "s", "1", "0", "3", b"\0" * (3 * 64 * 4))
    raw.read_exactly(b"+OK\r\n")
    body = (b"session_idx:0\r\nvalue_dim:64\r\nv_format:fp16\r\nnum_layers:2\r\nschema:uniform\r\n"
            b"layer_1_tokens:3\r\ntotal_tokens:3\r\nbytes:384\r\n")
    raw.cmd("V.INFO", "s")
    assert raw.read_exactly(b"$%d\r\n%s\r\n" % (len(body), body)) == b"$%d\r\n%s\r\n" % (len(body), body)
    body = b"enabled:1\r\nsessions:1\r\ntotal_tokens:3\r\ntotal_fetches:0\r\nbytes:384\r\n"
    raw.cmd("V.INFO")
    assert raw.read_exactly(b"$%d\r\n%s\r\n" % (len(body), body)) == b"$%d\r\n%s\r\n" % (len(body), body)
    raw.cmd("V.INFO", "nope")
    assert raw.read_exactly(b"-ERR session not found\r\n") == b"-ERR session not found\r\n"


def test_snapshot_restore_commit_roll_back_speculative_rows(r):
    r.execute_command("V.CREATE", "s", 32, "VQUANT", "fp32")
    base, spec = rows(4, 32), rows(3, 32, 1)
    r.execute_command("V.STOREBATCH", "s", 0, 0, 4, base.tobytes())
    snap = r.execute_command("V.SNAPSHOT", "s")
    r.execute_command("V.STOREBATCH", "s", 0, 4, 3, spec.tobytes())
    r.execute_command("V.STOREBATCH", "s", 0, 1, 1, spec[:1].tobytes())  # overwrite inside the snapshot too
    assert r.execute_command("V.RESTORE", "s", snap) == b"OK"
    assert r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 4) == base.tobytes()
    assert "layer_0_tokens:4\r\n" in r.execute_command("V.INFO", "s").decode()
    assert r.execute_command("V.RESTORE", "s", snap) == b"OK"  # still valid
    assert r.execute_command("V.COMMIT", "s", snap) == 1
    assert r.execute_command("V.COMMIT", "s", snap) == 0
    assert err(r, "V.RESTORE", "s", snap) == "V.RESTORE: unknown snap_id for this session"
    ids = {r.execute_command("V.SNAPSHOT", "s") for _ in range(16)}
    assert len(ids) == 16 and snap not in ids
    assert err(r, "V.SNAPSHOT", "s") == "V.SNAPSHOT: no free snapshot slot (max 16 per session)"
    assert err(r, "V.SNAPSHOT", "nope") == "session not found"


def test_truncate_and_drop(r):
    r.execute_command("V.CREATE", "s", 32, "VQUANT", "fp32")
    r.execute_command("V.STOREBATCH", "s", 0, 0, 4, rows(4, 32).tobytes())
    assert r.execute_command("V.TRUNCATE", "s", 0, 2) == b"OK"
    assert "layer_0_tokens:2\r\n" in r.execute_command("V.INFO", "s").decode()
    assert r.execute_command("V.DROP", "s") == 1
    assert r.execute_command("V.DROP", "s") == 0
    assert err(r, "V.FETCH", "s", 0, 1) == "session not found"


def test_stores_are_logged_encoded_as_fmt_raw(server, r):
    from pion.server.durability.journal import Journal

    class Recorder(Journal):
        def __init__(self):
            super().__init__()
            self.records = []

        def append(self, effects):
            self.records.append([argv for _, argv in effects])
            return super().append(effects)

    recorder = Recorder()
    server.server.journal = recorder
    r.execute_command("V.CREATE", "q", 32, "VQUANT", "turbo2")
    x = rows(2, 32)
    r.execute_command("V.STOREBATCH", "q", 0, 0, 2, x.tobytes())
    r.execute_command("V.FETCH", "q", 0, "RANGE", 0, 2)
    store = recorder.records[-1][0]
    assert len(recorder.records) == 2 and recorder.records[0][0][0] == b"V.CREATE"
    assert store[:5] == [b"V.STOREBATCH", b"q", b"0", b"0", b"2"] and store[6:] == [b"FMT", b"RAW"]
    assert bytes(store[5]) == get_codec("turbo2").encode(x)


def test_tenants_get_separate_kv_spaces(server, r):
    """A client with a tenant sees only its tenant's sessions (the engine keeps one space each)."""
    r.execute_command("V.CREATE", "shared-name", 32)
    other = redis.Redis(port=server.port)
    other.execute_command("CLIENT", "SETNAME", "t")

    def make_tenant():
        for client in server.server.clients.values():
            if client.name == b"t":
                client.tenant = "acme"

    server.call(make_tenant)
    assert err(other, "V.INFO", "shared-name") == "session not found"
    assert other.execute_command("V.CREATE", "shared-name", 64) == 0
    assert b"value_dim:32" in r.execute_command("V.INFO", "shared-name")
    assert set(server.server.parts.kvcache.spaces) == {b"", b"acme"}


@pytest.mark.parametrize("count", [4, 8192])  # on the loop, and in the worker pool
def test_a_nan_in_rows_for_a_codec_with_shared_scales_is_refused(r, count):
    r.execute_command("V.CREATE", "q", 64, "VQUANT", "int8")
    x = np.ones((count, 64), np.float32)
    x[count - 1, 3] = np.nan
    with pytest.raises(redis.ResponseError, match="int8 cannot encode NaN or Inf"):
        r.execute_command("V.STOREBATCH", "q", 0, 0, count, x.tobytes())
    assert b"layer_0_tokens" not in r.execute_command("V.INFO", "q")
    r.execute_command("V.CREATE", "h", 64, "VQUANT", "fp16")  # per-value codecs keep it where it is
    assert r.execute_command("V.STOREBATCH", "h", 0, 0, count, x.tobytes()) == b"OK"
