"""Length-prefixed frames on the embedding worker's pipes (``u32`` little-endian size, payload).

A leaf both sides import: the worker (which loads the model runtimes) and the server's client
of it (which must not)."""

from __future__ import annotations

import struct
from typing import BinaryIO


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next payload, or None at end of stream (or a torn frame: the peer died mid-write)."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack("<I", head)
    data = stream.read(size)
    return data if len(data) == size else None


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(struct.pack("<I", len(payload)) + payload)
    stream.flush()
