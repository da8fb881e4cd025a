"""Disk faults: the error a failed blob-arena write raises, and a fault-injection layer.

Why a typed error: a large value goes to an arena file while a command runs; when that write
fails (a full disk, an I/O error) the command must answer ``-MISCONF`` and change nothing, like
a failed log write, instead of letting an ``OSError`` escape and drop the connection.
``DiskWriteError`` is that ``OSError``: the dispatcher's error boundary turns it into -MISCONF
and sets the write status (INFO ``aof_last_write_status:err``).

Why injection: a full tmpfs gives real ENOSPC, but not EIO, not a failed fsync, and not at an
exact point. The storage code calls ``check(point)`` just before each of its writes and syncs;
tests arm a point with an errno (``arm("arena.write", "ENOSPC", count=2)``), a running server
through ``DEBUG FAULT <point> <ERRNO|OFF> [count]`` (only with ``enable-debug-command``), a child
process through ``PION_FAULTS="arena.write=ENOSPC:2,wal.sync=EIO"``. Nothing is armed in normal
operation and ``check`` is then one dict lookup.

Points: ``arena.write`` (a blob's pwrite), ``arena.sync`` (an arena's fsync), ``wal.write`` (a
batch's pwrite), ``wal.sync`` (its fdatasync), ``snapshot.write`` (a snapshot file's writes and
fsync).
"""

from __future__ import annotations

import errno
import os
import threading

POINTS = ("arena.write", "arena.sync", "wal.write", "wal.sync", "snapshot.write")
ERRNOS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO, "EDQUOT": errno.EDQUOT, "EROFS": errno.EROFS,
          "EFBIG": errno.EFBIG}


class DiskWriteError(OSError):
    """A write of blob bytes to an arena file failed (ENOSPC, EIO, ...): the command answers
    -MISCONF and changes nothing."""


#: point -> [errno, failures left (-1: until disarmed)]
_armed: dict[str, list[int]] = {}
_lock = threading.Lock()


def arm(point: str, err: str | int, count: int = -1) -> None:
    """Make the next ``count`` (-1: every) operation at ``point`` fail with ``err``."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point '{point}' (want {', '.join(POINTS)})")
    code = ERRNOS.get(str(err).upper()) if not isinstance(err, int) else err
    if code is None:
        raise ValueError(f"unknown errno '{err}' (want {', '.join(ERRNOS)})")
    with _lock:
        _armed[point] = [code, count]


def disarm(point: str | None = None) -> None:
    with _lock:
        if point is None:
            _armed.clear()
        else:
            _armed.pop(point, None)


def armed() -> dict[str, tuple[int, int]]:
    with _lock:
        return {point: (entry[0], entry[1]) for point, entry in _armed.items()}


def check(point: str) -> None:
    """Raise the armed error for ``point`` (called before each storage write or sync)."""
    if not _armed:
        return
    with _lock:
        entry = _armed.get(point)
        if entry is None:
            return
        code = entry[0]
        if entry[1] > 0:
            entry[1] -= 1
            if entry[1] == 0:
                del _armed[point]
    raise OSError(code, f"{os.strerror(code)} (injected at {point})")


def load_env(text: str | None = None) -> None:
    """Arm the points named in ``PION_FAULTS`` (``point=ERRNO[:count],...``)."""
    text = os.environ.get("PION_FAULTS", "") if text is None else text
    for item in filter(None, (part.strip() for part in text.split(","))):
        point, _, spec = item.partition("=")
        name, _, count = spec.partition(":")
        arm(point, name, int(count) if count else -1)


load_env()
