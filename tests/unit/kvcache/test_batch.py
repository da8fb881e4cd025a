"""A batch encoded in parallel jobs is byte-for-byte the batch encoded at once."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pion.codecs import get_codec
from pion.kvcache.batch import MIN_JOB_VALUES, encode_jobs, encode_now, input_rows, job_count

CODECS = ["fp32", "fp16", "bf16", "int8", "fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]


def wire(rows: np.ndarray, fmt: bytes) -> bytes:
    if fmt == b"F16":
        return rows.astype("<f2").tobytes()
    if fmt == b"BF16":
        return rows.astype(ml_dtypes.bfloat16).tobytes()
    return rows.astype("<f4").tobytes()


@pytest.mark.parametrize("codec_name", CODECS)
@pytest.mark.parametrize("fmt", [b"F32", b"F16", b"BF16"])
def test_jobs_fill_the_same_bytes_as_one_encode(codec_name, fmt):
    codec = get_codec(codec_name)
    rows = np.random.default_rng(3).standard_normal((301, 64)).astype(np.float32)
    blob = wire(rows, fmt)
    parsed = input_rows(blob, fmt, 301, 64)
    expected = encode_now(codec, parsed)
    for parts in (1, 2, 3, 7):
        out, jobs = encode_jobs(codec, parsed, parts)
        assert len(jobs) == parts
        for job in reversed(jobs):  # any order: each job owns its rows
            job()
        assert out.tobytes() == expected
    assert expected == codec.encode(np.frombuffer(blob, dtype={b"F32": "<f4", b"F16": "<f2"}.get(fmt, ml_dtypes.bfloat16))
                                    .astype(np.float32).reshape(301, 64))


def test_jobs_are_never_smaller_than_the_minimum():
    rows = np.zeros((4096, 128), dtype=np.float32)
    assert job_count(rows, 8) == 4096 * 128 // MIN_JOB_VALUES
    assert job_count(rows[:10], 8) == 1
    assert job_count(np.zeros((2, 1 << 20), dtype=np.float32), 8) == 2  # never more jobs than rows
