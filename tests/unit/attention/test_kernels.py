"""The Stage-2 kernels against the float64 reference (within 1e-5, normwise relative)."""

from __future__ import annotations

import numpy as np
import pytest

from pion.attention import dense
from pion.attention.dense import attend_prefix, attend_suffix, grouped_map
from pion.attention.merge import merge
from pion.attention.sparse import attend_indexed, attend_tokens, top_k_tokens
from tests.unit.attention import reference as ref

TOL = 1e-5


def tensors(rng, n, heads, dim, scale=1.0):
    """A head-major prefix ``[H, N, D]`` (the kernels' layout)."""
    return (rng.standard_normal((heads, n, dim)) * scale).astype(np.float32)


def tm(cube):
    """Token-major ``[N, H, D]`` for the reference."""
    return np.transpose(cube, (1, 0, 2))


@pytest.mark.parametrize(
    ("q_heads", "kv_heads", "dim", "n", "rows"),
    [(8, 8, 64, 300, 1), (8, 2, 64, 257, 1), (9, 3, 64, 130, 5), (4, 4, 128, 64, 3), (32, 8, 32, 100, 1),
     (2, 1, 96, 50, 2), (2, 2, 160, 40, 1), (2, 1, 192, 33, 1), (2, 2, 256, 20, 4), (1, 1, 512, 17, 1),
     (3, 3, 80, 23, 2)],
)
def test_dense_prefix_equals_reference(q_heads, kv_heads, dim, n, rows):
    rng = np.random.default_rng(n * dim + rows)
    k, v = tensors(rng, n, kv_heads, dim, 2.0), tensors(rng, n, kv_heads, dim)
    q = (rng.standard_normal((q_heads, rows, dim)) * 2).astype(np.float32)
    head_map = grouped_map(q_heads, kv_heads)
    out, lse = attend_prefix(q, k, v, head_map)
    want_out, want_lse = ref.attention(q, tm(k), tm(v), head_map, dim ** -0.5)
    assert out.dtype == np.float32 and out.shape == (q_heads, rows, dim)
    assert ref.rel_err(out, want_out) < TOL
    assert ref.rel_err(lse, want_lse) < TOL


def test_chunked_rows_equal_one_pass(monkeypatch):
    rng = np.random.default_rng(1)
    k, v = tensors(rng, 500, 2, 64), tensors(rng, 500, 2, 64)
    q = rng.standard_normal((4, 7, 64)).astype(np.float32)
    head_map = grouped_map(4, 2)
    whole = attend_prefix(q, k, v, head_map)
    monkeypatch.setattr(dense, "SCORE_BYTES", 4 * 500 * 3)  # three rows a chunk
    parts = attend_prefix(q, k, v, head_map)
    np.testing.assert_allclose(parts[0], whole[0], rtol=0, atol=1e-6)
    want = ref.attention(q, tm(k), tm(v), head_map, 64 ** -0.5)
    assert ref.rel_err(parts[0], want[0]) < TOL


def test_a_window_of_the_prefix_is_a_view():
    rng = np.random.default_rng(2)
    k = tensors(rng, 100, 3, 64)
    q = rng.standard_normal((3, 1, 64)).astype(np.float32)
    out, _ = attend_prefix(q, k[:, 40:], k[:, 40:])
    want, _ = ref.attention(q, tm(k)[40:], tm(k)[40:], [0, 1, 2], 64 ** -0.5)
    assert ref.rel_err(out, want) < TOL


@pytest.mark.parametrize(("rows", "suffix"), [(1, 1), (1, 9), (4, 4), (3, 10), (6, 6)])
def test_prefix_merged_with_suffix_equals_attention_over_concatenation(rows, suffix):
    rng = np.random.default_rng(rows * 10 + suffix)
    q_heads, kv_heads, dim, n = 6, 2, 64, 200
    k, v = tensors(rng, n, kv_heads, dim), tensors(rng, n, kv_heads, dim)
    k_suf = rng.standard_normal((kv_heads, suffix, dim)).astype(np.float32)
    v_suf = rng.standard_normal((kv_heads, suffix, dim)).astype(np.float32)
    q = rng.standard_normal((q_heads, rows, dim)).astype(np.float32)
    head_map = grouped_map(q_heads, kv_heads)
    out, lse = merge(*attend_prefix(q, k, v, head_map), *attend_suffix(q, k_suf, v_suf, head_map))
    want_out, want_lse = ref.prefix_and_suffix(q, tm(k), tm(v), k_suf, v_suf, head_map, dim ** -0.5)
    assert ref.rel_err(out, want_out) < TOL
    assert ref.rel_err(lse, want_lse) < TOL


