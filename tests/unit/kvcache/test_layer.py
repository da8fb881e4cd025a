"""A layer keeps encoded rows by token position as immutable chunks; checked against a dense model."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.kvcache.layer import Layer, LayerSpec

DIM = 4


def rows(start: int, count: int, tag: int) -> np.ndarray:
    return (np.arange(start, start + count, dtype=np.float32)[:, None] * 10 + tag + np.arange(DIM)).astype(np.float32)


def test_append_then_read_back_is_zero_copy_for_a_whole_chunk():
    layer = Layer(LayerSpec(DIM, "fp32"))
    blob = rows(0, 8, 0).tobytes()
    layer.store(0, 8, blob)
    assert layer.read(0, 8) is blob
    assert isinstance(layer.read(2, 5), memoryview)
    assert bytes(layer.read(2, 5)) == rows(2, 3, 0).tobytes()
    assert (layer.tokens, layer.rows, layer.nbytes) == (8, 8, len(blob))


def test_rows_never_stored_read_as_the_codecs_zeros():
    for fmt in ("fp32", "int8", "turbo2"):
        spec = LayerSpec(32, fmt)
        layer = Layer(spec)
        layer.store(4, 2, spec.codec().encode(np.ones((2, 32), np.float32)))
        out = spec.codec().decode(bytes(layer.read(0, 8)), (8, 32))
        assert not out[:4].any() and not out[6:].any(), fmt
        assert np.allclose(out[4:6], 1.0, atol=0.05), fmt


def test_overwrite_in_the_middle_splits_the_old_chunk_without_copying_it():
    layer = Layer(LayerSpec(DIM, "fp32"))
    old = rows(0, 10, 0).tobytes()
    layer.store(0, 10, old)
    layer.store(3, 2, rows(3, 2, 5).tobytes())
    assert [(c.start, c.count) for c in layer.chunks] == [(0, 3), (3, 2), (5, 5)]
    assert layer.chunks[0].base is old and layer.chunks[2].base is old
    got = np.frombuffer(bytes(layer.read(0, 10)), np.float32).reshape(10, DIM)
    expected = rows(0, 10, 0)
    expected[3:5] = rows(3, 2, 5)
    assert np.array_equal(got, expected)
    assert (layer.rows, layer.nbytes, layer.tokens) == (10, 10 * DIM * 4, 10)


def test_truncate_and_covers():
    layer = Layer(LayerSpec(DIM, "fp32"))
    layer.store(0, 4, rows(0, 4, 0).tobytes())
    layer.store(6, 4, rows(6, 4, 0).tobytes())
    assert layer.covers(4) and not layer.covers(5) and not layer.covers(10)
    layer.truncate(7)
    assert (layer.tokens, layer.rows) == (7, 5)
    layer.store(4, 2, rows(4, 2, 0).tobytes())
    assert layer.covers(7) and not layer.covers(8)
    layer.truncate(0)
    assert (layer.tokens, layer.rows, layer.nbytes, layer.chunks) == (0, 0, 0, [])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["store", "truncate"]), st.integers(0, 30), st.integers(1, 12)), max_size=25))
def test_layer_matches_a_dense_model(ops):
    layer = Layer(LayerSpec(DIM, "fp32"))
    model = np.zeros((64, DIM), np.float32)
    held = np.zeros(64, bool)
    for tag, (op, start, count) in enumerate(ops):
        if op == "store":
            data = rows(start, count, tag)
            layer.store(start, count, data.tobytes())
            model[start:start + count] = data
            held[start:start + count] = True
        else:
            layer.truncate(start)
            model[start:] = 0
            held[start:] = False
    tokens = int(np.flatnonzero(held)[-1]) + 1 if held.any() else 0
    assert layer.tokens == tokens
    assert layer.rows == int(held.sum())
    assert layer.nbytes == int(held.sum()) * DIM * 4
    if tokens:
        assert np.array_equal(np.frombuffer(bytes(layer.read(0, tokens)), np.float32).reshape(-1, DIM), model[:tokens])
        for n in range(1, tokens + 1):
            assert layer.covers(n) == bool(held[:n].all())
