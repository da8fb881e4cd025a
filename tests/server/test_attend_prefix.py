"""ATTEND.PREFIX.* numerics over the wire: every form equals a float64 reference within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import redis
from tests.server.attend_support import (
    TOL,
    decoded,
    out_and_lse,
    prefix,
    reference,
    store,
    store_vstore_prefix,
    tokens_major,
)
from tests.unit.attention import reference as ref

from pion.attention.dense import attend_suffix, grouped_map
from pion.attention.merge import merge


@pytest.mark.parametrize(("q_heads", "kv_heads", "dim", "n", "rows"),
                         [(4, 4, 64, 300, 1), (8, 2, 64, 257, 1), (9, 3, 64, 130, 4), (2, 2, 128, 70, 3),
                          (4, 1, 32, 40, 1), (2, 2, 512, 9, 2), (2, 1, 96, 65, 1)])
def test_query_equals_reference_with_gqa_and_lse(rr, q_heads, kv_heads, dim, n, rows):
    rng = np.random.default_rng(n + dim)
    k, v = prefix(rng, kv_heads, n, dim)
    assert store(rr, "s", 0, k, v) in (b"OK", "OK", True)
    q = rng.standard_normal((q_heads, rows, dim)).astype(np.float32)
    raw = rr.execute_command("ATTEND.PREFIX.QUERY", "s", 0, q_heads, dim, n, q.tobytes())
    assert len(raw) == q_heads * rows * dim * 4 + (q_heads * rows * 4 if rows > 1 else 0)
    out, lse = out_and_lse(raw, q_heads, rows, dim)
    want_out, want_lse = reference(q, k, v, grouped_map(q_heads, kv_heads))
    assert ref.rel_err(out, want_out) < TOL
    if rows > 1:
        assert ref.rel_err(lse, want_lse) < TOL


def test_out_and_lse_merged_with_a_suffix_equal_attention_over_the_concatenation(r):
    rng = np.random.default_rng(1)
    k, v = prefix(rng, 2, 200, 64)
    store(r, "s", 3, k, v)
    rows, suffix = 4, 6
    q = rng.standard_normal((4, rows, 64)).astype(np.float32)
    k_suf = rng.standard_normal((2, suffix, 64)).astype(np.float32)
    v_suf = rng.standard_normal((2, suffix, 64)).astype(np.float32)
    out_p, lse_p = out_and_lse(r.execute_command("ATTEND.PREFIX.QUERY", "s", 3, 4, 64, 200, q.tobytes()), 4, rows, 64)

    out, _ = merge(out_p, lse_p, *attend_suffix(q, k_suf, v_suf, grouped_map(4, 2)))
    want, _ = ref.prefix_and_suffix(q, tokens_major(k), tokens_major(v), k_suf, v_suf, grouped_map(4, 2), 64 ** -0.5)
    assert ref.rel_err(out, want) < TOL


@pytest.mark.parametrize(("rows", "suffix", "head_map"), [(1, 5, b""), (3, 3, b""), (2, 7, bytes([1, 1, 0, 0])),
                                                          (1, 0, b"")])
def test_query_fused_equals_one_softmax_over_prefix_and_causal_suffix(rr, rows, suffix, head_map):
    rng = np.random.default_rng(rows + suffix)
    q_heads, kv_heads, dim, n = 4, 2, 64, 150
    k, v = prefix(rng, kv_heads, n, dim)
    store(rr, "s", 0, k, v)
    q = rng.standard_normal((q_heads, rows, dim)).astype(np.float32)
    k_suf = rng.standard_normal((kv_heads, suffix, dim)).astype(np.float32)
    v_suf = rng.standard_normal((kv_heads, suffix, dim)).astype(np.float32)
    raw = rr.execute_command("ATTEND.PREFIX.QUERY_FUSED", "s", 0, q_heads, dim, suffix, kv_heads, q.tobytes(),
                             k_suf.tobytes(), v_suf.tobytes(), head_map)
    assert len(raw) == q_heads * rows * dim * 4  # no LSE
    mapping = np.frombuffer(head_map, np.uint8).astype(int) if head_map else grouped_map(q_heads, kv_heads)
    if suffix == 0:
        want, _ = reference(q, k, v, mapping)
    else:
        want, _ = ref.prefix_and_suffix(q, tokens_major(k), tokens_major(v), k_suf, v_suf, mapping, dim ** -0.5)
    assert ref.rel_err(np.frombuffer(raw, "<f4").reshape(q_heads, rows, dim), want) < TOL


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8", "turbo4", "mlx4g32", "bf16"])
def test_from_ns_attends_over_a_vstore_prefix_decoding_its_rows(r, fmt):
    rng = np.random.default_rng(5)
    kv_heads, dim, n = 2, 64, 260
    rows_k = rng.standard_normal((n, kv_heads * dim)).astype(np.float32)
    rows_v = rng.standard_normal((n, kv_heads * dim)).astype(np.float32)
    store_vstore_prefix(r, "pc", 1, rows_k, rows_v, fmt)
    k = decoded(r, "pc_pk", 1, n).reshape(n, kv_heads, dim)  # what the codec kept
    v = decoded(r, "pc_pv", 1, n).reshape(n, kv_heads, dim)
    q = rng.standard_normal((4, 2, dim)).astype(np.float32)
    raw = r.execute_command("ATTEND.PREFIX.QUERY", "pc", 1, 4, dim, n, q.tobytes(), "FROM", "pc")
    out, lse = out_and_lse(raw, 4, 2, dim)
    want_out, want_lse = ref.attention(q, k, v, grouped_map(4, 2), dim ** -0.5)
    assert ref.rel_err(out, want_out) < TOL and ref.rel_err(lse, want_lse) < TOL
    k_suf = rng.standard_normal((kv_heads, 3, dim)).astype(np.float32)
    v_suf = rng.standard_normal((kv_heads, 3, dim)).astype(np.float32)
    q1 = q[:, :1]
    fused = r.execute_command("ATTEND.PREFIX.QUERY_FUSED", "alias", 1, 4, dim, 3, kv_heads, q1.tobytes(),
                              k_suf.tobytes(), v_suf.tobytes(), b"", "FROM", "pc")
    want, _ = ref.prefix_and_suffix(q1, k, v, k_suf, v_suf, grouped_map(4, 2), dim ** -0.5)
    assert ref.rel_err(np.frombuffer(fused, "<f4").reshape(4, 1, dim), want) < TOL


def test_scale_option_and_fa_window(r):
    rng = np.random.default_rng(6)
    k, v = prefix(rng, 2, 100, 32)
    store(r, "s", 0, k, v)
    q = rng.standard_normal((2, 2, 32)).astype(np.float32)
    raw = r.execute_command("ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 100, q.tobytes(), 10, "SCALE", "0.02")
    out, lse = out_and_lse(raw, 2, 2, 32)
    want_out, want_lse = reference(q, k[:, 90:], v[:, 90:], [0, 1], 0.02)
    assert ref.rel_err(out, want_out) < TOL and ref.rel_err(lse, want_lse) < TOL
    full = r.execute_command("ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 100, q.tobytes(), -1)
    assert ref.rel_err(out_and_lse(full, 2, 2, 32)[0], reference(q, k, v, [0, 1])[0]) < TOL
    r.config_set("attention-fa-window", "20")
    default = r.execute_command("ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 100, q.tobytes())
    assert ref.rel_err(out_and_lse(default, 2, 2, 32)[0], reference(q, k[:, 80:], v[:, 80:], [0, 1])[0]) < TOL
    whole = r.execute_command("ATTEND.PREFIX.QUERY", "s", 0, 2, 32, 100, q.tobytes(), 0)
    assert ref.rel_err(out_and_lse(whole, 2, 2, 32)[0], reference(q, k, v, [0, 1])[0]) < TOL


def test_top_k_on_a_decode_step_attends_the_highest_scoring_tokens(r):
    rng = np.random.default_rng(7)
    k, v = prefix(rng, 2, 300, 64)
    store(r, "s", 0, k, v)
    q = rng.standard_normal((2, 1, 64)).astype(np.float32)
    out = np.frombuffer(r.execute_command("ATTEND.PREFIX.QUERY", "s", 0, 2, 64, 20, q.tobytes()), "<f4").reshape(2, 1, 64)
    for h in range(2):
        best = np.sort(np.argsort(-(k[h].astype(np.float64) @ q[h, 0]))[:20])
        want, _ = ref.attention(q[h:h + 1], k[h][best][:, None], v[h][best][:, None], [0], 64 ** -0.5)
        assert ref.rel_err(out[h], want[0]) < TOL


def test_query_sparse_attends_each_heads_own_tokens(r):
    rng = np.random.default_rng(8)
    k, v = prefix(rng, 3, 400, 64)
    store(r, "s", 0, k, v)
    q = rng.standard_normal((3, 1, 64)).astype(np.float32)
    k_max = 5
    table = np.zeros((3, k_max), "<i4")
    table[0, :3], table[1, :5], table[2, :1] = [1, 50, 399], [0, 1, 2, 3, 4], [7]
    counts = np.array([3, 5, 1], "<u4")
    raw = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE", "s", 0, 3, 64, k_max, q.tobytes(), table.tobytes(),
                            counts.tobytes())
    out = np.frombuffer(raw, "<f4").reshape(3, 1, 64)
    for h in range(3):
        ids = table[h, :counts[h]]
        want, _ = ref.attention(q[h:h + 1], k[h][ids][:, None], v[h][ids][:, None], [0], 64 ** -0.5)
        assert ref.rel_err(out[h], want[0]) < TOL
    bad = table.copy()
    bad[0, 0] = 400
    with pytest.raises(redis.ResponseError, match="index out of range"):
        r.execute_command("ATTEND.PREFIX.QUERY_SPARSE", "s", 0, 3, 64, k_max, q.tobytes(), bad.tobytes(), counts.tobytes())


@pytest.mark.parametrize("selector", [0, 1])
def test_sparse_auto_picks_the_spec_tokens_and_fused_with_no_suffix_is_the_same(r, selector):
    rng = np.random.default_rng(9 + selector)
    q_heads, kv_heads, dim, n, block, k_top = 4, 2, 64, 1000, 64, 4
    k, v = prefix(rng, kv_heads, n, dim)
    store(r, "s", 0, k, v)
    q = rng.standard_normal((q_heads, 1, dim)).astype(np.float32)
    args = ["s", 0, q_heads, dim, block, k_top, kv_heads]
    raw = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO", *args, q.tobytes(), b"", -1, selector)
    head_map = grouped_map(q_heads, kv_heads)
    tokens = ref.select(q[:, 0], tokens_major(k), head_map, block, k_top, selector)
    want, _ = ref.attention(q, tokens_major(k)[tokens], tokens_major(v)[tokens], head_map, dim ** -0.5)
    assert ref.rel_err(np.frombuffer(raw, "<f4").reshape(q_heads, 1, dim), want) < TOL
    empty = np.zeros(0, np.float32).tobytes()
    fused = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", *args, 0, q.tobytes(), empty, empty, b"", -1,
                              selector)
    assert fused == raw
    k_suf = rng.standard_normal((kv_heads, 4, dim)).astype(np.float32)
    v_suf = rng.standard_normal((kv_heads, 4, dim)).astype(np.float32)
    fused = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", *args, 4, q.tobytes(), k_suf.tobytes(),
                              v_suf.tobytes(), b"", -1, selector)
    want, _ = ref.prefix_and_suffix(q, tokens_major(k)[tokens], tokens_major(v)[tokens], k_suf, v_suf, head_map,
                                    dim ** -0.5)
    assert ref.rel_err(np.frombuffer(fused, "<f4").reshape(q_heads, 1, dim), want) < TOL


def test_sparse_auto_with_a_small_prefix_is_dense(r):
    rng = np.random.default_rng(10)
    k, v = prefix(rng, 1, 200, 32)
    store(r, "s", 0, k, v)
    q = rng.standard_normal((1, 1, 32)).astype(np.float32)
    raw = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO", "s", 0, 1, 32, 64, 8, 1, q.tobytes(), b"")
    assert ref.rel_err(np.frombuffer(raw, "<f4").reshape(1, 1, 32), reference(q, k, v, [0])[0]) < TOL


def test_per_head_selectors_attend_each_heads_own_blocks(r):
    rng = np.random.default_rng(12)
    q_heads, kv_heads, dim, n = 4, 2, 32, 900
    k, v = prefix(rng, kv_heads, n, dim)
    store(r, "s", 0, k, v)
    q = rng.standard_normal((q_heads, 1, dim)).astype(np.float32)
    raw = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO", "s", 0, q_heads, dim, 64, 3, kv_heads, q.tobytes(), b"",
                            -1, 2)
    out = np.frombuffer(raw, "<f4").reshape(q_heads, 1, dim)
    head_map = grouped_map(q_heads, kv_heads)
    picks = ref.select_per_head(q[:, 0], tokens_major(k), head_map, 64, 3, 1)
    for h in range(q_heads):
        g = head_map[h]
        ids = picks[h]
        want, _ = ref.attention(q[h:h + 1], tokens_major(k)[ids][:, g:g + 1], tokens_major(v)[ids][:, g:g + 1], [0],
                                dim ** -0.5)
        assert ref.rel_err(out[h], want[0]) < TOL
