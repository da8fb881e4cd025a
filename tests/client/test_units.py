"""Pure client pieces: namespaces, block chain, URLs, error mapping, state blobs, manifests, schemas."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from pion.client import errors
from pion.client.blocks import block_hashes, hash_blob, token_blob
from pion.client.client import parse_match, parse_stats, redis_url
from pion.client.fastread import RespReader
from pion.client.manifest import build_manifest, mismatch, parse_manifest, tokens_sha256
from pion.client.namespace import config_hash, make_namespace, tokenizer_hash
from pion.client.rows import decode_rows, make_schema
from pion.client.state_blob import pack_state, unpack_state


def test_make_namespace_is_the_reference_contract():
    parts = ("llama-3.2-1b", "tok", "fp16", "1,2,3")
    expected = hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]
    assert make_namespace(*parts) == expected
    assert len(make_namespace("x")) == 32


def test_block_hashes_chain_over_parent_and_u32_tokens():
    tokens = list(range(10))
    hashes = block_hashes(tokens, 4)
    assert len(hashes) == 2  # the trailing partial block is not hashed
    first = hashlib.sha256(bytes(16) + np.arange(4, dtype="<u4").tobytes()).digest()[:16]
    second = hashlib.sha256(first + np.arange(4, 8, dtype="<u4").tobytes()).digest()[:16]
    assert hashes == [first, second]
    assert hash_blob(hashes) == first + second
    assert token_blob([1, 2]) == b"\x01\0\0\0\x02\0\0\0"


def test_block_hashes_of_a_shared_head_agree_and_then_diverge():
    a = block_hashes([1] * 8 + [2] * 4, 4)
    b = block_hashes([1] * 8 + [3] * 4, 4)
    assert a[:2] == b[:2] and a[2] != b[2]


@pytest.mark.parametrize("url,expected", [
    ("pion://127.0.0.1:1974", "redis://127.0.0.1:1974"),
    ("pion://localhost", "redis://localhost:1974"),
    ("pion://user:secret@host/2", "redis://user:secret@host:1974/2"),
    ("pions://host", "rediss://host:1974"),
    ("rediss://host:6380", "rediss://host:6380"),
    ("unix:///tmp/pion.sock", "unix:///tmp/pion.sock"),
])
def test_urls_map_to_redis_py(url, expected):
    assert redis_url(url) == expected


def test_unknown_url_scheme_is_refused():
    with pytest.raises(ValueError, match="unsupported URL scheme"):
        redis_url("http://host")


@pytest.mark.parametrize("text,cls", [
    ("ERR session not found", errors.SessionNotFound),
    ("ERR KV.PREFIX.REGISTER: unknown vquant 'x' (want int8|fp16)", errors.CodecRefused),
    ("ERR V-store not enabled (use --kvcache)", errors.KVCacheDisabled),
    ("OOM command not allowed when used memory > 'maxmemory'.", errors.OutOfMemory),
    ("NOAUTH Authentication required.", errors.AuthError),
    ("COLDMISS prefix demoted", errors.ColdMiss),
    ("ERR ns_key length must be 1..200", errors.NamespaceRefused),
    ("ERR unknown command 'KV.PREFIX.MATCH', with args beginning with: ", errors.UnknownCommand),
    ("ERR something else", errors.PionResponseError),
])
def test_error_replies_map_to_classes(text, cls):
    exc = errors.classify(text)
    assert type(exc) is cls and exc.message == text


def test_redis_py_exceptions_translate_with_their_stripped_prefix():
    import redis

    exc = errors.translate(redis.exceptions.ResponseError("session not found"))
    assert isinstance(exc, errors.SessionNotFound) and exc.prefix == "ERR"
    oom = errors.translate(redis.exceptions.OutOfMemoryError("command not allowed", status_code="OOM"))
    assert isinstance(oom, errors.OutOfMemory)
    assert isinstance(errors.translate(redis.exceptions.ConnectionError("refused")), errors.PionConnectionError)
    assert isinstance(errors.translate(redis.exceptions.TimeoutError("slow")), errors.PionTimeoutError)


def test_state_blob_round_trips_bit_exact_with_none_entries():
    conv = np.arange(12, dtype=np.float32).reshape(1, 4, 3)
    rec = (np.arange(6, dtype=np.float32) / 7).astype(ml_dtypes.bfloat16).reshape(2, 3)
    blob = pack_state("LinearAttentionLayer", [("conv0", conv), ("rec0", rec), ("x", None)], {"k": [3]})
    kind, arrays, meta = unpack_state(blob)
    assert kind == "LinearAttentionLayer" and meta == {"k": [3]}
    assert [name for name, _ in arrays] == ["conv0", "rec0", "x"]
    assert np.array_equal(arrays[0][1], conv) and arrays[2][1] is None
    assert arrays[1][1].dtype == rec.dtype and np.array_equal(arrays[1][1].view(np.uint16), rec.view(np.uint16))


def test_state_blob_refuses_foreign_bytes():
    with pytest.raises(ValueError):
        unpack_state(b"safetensors-or-whatever")


def _manifest(tokens, fp="fp", layout=None, codecs=None):
    layout = layout or {"runtime": "hf", "n_slots": 2, "attn": [0, 1], "state": [], "heads": [[2, 16, 16]] * 2,
                        "dtype": "float32"}
    codecs = codecs or make_schema(2, "float32")
    return build_manifest(fingerprint={"x": 1}, fp_hash=fp, layout=layout, codecs=codecs, token_ids=tokens,
                          block_size=4), layout, codecs


def test_manifest_matches_only_its_model_layout_codecs_and_tokens():
    manifest, layout, codecs = _manifest([1, 2, 3])
    assert manifest["n_kv_heads"] == 2 and manifest["head_dim"] == 16 and manifest["n_layers"] == 2
    assert manifest["tokens_sha256"] == tokens_sha256([1, 2, 3])
    check = dict(fp_hash="fp", layout=layout, codecs=codecs)
    assert mismatch(manifest, token_ids=[1, 2, 3], **check) is None
    assert "other tokens" in mismatch(manifest, token_ids=[1, 2, 4], **check)
    assert "another model" in mismatch(manifest, token_ids=[1, 2, 3], **{**check, "fp_hash": "other"})
    assert "codec" in mismatch(manifest, token_ids=[1, 2, 3], **{**check, "codecs": make_schema(2, "float32", "fp16")})
    assert mismatch(None, token_ids=[1], **check) == "no manifest"
    assert mismatch(manifest, token_ids=None, min_tokens=3, **check) is None
    assert "needed" in mismatch(manifest, token_ids=None, min_tokens=4, **check)
    assert parse_manifest(b"not json") is None


def test_schema_auto_is_the_model_dtype_and_boundary_protect_keeps_edges_fp16():
    assert make_schema(3, "bfloat16") == {"k": ["bf16"] * 3, "v": ["bf16"] * 3}
    assert make_schema(2, "float32", "auto") == {"k": ["fp32"] * 2, "v": ["fp32"] * 2}
    bp = make_schema(6, "float32", "turbo4", boundary_protect=2)
    assert bp["k"] == ["fp16"] * 6
    assert bp["v"] == ["fp16", "fp16", "turbo4", "turbo4", "fp16", "fp16"]


def test_float_rows_decode_as_views_and_block_codecs_through_pion_codecs():
    from pion.codecs import get_codec

    rows = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    assert np.array_equal(decode_rows(rows.tobytes(), "fp32", 3, 64), rows)
    bf = rows.astype(ml_dtypes.bfloat16)
    assert decode_rows(bf.tobytes(), "bf16", 3, 64).dtype == bf.dtype
    encoded = get_codec("int8").encode(rows)
    assert np.allclose(decode_rows(encoded, "int8", 3, 64), rows, atol=0.05)
    with pytest.raises(ValueError):
        decode_rows(rows.tobytes()[:-4], "fp32", 3, 64)


def test_config_hash_ignores_volatile_keys_and_tokenizer_hash_reads_vocab():
    assert config_hash({"a": 1, "transformers_version": "5"}) == config_hash({"a": 1, "_name_or_path": "x"})
    assert config_hash({"a": 1}) != config_hash({"a": 2})

    class Tok:
        all_special_tokens = ["<s>"]

        def get_vocab(self):
            return {"a": 0, "b": 1}

    assert len(tokenizer_hash(Tok())) == 64 and tokenizer_hash(None) == ""


def test_stats_and_match_replies_parse_in_both_protocols():
    flat = [b"kvprefix_hits", 3, b"prefill_seconds_avoided", b"3.600"]
    assert parse_stats(flat) == {"kvprefix_hits": 3, "prefill_seconds_avoided": 3.6}
    assert parse_stats({b"kvprefix_hits": 3}) == {"kvprefix_hits": 3}
    assert parse_match([None, 0]) is None and parse_match([b"ns", 2]) == ("ns", 2)


class _FakeSocket:
    def __init__(self, data: bytes, chunk: int = 5) -> None:
        self.data, self.chunk = data, chunk

    def recv(self, n):
        out, self.data = self.data[:min(n, self.chunk)], self.data[min(n, self.chunk):]
        return out

    def recv_into(self, view, n):
        out = self.recv(n)
        view[:len(out)] = out
        return len(out)


def test_fast_reader_parses_resp2_and_resp3_from_a_trickling_socket():
    data = (b"+HIT\r\n$-1\r\n*2\r\n$3\r\nabc\r\n$-1\r\n-ERR session not found\r\n:7\r\n"
            b"_\r\n%1\r\n+k\r\n#t\r\n$0\r\n\r\n")
    reader = RespReader(_FakeSocket(data))
    assert reader.read() == "HIT" and reader.read() is None
    assert reader.read() == [bytearray(b"abc"), None]
    assert isinstance(reader.read(), errors.SessionNotFound)
    assert reader.read() == 7 and reader.read() is None
    assert reader.read() == {"k": True}
    assert reader.read() == bytearray() and reader.leftover == 0


def test_the_client_imports_without_a_runtime_and_adapters_name_the_extra():
    code = (
        "import sys\n"
        "for name in ('torch', 'transformers', 'mlx', 'mlx_lm'): sys.modules[name] = None\n"
        "import pion.client\n"
        "from pion.client.adapters import require\n"
        "try:\n    require('torch', 'hf')\nexcept ImportError as e:\n    print(e)\n"
        "try:\n    require('mlx.core', 'mlx')\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'pion[hf]'" in out and "pip install 'pion[mlx]'" in out


def test_keep_freed_memory_sets_glibc_once_and_yields_to_the_operators_variables(monkeypatch):
    import platform

    from pion.client import allocator

    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    assert allocator.keep_freed_memory() is False  # the operator's setting wins
    assert allocator._applied is None
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert allocator.keep_freed_memory() is glibc
    if glibc:
        assert allocator._applied == allocator.DEFAULT_TRIM_BYTES
        assert allocator.keep_freed_memory(1024) is True  # already in force, at least that much
        assert allocator.keep_freed_memory(2 * allocator.DEFAULT_TRIM_BYTES) is False
