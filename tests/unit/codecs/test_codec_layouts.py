"""The codecs' bytes are the reference's layouts (spec section 3): sizes, hand-worked blocks, and
bit-for-bit agreement with scalar transcriptions of the spec on random rows."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pion.codecs import CODEC_NAMES, CodecError, block_hashes, codec_by_tag, get_codec
from tests.unit.codecs import reference_impl as ref

D = 1024
SPEC_SIZES = {  # bytes per row at D, from the spec's table (int8: ours, per-row scale and min)
    "int8": D + 8, "fp16": 2 * D, "turbo4": 4 + 18 * D // 32, "turbo3": 4 + 14 * D // 32,
    "turbo2": 4 + 10 * D // 32, "fp8": 4 + 34 * D // 32, "mlx4g32": D // 2 + 4 * D // 32,
    "fp32": 4 * D, "bf16": 2 * D,
}


@pytest.mark.parametrize("name", sorted(SPEC_SIZES))
def test_bytes_per_row_follows_the_spec_table(name):
    assert get_codec(name).bytes_per_row(D) == SPEC_SIZES[name]


def test_mlx4g32_is_640_bytes_a_row_at_1024_dims_as_the_reference_asserts():
    assert get_codec("mlx4g32").bytes_per_row(1024) == 640


def test_rope_hybrid_size_is_bf16_head_plus_fp8_blocks_without_header():
    assert get_codec("bf16_rope_fp8_body", rope=64).bytes_per_row(576) == 2 * 64 + 34 * 512 // 32


def test_format_tags_are_the_reference_values():
    tags = {name: get_codec(name, rope=64).tag for name in CODEC_NAMES}
    assert tags == {"int8": 0, "turbo4": 1, "fp16": 2, "turbo3": 3, "turbo2": 4, "fp8": 5,
                    "bf16_rope_fp8_body": 6, "mlx4g32": 7, "fp32": 8, "bf16": 9}
    assert codec_by_tag(7).name == "mlx4g32"


@pytest.mark.parametrize("name", ["turbo4", "turbo3", "turbo2", "fp8", "mlx4g32"])
def test_block_codecs_refuse_a_dim_not_divisible_by_32(name):
    codec = get_codec(name)
    with pytest.raises(CodecError, match="divisible by 32, got 100"):
        codec.bytes_per_row(100)
    with pytest.raises(CodecError):
        codec.encode(np.zeros((2, 100), np.float32))


@pytest.mark.parametrize("name", ["int8", "fp16", "bf16", "fp32"])
def test_element_codecs_take_any_dim(name):
    x = np.linspace(-1, 1, 3 * 7, dtype=np.float32).reshape(3, 7)
    codec = get_codec(name)
    assert codec.decode(codec.encode(x), x.shape).shape == (3, 7)


def test_rope_hybrid_refuses_bad_rope():
    with pytest.raises(CodecError, match="0 < rope < dim"):
        get_codec("bf16_rope_fp8_body", rope=10).bytes_per_row(64)
    with pytest.raises(CodecError, match="needs rope"):
        get_codec("bf16_rope_fp8_body")


def test_unknown_codec_is_refused():
    with pytest.raises(CodecError, match="unknown codec 'int7'"):
        get_codec("int7")


def test_decode_refuses_a_wrong_byte_count():
    with pytest.raises(CodecError, match="expected 256"):
        get_codec("fp16").decode(b"\0" * 255, (2, 64))


def test_turbo4_worked_block():
    row = np.array([7.0] * 16 + [-7.0] * 16, dtype=np.float32)
    # absmax 7 -> scale 1.0 (f16 0x3C00); q = 7 -> nibble 15, q = -7 -> nibble 1; byte = 1<<4 | 15
    expected = struct.pack("<f", 32 * 49.0) + b"\x00\x3c" + b"\x1f" * 16
    assert get_codec("turbo4").encode(row) == expected


def test_mlx4g32_worked_group():
    row = (np.arange(32) % 16).astype(np.float32)
    words = struct.pack("<4I", 0x76543210, 0xFEDCBA98, 0x76543210, 0xFEDCBA98)
    assert get_codec("mlx4g32").encode(row) == words + b"\x00\x3c" + b"\x00\x00"


def test_turbo2_worked_block():
    row = np.array([1.5, -1.5, 0.5, -0.5] * 8, dtype=np.float32)
    # s = 1.5/1.5 = 1, stored 0.5; q = round(v+1.5) -> 3, 0, 2, 1; 16 values per LE u32, 2 bits each
    word = sum(q << (2 * k) for k, q in enumerate([3, 0, 2, 1] * 4))
    decoded_sq = 32 / 4 * (1.5**2 * 2 + 0.5**2 * 2)
    expected = struct.pack("<f", decoded_sq) + np.float16(0.5).tobytes() + struct.pack("<2I", word, word)
    assert get_codec("turbo2").encode(row) == expected


def test_rounding_is_half_away_from_zero_even_at_float32_ties():
    row = np.zeros(32, np.float32)
    row[0] = 7.0
    row[1] = np.float32(0.5) - np.float32(2**-25)  # 0.49999997: below the tie, rounds to 0
    row[2] = 0.5  # a tie: away from zero, 1
    row[3] = -0.5
    q = get_codec("turbo4").decode(get_codec("turbo4").encode(row), (32,))
    assert list(q[:4]) == [7.0, 0.0, 1.0, -1.0]


REFERENCE = {"turbo4": ref.turbo4, "turbo3": ref.turbo3, "turbo2": ref.turbo2, "fp8": ref.fp8,
             "mlx4g32": ref.mlx4g32, "int8": ref.int8}
HEADER = {"turbo4": 4, "turbo3": 4, "turbo2": 4, "fp8": 4}


def _rows(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((6, 64)) * rng.choice([1e-3, 1.0, 30.0], size=(6, 1))).astype(np.float32)
    rows[0, :32] = 0.0  # an all-zero block
    rows[1, 32:] = 0.25  # a constant block
    rows[2, :8] = [0.5, -0.5, 1.5, -1.5, 2.5, 0.49999997, -0.49999997, 3.5]
    return rows


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_vectorised_bytes_equal_the_scalar_transcription_of_the_spec(name, seed):
    rows = _rows(seed)
    codec = get_codec(name)
    ours = codec.encode(rows)
    width = codec.bytes_per_row(rows.shape[1])
    head = HEADER.get(name, 0)
    for i, row in enumerate(rows):
        mine, theirs = ours[i * width:(i + 1) * width], REFERENCE[name](row)
        assert mine[head:] == theirs[head:], f"row {i}"
        if head:  # norm_sq: the same sum, possibly in another order
            assert struct.unpack("<f", mine[:4])[0] == pytest.approx(struct.unpack("<f", theirs[:4])[0], rel=1e-5, abs=1e-30)


def test_fp8_fast_cast_equals_ml_dtypes_on_every_representable_midpoint():
    import ml_dtypes

    from pion.codecs.fp8 import to_e4m3

    grid = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    grid = np.sort(grid[np.isfinite(grid) & (np.abs(grid) <= 240)])
    mids = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)
    probe = np.concatenate([grid, mids, np.nextafter(mids, 0), np.nextafter(mids, 1000), [0.0, -0.0, 1e-30]]).astype(np.float32)
    assert np.array_equal(to_e4m3(probe), probe.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))


def test_zero_rows_decode_to_zeros_for_every_codec():
    for name in CODEC_NAMES:
        codec = get_codec(name, rope=32)
        zeros = codec.zero_rows(3, 64)
        assert len(zeros) == 3 * codec.bytes_per_row(64)
        assert not codec.decode(zeros, (3, 64)).any()


def test_chain_hashes_follow_the_wire_contract():
    import hashlib

    tokens = list(range(10))
    first = hashlib.sha256(bytes(16) + np.arange(4, dtype="<u4").tobytes()).digest()[:16]
    second = hashlib.sha256(first + np.arange(4, 8, dtype="<u4").tobytes()).digest()[:16]
    assert block_hashes(tokens, 4) == [first, second]  # the partial third block is not hashed
    assert block_hashes(np.arange(10, dtype="<u4").tobytes(), 4) == [first, second]
    assert block_hashes([1, 2, 3], 4) == []
