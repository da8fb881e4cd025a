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

Syscall level (``arm_syscall``, ``DEBUG SYSFAULT``): the k-th ``open`` for writing, ``write``,
``pwrite``, ``fsync``/``fdatasync``, ``ftruncate``, ``rename``/``replace`` or ``unlink`` on a
file under the data directory fails, whatever code makes it; see the section below.
"""

from __future__ import annotations

import builtins
import errno
import io
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


# -- syscall-level injection ---------------------------------------------------------------------
#
# Why a second layer: ``check(point)`` fails only where the storage code asks, so it cannot show
# what a failure the code did not foresee does (a segment's open at a rollover, a directory
# fsync, a snapshot's rename, an arena's ftruncate). ``arm_syscall`` wraps the ``os`` functions
# (and ``open`` for writing) in this process and makes the ``nth`` call of one operation on a
# file under ``root`` fail with the errno, once or (sticky) until disarmed. The wrappers exist
# only while armed or watched: ``disarm_syscall`` puts the originals back, so normal operation
# pays nothing. Every thread sees them (the log writer, the snapshot worker, the loop's arena
# writes); calls on other files (sockets, the terminal, files outside ``root``) pass untouched.

#: operation -> the ``os`` functions it counts (``write`` also counts the raw writes of files
#: opened for writing with ``open``, ``open`` counts ``os.open`` with a writing flag and ``open``
#: in a writing mode)
SYSCALL_OPS: dict[str, tuple[str, ...]] = {
    "open": ("open",),
    "write": ("write", "writev", "sendfile", "copy_file_range"),
    "pwrite": ("pwrite", "pwritev"),
    "fsync": ("fsync", "fdatasync"),
    "ftruncate": ("ftruncate", "truncate"),
    "rename": ("rename", "replace"),
    "unlink": ("unlink", "remove"),
}
_WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_originals: dict[str, object] = {}
_real_open = builtins.open


class _SysState:
    """What the wrappers share: the directory watched, counters per operation, the fault."""

    def __init__(self) -> None:
        self.root = ""
        self.counts: dict[str, int] = dict.fromkeys(SYSCALL_OPS, 0)
        #: op -> (the call number that fails, errno, sticky); empty: watching only
        self.faults: dict[str, tuple[int, int, bool]] = {}
        self.injected = 0
        #: (op, call number, path) of each counted call, the first TRACE_LIMIT of them
        self.trace: list[tuple[str, int, str]] = []


#: calls ``syscall_trace`` keeps (a test picks the k that open a new file from it)
TRACE_LIMIT = 100_000
_sys = _SysState()
_sys_lock = threading.Lock()


def arm_syscall(op: str, nth: int, err: str | int, sticky: bool = False, root: str = ".",
                also: bool = False) -> None:
    """From now, make the ``nth`` (1-based) ``op`` call on a file under ``root`` fail with
    ``err`` (and every later one if ``sticky``). Resets the counters (``syscall_counts``) and
    any other fault, unless ``also``: then this fault joins the armed ones (a second fault,
    such as the ``ftruncate`` that cuts a failed write back), counted from now."""
    if op not in SYSCALL_OPS:
        raise ValueError(f"unknown operation '{op}' (want {', '.join(SYSCALL_OPS)})")
    if nth < 1:
        raise ValueError("the call number counts from 1")
    code = ERRNOS.get(str(err).upper()) if not isinstance(err, int) else err
    if code is None:
        raise ValueError(f"unknown errno '{err}' (want {', '.join(ERRNOS)})")
    if also:
        with _sys_lock:
            if not _originals or _sys.root != os.path.realpath(root):
                raise ValueError("nothing is armed or watched on this directory to add a fault to")
            _sys.faults[op] = (_sys.counts[op] + nth, code, sticky)
        return
    watch_syscalls(root)
    with _sys_lock:
        _sys.faults = {op: (nth, code, sticky)}


def watch_syscalls(root: str = ".") -> None:
    """Count the file operations under ``root`` from now (zeroed counters), no fault armed."""
    with _sys_lock:
        _sys.root = os.path.realpath(root)
        _sys.counts = dict.fromkeys(SYSCALL_OPS, 0)
        _sys.faults = {}
        _sys.injected = 0
        _sys.trace = []
        _install()


def disarm_syscall() -> None:
    """Put the real ``os`` functions back; the counters keep their last values."""
    with _sys_lock:
        _sys.faults = {}
        _uninstall()


def syscall_counts() -> dict[str, int]:
    """Calls of each operation since the last arm/watch, and ``injected``: failures raised."""
    with _sys_lock:
        return {**_sys.counts, "injected": _sys.injected}


def syscall_trace() -> list[tuple[str, int, str]]:
    """(op, call number, path) of the calls counted since the last arm/watch."""
    with _sys_lock:
        return list(_sys.trace)


def syscall_faults() -> dict[str, tuple[int, int, bool]]:
    """op -> (the call number that fails, counted since the last arm/watch; errno; sticky)."""
    with _sys_lock:
        return dict(_sys.faults)


def _under(path: object) -> bool:
    try:
        text = os.fsdecode(path)  # type: ignore[arg-type]
    except TypeError:
        return False
    root = _sys.root
    full = os.path.realpath(text) if "\0" not in text else text
    return full == root or full.startswith(root + os.sep)


def _fd_path(fd: int) -> str | None:
    """The watched file ``fd`` is open on, or None (another file, a socket, a pipe)."""
    if fd < 0:
        return None
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    root = _sys.root
    return target if target == root or target.startswith(root + os.sep) else None


def _tick(op: str, where: object) -> None:
    """Count one ``op`` call on ``where`` (a path); raise the armed error if this is the one."""
    with _sys_lock:
        _sys.counts[op] += 1
        number = _sys.counts[op]
        if len(_sys.trace) < TRACE_LIMIT:
            _sys.trace.append((op, number, os.fsdecode(where) if isinstance(where, (str, bytes, os.PathLike)) else "?"))
        fault = _sys.faults.get(op)
        if fault is None or (number != fault[0] and not (fault[2] and number > fault[0])):
            return
        _sys.injected += 1
        code = fault[1]
    filename = os.fsdecode(where) if isinstance(where, (str, bytes, os.PathLike)) else None
    raise OSError(code, f"{os.strerror(code)} (injected: {op} call {number})", filename)


def _op_for(name: str) -> str:
    for op, names in SYSCALL_OPS.items():
        if name in names:
            return op
    raise KeyError(name)


def _watched(arg: object) -> object:
    """The watched path ``arg`` (a path or a file descriptor) names, or None."""
    if isinstance(arg, int):
        return _fd_path(arg)
    return arg if _under(arg) else None


def _wrapper(name: str, real):  # noqa: ANN001, ANN202 - wraps os functions of any signature
    """Count a call whose first argument (or, for rename/replace, second) is a watched file; a
    file descriptor is looked up in /proc (sendfile/copy_file_range write to their first)."""
    op = _op_for(name)
    two_paths = name in ("rename", "replace")

    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if args:
            where = _watched(args[0])
            if where is None and two_paths and len(args) > 1 and _under(args[1]):
                where = args[1]
            if where is not None:
                _tick(op, where)
        return real(*args, **kwargs)

    wrapper.__wrapped__ = real  # type: ignore[attr-defined]
    return wrapper


def _os_open_wrapper(real):  # noqa: ANN001, ANN202
    def wrapper(path, flags, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if flags & _WRITING_FLAGS and not flags & getattr(os, "O_DIRECTORY", 0) and _under(path):
            _tick("open", path)
        return real(path, flags, *args, **kwargs)

    return wrapper


class _CountedFileIO(io.FileIO):
    """A raw file whose writes count (the buffered writer above it calls ``write`` here)."""

    def write(self, data) -> int:  # noqa: ANN001
        _tick("write", self.name)
        return super().write(data)


def _open_wrapper(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,  # noqa: ANN001, ANN202
                  closefd=True, opener=None):
    writing = isinstance(mode, str) and any(c in mode for c in "wax+")
    if not writing or not isinstance(file, (str, bytes, os.PathLike)) or not _under(file):
        return _real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    _tick("open", file)
    raw = _CountedFileIO(file, mode.replace("b", "").replace("t", ""), closefd, opener=opener)
    text = "b" not in mode
    if buffering == 0:
        if text:
            raw.close()
            raise ValueError("can't have unbuffered text I/O")
        return raw
    size = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
    try:
        buffered = (io.BufferedRandom if "+" in mode else io.BufferedWriter)(raw, size)
        if not text:
            return buffered
        wrapped = io.TextIOWrapper(buffered, encoding, errors, newline, line_buffering=buffering == 1)
        wrapped.mode = mode  # type: ignore[misc]
        return wrapped
    except BaseException:
        raw.close()
        raise


def _install() -> None:
    if _originals:
        return
    for name in {n for names in SYSCALL_OPS.values() for n in names}:
        real = getattr(os, name, None)
        if real is None:
            continue
        _originals[name] = real
        setattr(os, name, _os_open_wrapper(real) if name == "open" else _wrapper(name, real))
    _originals["builtins.open"] = builtins.open
    builtins.open = _open_wrapper
    io.open = _open_wrapper  # type: ignore[assignment]


def _uninstall() -> None:
    for name, real in list(_originals.items()):
        if name == "builtins.open":
            builtins.open = real  # type: ignore[assignment]
            io.open = real  # type: ignore[assignment]
        else:
            setattr(os, name, real)
    _originals.clear()
