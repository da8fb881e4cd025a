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
