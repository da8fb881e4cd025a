"""V.EXPORT's files: a prefix's K/V as a safetensors file a client on the same host maps.

Why: a client on the same machine does not need the rows to cross a socket. Sending 94 MB
through loopback TCP costs the server and the client tens of milliseconds of copying; mapping a
file that is already in the page cache costs page-table entries. So the server renders the rows
once, head-major and in the runtime's dtype, and hands back the file's absolute path; a client
that can open it maps it, one that cannot (another host, another user) fetches over RESP.

The files are a cache of the V-store, never a second copy of record: they are not logged,
not fsynced, they live in shared memory where the host has it (``ExportBase``). The base is
created by this server, with a name nobody can predict, mode 0700 (``mkdtemp``); its path is
recorded in the data directory (``export.path``), so the next server on that directory deletes
it at start even after a kill -9 (after checking it is still a directory of this user, not a
link); a clean shutdown removes it. A file is written
under a temporary name and renamed, and never changed after: a reader that mapped an older file
keeps valid bytes even after the server unlinks it. Any change to either session makes its
export stale; stale files are deleted at the next V.EXPORT, and the least recently used ones go
when the directory would pass its byte budget (``kv-export-maxbytes``).

Layout (the reference's): tensors ``k.<i>`` and ``v.<i>`` of shape ``[1, n_kv_heads, end-start,
head_dim]``, in layer order, K before V, contiguous; the header is padded with spaces so the
data starts on a 4 KiB boundary (every tensor is then aligned for a zero-copy view).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import shutil
import stat
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from pion.kvcache.layer import Layer

#: V.EXPORT's DTYPE names -> (safetensors dtype, numpy dtype, the stored codec shipped as is)
DTYPES = {
    b"F16": ("F16", np.dtype("<f2"), "fp16"),
    b"F32": ("F32", np.dtype("<f4"), "fp32"),
    b"BF16": ("BF16", np.dtype(ml_dtypes.bfloat16), "bf16"),
}
DATA_ALIGN = 4096
SUFFIX = ".safetensors"


@dataclass(frozen=True, slots=True)
class ExportKey:
    sid_k: bytes
    sid_v: bytes
    start: int
    end: int
    n_layers: int
    heads: int
    head_dim: int
    dtype: bytes


@dataclass(slots=True)
class ExportFile:
    path: str
    #: the two sessions' content stamps when the rows were read
    versions: tuple[int, int]
    nbytes: int
    last_used: int


def tensor_bytes(key: ExportKey) -> int:
    return key.heads * (key.end - key.start) * key.head_dim * DTYPES[key.dtype][1].itemsize


def build_header(key: ExportKey, metadata: dict[str, str]) -> tuple[bytes, list[int]]:
    """``(header bytes incl. the u64 length, absolute offset of each tensor in k.0, v.0, k.1 order)``."""
    size = tensor_bytes(key)
    shape = [1, key.heads, key.end - key.start, key.head_dim]
    entries: dict[str, object] = {"__metadata__": metadata}
    offsets = []
    for index, name in enumerate(f"{side}.{layer}" for layer in range(key.n_layers) for side in "kv"):
        entries[name] = {"dtype": DTYPES[key.dtype][0], "shape": shape, "data_offsets": [index * size, (index + 1) * size]}
        offsets.append(index * size)
    text = json.dumps(entries, separators=(",", ":")).encode()
    padded = -(-(8 + len(text)) // DATA_ALIGN) * DATA_ALIGN - 8
    header = struct.pack("<Q", padded) + text + b" " * (padded - len(text))
    return header, [len(header) + offset for offset in offsets]


def render_tensor(fd: int, offset: int, layer: Layer, data, key: ExportKey) -> None:
    """One layer's rows, decoded if needed, head-major, written at ``offset`` (a pool job).

    Rows stored in the asked dtype are copied as they are (bit-exact); other codecs are decoded
    to float32 by the same code ``V.FETCH`` uses, then cast (fp16/bf16 round to nearest even).
    """
    _, dtype, as_is = DTYPES[key.dtype]
    rows = key.end - key.start
    if layer.spec.fmt == as_is:
        values = np.frombuffer(data, dtype=dtype)
    else:
        decoded = layer.codec.decode(data, (rows, layer.spec.dim))
        values = decoded if decoded.dtype == dtype else decoded.astype(dtype)
    heads_major = np.ascontiguousarray(values.reshape(rows, key.heads, key.head_dim).transpose(1, 0, 2))
    write_all(fd, memoryview(heads_major.reshape(-1).view(np.uint8)), offset)


def write_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


@dataclass
class ExportCache:
    """One space's export files: where they are, which rows they hold, how many bytes."""

    directory: Path | None = None
    files: dict[ExportKey, ExportFile] = field(default_factory=dict)
    nbytes: int = 0
    _clock: itertools.count = field(default_factory=lambda: itertools.count(1))
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    def open_directory(self, base: Path, tenant: bytes) -> Path:
        """This space's export directory (mode 0700), inside this server's own ``base``.

        Checked at every export: when it was removed under the running server (a clean-up of
        ``/dev/shm``) or is no longer a private directory of ours, the files it held are
        forgotten (never unlinked through a path that may now lead elsewhere) and it is made
        again, so V.EXPORT keeps working instead of failing until a restart."""
        if self.directory is not None and (self.directory.parent != base or not _private_dir(self.directory)):
            self.forget()
        if self.directory is None:
            name = "default" if not tenant else "t-" + tenant.hex()[:64]
            directory = base / name
            directory.mkdir(mode=0o700)  # the base is new and ours alone: the name cannot exist
            self.directory = directory
        return self.directory

    def forget(self) -> None:
        """Drop every record (the directory went away with its files)."""
        self.files.clear()
        self.nbytes = 0
        self.directory = None

    def lookup(self, key: ExportKey, versions: tuple[int, int]) -> str | None:
        """The path of a fresh export of ``key``, if there is one on disk."""
        found = self.files.get(key)
        if found is None or found.versions != versions or not os.path.exists(found.path):
            return None
        found.last_used = next(self._clock)
        return found.path

    def sweep(self, stamp_of: Callable[[bytes], int | None]) -> None:
        """Delete the exports whose sessions changed or went (``stamp_of``: a session's content stamp)."""
        for key, found in list(self.files.items()):
            if (stamp_of(key.sid_k), stamp_of(key.sid_v)) != found.versions:
                self._remove(key)

    def make_room(self, incoming: int, budget: int) -> bool:
        """Drop least recently used exports until ``incoming`` more bytes fit; False if they never can."""
        if incoming > budget:
            return False
        for key in sorted(self.files, key=lambda k: self.files[k].last_used):
            if self.nbytes + incoming <= budget:
                break
            self._remove(key)
        return self.nbytes + incoming <= budget

    def temp_path(self) -> tuple[Path, Path]:
        """``(temporary name, final name)`` for a new file; names are never reused."""
        assert self.directory is not None
        stem = f"{next(self._names):08d}-{secrets.token_hex(6)}"
        return self.directory / f".{stem}.tmp", self.directory / f"{stem}{SUFFIX}"

    def add(self, key: ExportKey, path: str, versions: tuple[int, int], nbytes: int) -> str:
        """Keep a finished file; if a fresh export of ``key`` landed meanwhile, that one wins."""
        existing = self.lookup(key, versions)
        if existing is not None:
            _unlink(path)
            return existing
        if key in self.files:
            self._remove(key)
        self.files[key] = ExportFile(path, versions, nbytes, next(self._clock))
        self.nbytes += nbytes
        return path

    def close(self) -> None:
        """Delete every export and the directory (a clean shutdown: the files are memory)."""
        for key in list(self.files):
            self._remove(key)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def _remove(self, key: ExportKey) -> None:
        found = self.files.pop(key)
        self.nbytes -= found.nbytes
        _unlink(found.path)


