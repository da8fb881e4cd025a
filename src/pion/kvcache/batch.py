"""Encoding a stored batch of rows, cut into jobs that worker threads run in parallel, and
rendering stored rows in a fetch format.

Rows are independent in every codec (each row carries its own scales), so a batch can be cut
into row ranges, each encoded on its own thread straight into its place in one output buffer;
numpy releases the GIL while it works. The jobs read only the request's blob and write only
their own range of the output, which nobody else sees until the last job is done.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from pion.codecs import Codec, CodecError
from pion.kvcache.layer import Layer
from pion.protocol.errors import ReplyError

#: the element type each input format arrives as (BF16 as its raw 16 bits)
INPUT_DTYPE = {b"F32": "<f4", b"F16": "<f2", b"BF16": "<u2"}
#: (fetch format, stored codec) pairs that ship the stored bytes as they are
SENT_AS_STORED = frozenset({(b"NATIVE", "fp16"), (b"F16", "fp16"), (b"F32", "fp32"), (b"NATIVE", "fp32")})
#: a job gets at least this many values (below it the thread hop costs more than it saves)
MIN_JOB_VALUES = 128 * 1024


def input_rows(blob, fmt: bytes, count: int, dim: int) -> np.ndarray:
    """The request's rows as an array of their wire type, ``(count, dim)``, without a copy."""
    return np.frombuffer(blob, dtype=INPUT_DTYPE[fmt]).reshape(count, dim)


def as_floats(rows: np.ndarray) -> np.ndarray:
    """Rows of float32/float16, or bf16 bits widened to float32 (exact)."""
    if rows.dtype.kind == "u":
        return (rows.astype(np.uint32) << 16).view(np.float32)
    return rows


def job_count(rows: np.ndarray, workers: int) -> int:
    """How many jobs to cut ``rows`` into: one per worker, none smaller than MIN_JOB_VALUES."""
    return max(1, min(workers, rows.size // MIN_JOB_VALUES, rows.shape[0]))


def encode_jobs(
    codec: Codec, rows: np.ndarray, parts: int, write: Callable[[np.ndarray, int], object] | None = None,
) -> tuple[np.ndarray, list[Callable[[], None]]]:
    """``(out, jobs)``: running every job fills ``out`` (uint8) with the encoded rows; each job
    also hands its range to ``write(range, byte offset)`` (a log arena) when given."""
    count, dim = rows.shape
    width = codec.bytes_per_row(dim)
    out = np.empty(count * width, dtype=np.uint8)
    step = -(-count // parts)
    jobs = [partial(_encode_range, codec, rows, out, width, first, min(first + step, count), write)
            for first in range(0, count, step)]
    return out, jobs


def encode_now(codec: Codec, rows: np.ndarray) -> bytes:
    """The rows encoded on this thread (small batches, and commands that cannot wait)."""
    return _encode(codec, as_floats(rows))


def _encode(codec: Codec, rows: np.ndarray) -> bytes:
    """A codec's refusal (NaN/Inf for a codec with shared scales) answers the store, unchanged."""
    try:
        return codec.encode(rows)
    except CodecError as exc:
        raise ReplyError(f"ERR V.STOREBATCH: {exc}") from None


def _encode_range(
    codec: Codec, rows: np.ndarray, out: np.ndarray, width: int, first: int, end: int,
    write: Callable[[np.ndarray, int], object] | None,
) -> None:
    encoded = _encode(codec, as_floats(rows[first:end]))
    out[first * width:end * width] = np.frombuffer(encoded, dtype=np.uint8)
    if write is not None:
        write(out[first * width:end * width], first * width)


def render(layer: Layer, data, rows: int, fmt: bytes):
    """Encoded rows in the fetch format asked for: the stored bytes (or a view of them) as they
    are, or the decoded array's own buffer (the encoder writes views without copying them)."""
    if sent_as_stored(layer, fmt):
        return data
    values = layer.codec.decode(data, (rows, layer.spec.dim))
    return as_bulk(values.astype("<f2") if fmt == b"F16" else values)


def sent_as_stored(layer: Layer, fmt: bytes) -> bool:
    """Does this fetch format ship the stored bytes (no decoding)?"""
    return fmt == b"RAW" or (fmt, layer.spec.fmt) in SENT_AS_STORED


def as_bulk(values: np.ndarray) -> memoryview:
    """An array's bytes as a flat byte view (no copy when it is contiguous)."""
    return memoryview(np.ascontiguousarray(values)).cast("B")
