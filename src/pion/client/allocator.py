"""Keep freed memory in the process, so a hit does not page-fault its K/V buffers afresh.

Why: on a hit, the runtime concatenates the cached prefix with the new tokens into fresh
tensors (transformers' ``DynamicLayer.update`` allocates ``prefix + suffix`` for every layer).
glibc returns freed heap memory to the kernel eagerly (its trim threshold follows the largest
freed block, a few MB), so in a process that serves hits, each hit's buffers are new pages the
kernel must zero-fill: for the demo model's 94 MB that is ~24,000 page faults, 20-30 ms on the
2-core machine, about a quarter of a warm time-to-first-token (docs/client.md).

``keep_freed_memory()`` sets what glibc's own adaptive rule converges to in a long-running
process: blocks up to 32 MB come from the heap, and up to ``trim_bytes`` of freed heap stay
mapped for the next request. It changes nothing where the C library is not glibc, and nothing
when the process was started with glibc's own ``MALLOC_TRIM_THRESHOLD_`` or
``MALLOC_MMAP_THRESHOLD_`` (the operator's choice wins).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: glibc's own ceiling for the adaptive mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
MMAP_THRESHOLD = 32 * 1024 * 1024
DEFAULT_TRIM_BYTES = 512 * 1024 * 1024
_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")

_applied: int | None = None


def keep_freed_memory(trim_bytes: int = DEFAULT_TRIM_BYTES) -> bool:
    """Ask glibc to keep up to ``trim_bytes`` of freed heap; True if the setting is in force."""
    global _applied
    if _applied is not None:
        return _applied >= trim_bytes
    if any(name in os.environ for name in _ENV):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    trim = min(trim_bytes, 2**31 - 1)
    if not (libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, trim)):
        return False
    _applied = trim
    return True


#: pieces prefaulted one by one: below the mmap threshold, so they come from (and go back to) the heap
PREFAULT_CHUNK = 1024 * 1024


def prefault(nbytes: int) -> int:
    """Touch ``nbytes`` of heap memory and free it again; the bytes touched (0 when it cannot help).

    Why: with ``keep_freed_memory`` in force a process reuses the pages its last hit freed, but
    its *first* hit still zero-fills fresh ones (~24,000 page faults for the demo model's 94 MB,
    the bulk of a fresh worker's first-hit penalty). Touching the memory once at start, and
    freeing it into the heap that glibc now keeps, moves that cost out of the first request.
    """
    if _applied is None or nbytes <= 0:
        return 0
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    nbytes = min(nbytes, _applied)
    blocks = []
    try:
        for _ in range(-(-nbytes // PREFAULT_CHUNK)):
            block = libc.malloc(PREFAULT_CHUNK)
            if not block:
                break
            ctypes.memset(block, 0, PREFAULT_CHUNK)
            blocks.append(block)
    finally:
        for block in reversed(blocks):
            libc.free(block)
    return len(blocks) * PREFAULT_CHUNK
