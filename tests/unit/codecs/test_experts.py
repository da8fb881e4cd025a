"""The expert byte layouts: FETCH blobs, MHST files and mlx-layout affine quantization."""

from __future__ import annotations

import numpy as np
import pytest

from pion.codecs.experts import (
    LayoutError,
    decode_fetch,
    decode_mhst,
    dequantize_affine,
    encode_mhst,
    fetch_pieces,
    fetch_size,
    quantize_affine,
)


def test_fetch_blob_layout_is_count_then_proj_comp_len_bytes():
    blob = b"".join(bytes(p) for p in fetch_pieces([(0, 0, b"ab"), (2, 1, memoryview(b"xyz"))]))
    assert blob == b"\x02" + b"\x00\x00\x02\x00\x00\x00ab" + b"\x02\x01\x03\x00\x00\x00xyz"
    assert fetch_size([2, 3]) == len(blob)
    assert [(p, c, bytes(v)) for p, c, v in decode_fetch(blob)] == [(0, 0, b"ab"), (2, 1, b"xyz")]


@pytest.mark.parametrize("blob", [b"", b"\x01\x00\x00", b"\x01\x00\x00\x09\x00\x00\x00ab", b"\x01\x05\x00\x00\x00\x00\x00",
                                  b"\x00extra"])
def test_a_malformed_fetch_blob_is_refused(blob):
    with pytest.raises(LayoutError):
        decode_fetch(blob)


def test_mhst_round_trips_and_has_the_reference_header():
    entries = [(0, 3, 17), (5, 255, 2**40)]
    data = encode_mhst(entries)
    assert data[:12] == b"MHST" + (1).to_bytes(4, "little") + (2).to_bytes(4, "little")
    assert len(data) == 12 + 2 * 10
    assert decode_mhst(data) == entries


def test_mhst_uses_version_2_for_indices_over_255():
    data = encode_mhst([(300, 1, 5)])
    assert data[4:8] == (2).to_bytes(4, "little")
    assert decode_mhst(data) == [(300, 1, 5)]


@pytest.mark.parametrize("data", [b"MHS", b"XXXX\x01\x00\x00\x00\x00\x00\x00\x00", b"MHST\x01\x00\x00\x00\x02\x00\x00\x00"])
def test_a_bad_mhst_file_is_refused(data):
    with pytest.raises(LayoutError):
        decode_mhst(data)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_affine_quantization_round_trips_within_half_a_step(bits):
    w = np.random.default_rng(bits).standard_normal((6, 64)).astype(np.float32)
    codes, scales, biases = quantize_affine(w, bits, 32)
    assert codes.dtype == np.dtype("<u4") and codes.shape == (6, 64 * bits // 32)
    back = dequantize_affine(codes, scales, biases, bits, 32)
    step = np.repeat(scales, 32, axis=1)
    assert np.all(np.abs(back - w) <= step / 2 + 1e-6)


def test_affine_layout_matches_mlx():
    mx = pytest.importorskip("mlx.core")
    w = np.random.default_rng(0).standard_normal((4, 128)).astype(np.float32)
    for bits in (3, 4, 8):
        q, s, b = mx.quantize(mx.array(w), group_size=64, bits=bits)
        ours = dequantize_affine(np.array(q), np.array(s), np.array(b), bits, 64)
        theirs = np.array(mx.dequantize(q, s, b, group_size=64, bits=bits))
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_affine_refuses_shapes_that_do_not_pack():
    with pytest.raises(LayoutError):
        quantize_affine(np.zeros((2, 40), np.float32), 4, 32)
    with pytest.raises(LayoutError):
        dequantize_affine(np.zeros((2, 4), np.uint32), np.zeros((2, 3)), np.zeros((2, 3)), 4, 32)