RECORD = "export.path"
PREFIX = "pion-export-"


class ExportBase:
    """The directory every space's exports live under, for one server and data directory.

    Why this care: ``/dev/shm`` is world-writable. A predictable name there lets another local
    user plant a link or a directory of their own under it and have the server chmod or empty a
    directory of their choosing. So the base is made by ``mkdtemp`` (random name, created with
    ``O_EXCL`` semantics, mode 0700, owned by this user), never reused, and the path is kept in
    the data directory (which only this server writes) for the clean-up of the next start.
    """

    def __init__(self, data_dir: str) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.path: Path | None = None

    def ensure(self) -> Path:
        """The base, created (and recorded) at the first export, and made again (a new random
        name) when it was removed or is no longer ours."""
        if self.path is not None and owned_directory(self.path) is not None:
            self.path = None  # gone, or replaced: never reused, never deleted by us
        if self.path is None:
            parent = shm_dir() or self.data_dir
            self.path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getuid()}-", dir=parent))
            record = os.path.join(self.data_dir, RECORD)
            tmp = record + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(f"{self.path}\n")
            os.replace(tmp, record)
        return self.path

    def close(self) -> None:
        """A clean shutdown: remove the base and its record."""
        if self.path is not None:
            remove_owned(self.path)
            self.path = None
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.data_dir, RECORD))


def shm_dir() -> str | None:
    """``/dev/shm`` when the host has it writable (tmpfs pages are not reclaimed nor written back:
    a hit that maps a disk-backed export idle for a few seconds paid ~20 ms of refaults here)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def owned_directory(path: Path) -> str | None:
    """Why ``path`` is not a directory this server may delete (None when it is): it must be a real
    directory (not a link), of this user, mode 0700, named ``pion-export-<uid>-...``."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "it is gone"
    except OSError as exc:
        return f"it cannot be inspected ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid != os.getuid():
        return f"it belongs to uid {info.st_uid}, not to this server's uid {os.getuid()}"
    if stat.S_IMODE(info.st_mode) != 0o700:
        return f"its mode is {stat.S_IMODE(info.st_mode):o}, not 700"
    if not path.name.startswith(f"{PREFIX}{os.getuid()}-"):
        return "its name is not one this server makes"
    return None


def _private_dir(path: Path) -> bool:
    """A real directory (not a link) of this user, mode 0700."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700


def remove_owned(path: Path) -> str | None:
    """Delete an export base if it is ours (``owned_directory``); the reason when it is not."""
    why = owned_directory(path)
    if why is None:
        shutil.rmtree(path, ignore_errors=True)  # fd-based on Linux: links inside are not followed
    return why


def clean_stale(data_dir: str) -> str | None:
    """At start: delete the export base a previous server on ``data_dir`` recorded (a crash leaves
    it in shared memory). Returns a line for the log, or None when there was nothing to do."""
    record = os.path.join(os.path.abspath(data_dir), RECORD)
    try:
        with open(record, encoding="utf-8") as handle:
            recorded = handle.read().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read {record}: {exc.strerror}"
    with contextlib.suppress(OSError):
        os.unlink(record)
    if not recorded:
        return None
    path = Path(recorded)
    why = remove_owned(path)
    if why is None:
        return f"removed the exports a previous server left in {path}"
    return None if why == "it is gone" else f"left {path} alone: {why}"


def _unlink(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
