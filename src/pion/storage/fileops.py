"""Small file-system helpers for the log, the arenas and snapshots: directory fsync, sparse
ranges and hole punching (``fallocate(PUNCH_HOLE)`` through libc, which Python does not wrap)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from typing import Any


def round_up(value: int, unit: int) -> int:
    return (value + unit - 1) // unit * unit


def gaps(ranges: list[tuple[int, int]], end: int) -> Iterator[tuple[int, int]]:
    pos = 0
    for start, stop in ranges:
        if start > pos:
            yield pos, start
        pos = max(pos, stop)
    if pos < end:
        yield pos, end


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc: Any = None


def punch_hole(fd: int, offset: int, length: int) -> int:
    """Free the blocks of a file range (reads as zeros afterwards); 0 if unsupported."""
    global _libc
    start = round_up(offset, 4096)
    stop = (offset + length) // 4096 * 4096
    if stop <= start:
        return 0
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
    if _libc.fallocate(fd, mode, start, stop - start) != 0:
        return 0
    return stop - start


def fsync_dir(path: str) -> None:
    """Make a created, renamed or deleted directory entry durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def find_frame(view: memoryview, start: int, first: bytes, last: int | None = None) -> int | None:
    """The offset of the first intact ``[u32 length][u32 crc32c][payload]`` frame at or after
    ``start`` whose payload starts with a byte of ``first`` (and ends with ``last``, if given).

    Used to resynchronise after damage (the log's torn-or-corrupt test, check-wal, snapshot
    salvage). The candidates are found with numpy a MiB at a time and only those get their
    checksum computed: trying every offset in Python took 15-75 s for the tail of a 60 MB record.
    """
    import crc32c
    import numpy as np

    size = len(view)
    stop = size - 8  # a frame header must start before this
    if start >= stop:
        return None
    data = np.frombuffer(view, dtype=np.uint8)
    step = 1 << 20  # a few arrays of this many int64 at most
    for lo in range(start, stop, step):
        hi = min(lo + step, stop)
        heads = data[lo + 8 : hi + 8]
        hit = heads == first[0]
        for byte in first[1:]:
            hit |= heads == byte
        starts = np.flatnonzero(hit) + lo
        if not len(starts):
            continue
        lengths = (data[starts].astype(np.int64) | data[starts + 1].astype(np.int64) << 8
                   | data[starts + 2].astype(np.int64) << 16 | data[starts + 3].astype(np.int64) << 24)
        ends = starts + 8 + lengths
        fits = (lengths >= 1) & (ends <= size)
        starts, ends = starts[fits], ends[fits]
        if last is not None:
            starts = starts[data[ends - 1] == last]
        for pos in starts.tolist():
            length = int.from_bytes(view[pos : pos + 4], "little")
            if crc32c.crc32c(view[pos + 8 : pos + 8 + length]) == int.from_bytes(view[pos + 4 : pos + 8], "little"):
                return pos
    return None