def test_custom_scale_is_used():
    rng = np.random.default_rng(3)
    k, v = tensors(rng, 40, 1, 32), tensors(rng, 40, 1, 32)
    q = rng.standard_normal((1, 2, 32)).astype(np.float32)
    out, lse = attend_prefix(q, k, v, scale=0.05)
    want_out, want_lse = ref.attention(q, tm(k), tm(v), [0], 0.05)
    assert ref.rel_err(out, want_out) < TOL and ref.rel_err(lse, want_lse) < TOL


def test_empty_sides_merge_to_the_other_side():
    rng = np.random.default_rng(4)
    k, v = tensors(rng, 30, 2, 32), tensors(rng, 30, 2, 32)
    q = rng.standard_normal((2, 1, 32)).astype(np.float32)
    prefix = attend_prefix(q, k, v)
    empty = attend_suffix(q, np.zeros((2, 0, 32), np.float32), np.zeros((2, 0, 32), np.float32))
    assert np.all(np.isneginf(empty[1])) and not np.any(empty[0])
    out, lse = merge(*prefix, *empty)
    np.testing.assert_array_equal(out, prefix[0])
    np.testing.assert_array_equal(lse, prefix[1])
    none_out, none_lse = merge(*empty, *empty)
    assert not np.any(none_out) and np.all(np.isneginf(none_lse))
    assert not np.any(np.isnan(none_out))


def test_indexed_attention_equals_reference_over_each_heads_subset():
    rng = np.random.default_rng(5)
    k, v = tensors(rng, 120, 4, 64), tensors(rng, 120, 4, 64)
    q = rng.standard_normal((4, 1, 64)).astype(np.float32)
    picks = [np.array([0, 5, 7]), np.arange(120), np.array([], dtype=np.intp), np.array([119])]
    out, lse = attend_indexed(q, k, v, picks)
    for h, ids in enumerate(picks):
        if len(ids) == 0:
            assert not np.any(out[h]) and np.isneginf(lse[h, 0])
            continue
        want_out, want_lse = ref.attention(q[h:h + 1], tm(k)[ids][:, h:h + 1], tm(v)[ids][:, h:h + 1], [0], 64 ** -0.5)
        assert ref.rel_err(out[h], want_out[0]) < TOL
        assert ref.rel_err(lse[h], want_lse[0]) < TOL


def test_top_k_tokens_are_the_highest_scores():
    rng = np.random.default_rng(6)
    k = tensors(rng, 200, 2, 32)
    q = rng.standard_normal((4, 1, 32)).astype(np.float32)
    head_map = grouped_map(4, 2)
    picked = top_k_tokens(q, k, head_map, 10)
    for h in range(4):
        scores = k[head_map[h]].astype(np.float64) @ q[h, 0]
        assert set(picked[h]) == set(np.argsort(-scores)[:10])
        assert list(picked[h]) == sorted(picked[h])


def test_shared_token_subset_equals_reference():
    rng = np.random.default_rng(7)
    k, v = tensors(rng, 300, 2, 64), tensors(rng, 300, 2, 64)
    q = rng.standard_normal((4, 1, 64)).astype(np.float32)
    tokens = np.array([1, 2, 3, 100, 101, 299])
    head_map = grouped_map(4, 2)
    out, _ = attend_tokens(q, k, v, tokens, head_map)
    want, _ = ref.attention(q, tm(k)[tokens], tm(v)[tokens], head_map, 64 ** -0.5)
    assert ref.rel_err(out, want) < TOL
