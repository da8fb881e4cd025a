"""Round trips: every codec decodes what it encodes within its own error bound (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pion.codecs import get_codec

EPS16 = 2.0**-11  # fp16 relative rounding
TINY16 = 2.0**-24  # fp16 subnormal step


def blocks_of(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1, 32)


def per_element(bound_per_block: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.repeat(bound_per_block, 32, axis=-1).reshape(x.shape)


def absmax(x: np.ndarray) -> np.ndarray:
    return np.abs(blocks_of(x)).max(axis=-1)


def bound(name: str, x: np.ndarray) -> np.ndarray:
    """The largest |decoded - x| each element may have."""
    a = np.abs(x).astype(np.float64)
    if name == "fp32":
        return np.zeros_like(a)
    if name == "fp16":
        return np.maximum(a * EPS16, TINY16)
    if name == "bf16":
        return a * 2.0**-8 + 1e-38
    if name == "int8":
        span = (x.max(axis=1) - x.min(axis=1)).astype(np.float64)
        per_row = 0.5 * span / 254 * (1 + 1e-4) + 1e-6 * (np.abs(x).max(axis=1) + span) + 1e-8
        return np.broadcast_to(per_row[:, None], x.shape)
    if name in ("turbo4", "turbo3", "turbo2"):
        levels = {"turbo4": 7.0, "turbo3": 3.0, "turbo2": 1.5}[name]
        step = absmax(x).astype(np.float64) / levels
        return per_element(0.5 * step * (1 + 16 * EPS16) + 8 * TINY16, x)
    if name == "fp8":
        scale = absmax(x).astype(np.float64) / 240
        return a / 16 * 1.01 + per_element(scale * 2.0**-10 + 240 * scale * EPS16 * 1.01 + 240 * TINY16, x)
    if name == "mlx4g32":
        g = blocks_of(x).astype(np.float64)
        lo, span = g.min(axis=-1), g.max(axis=-1) - g.min(axis=-1)
        step = span / 15
        return per_element(0.5 * step * (1 + EPS16) + np.abs(lo) * EPS16 + 15 * step * EPS16 + 16 * TINY16 + 1e-7 * step, x)
    raise AssertionError(name)


def rows_strategy(max_value: float):
    shapes = st.tuples(st.integers(1, 6), st.sampled_from([32, 64, 96]))
    values = st.floats(-max_value, max_value, width=32, allow_nan=False, allow_subnormal=False)
    return shapes.flatmap(lambda shape: arrays(np.float32, shape, elements=values))


def check(name: str, x: np.ndarray) -> None:
    codec = get_codec(name)
    data = codec.encode(x)
    assert len(data) == x.shape[0] * codec.bytes_per_row(x.shape[1])
    y = codec.decode(data, x.shape)
    assert y.dtype == np.float32 and y.shape == x.shape
    err = np.abs(y.astype(np.float64) - x.astype(np.float64))
    limit = bound(name, x)
    worst = np.argmax(err - limit)
    assert (err <= limit).all(), f"{name}: err {err.flat[worst]} > bound {limit.flat[worst]} at {worst}"


def scaled(x: np.ndarray, exponent: int) -> np.ndarray:
    return (x * np.float32(10.0**exponent)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(rows_strategy(1000.0), st.integers(-4, 1))
def test_block_codecs_round_trip_within_their_bounds(x, exponent):
    x = scaled(x, exponent)
    for name in ("turbo4", "turbo3", "turbo2", "fp8", "mlx4g32", "int8"):
        check(name, x)


@settings(max_examples=60, deadline=None)
@given(rows_strategy(60000.0))
def test_float_codecs_round_trip_within_their_bounds(x):
    for name in ("fp32", "fp16", "bf16"):
        check(name, x)


@settings(max_examples=30, deadline=None)
@given(rows_strategy(100.0), st.sampled_from([32, 64]))
def test_rope_hybrid_keeps_the_rope_dims_in_bf16(x, rope):
    if x.shape[1] <= rope:
        x = np.tile(x, (1, (rope + 32) // x.shape[1] + 1))[:, : rope + 32]
    codec = get_codec("bf16_rope_fp8_body", rope=rope)
    y = codec.decode(codec.encode(x), x.shape)
    head = np.abs(y[:, :rope] - x[:, :rope])
    assert (head <= np.abs(x[:, :rope]) * 2.0**-8 + 1e-38).all()
    body = x[:, rope:]
    assert (np.abs(y[:, rope:] - body) <= bound("fp8", body)).all()


def test_constant_and_zero_rows_come_back_exactly_where_the_codec_can():
    zeros = np.zeros((2, 64), np.float32)
    for name in ("int8", "turbo4", "turbo3", "turbo2", "fp8", "mlx4g32", "fp16", "bf16", "fp32"):
        codec = get_codec(name)
        assert not codec.decode(codec.encode(zeros), zeros.shape).any(), name
    const = np.full((1, 64), 0.75, np.float32)  # fp16-exact constant: mlx4g32's guarded zero-scale path
    mlx = get_codec("mlx4g32")
    assert np.array_equal(mlx.decode(mlx.encode(const), const.shape), const)


def test_int8_keeps_each_row_its_own_scale():
    """The reference's per-batch scale makes a small row decoded with a large row's scale; ours does not."""
    x = np.stack([np.linspace(-0.01, 0.01, 64), np.linspace(-100, 100, 64)]).astype(np.float32)
    codec = get_codec("int8")
    y = codec.decode(codec.encode(x), x.shape)
    assert np.abs(y[0] - x[0]).max() <= 0.02 / 254


@pytest.mark.parametrize("name", ["int8", "turbo4", "turbo3", "turbo2", "fp8", "mlx4g32"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_codecs_with_shared_scales_refuse_nan_and_inf(name, bad):
    """Issue #13: one NaN or Inf made every value sharing its scale decode as NaN, silently."""
    from pion.codecs import CodecError, get_codec

    rows = np.ones((4, 64), np.float32)
    rows[2, 7] = bad
    with pytest.raises(CodecError, match="row 2"):
        get_codec(name).encode(rows)


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp32"])
def test_per_value_codecs_keep_a_nan_in_its_place(name):
    from pion.codecs import get_codec

    rows = np.ones((4, 64), np.float32)
    rows[2, 7] = np.nan
    codec = get_codec(name)
    back = codec.decode(codec.encode(rows), (4, 64))
    assert np.isnan(back).sum() == 1 and np.isnan(back[2, 7])
