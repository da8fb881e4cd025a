"""The snapshot file: the whole keyspace at one point of the log, written atomically.

Layout: a 32-byte header (``PIONSNAP``, u16 version, u16 0, u64 base segment = the last log
segment whose records the snapshot already contains, u64 unix ms, u32 crc32c of the previous 28
bytes), then records framed as in the log (``[u32 len][u32 crc32c][payload]``) whose payload
starts with a kind byte:

- ``K`` u16 db, u32 key length, key, i64 expiry ms (-1 = none), value (``serialize.dump_value``)
- ``X`` u16 db, u32 key length, key: a tombstone (the key was deleted while the snapshot was
  being written, after its first record); a later record for a key replaces an earlier one
- ``E`` u16 name length, name, data: an engine's own state (``SnapshotExtension``)
- ``Z`` u64 record count, u32 crc32c of every record byte before it: the end

The file is written to ``<name>.tmp``, fsynced, renamed over the old one and the directory
fsynced, so a crash leaves either the old or the new snapshot, never half of one.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from pion.storage import faults
from pion.storage.fileops import fsync_dir

MAGIC = b"PIONSNAP"
VERSION = 1
_HEADER = struct.Struct("<8sHHQQ")
HEADER_SIZE = _HEADER.size + 4
_FRAME = struct.Struct("<II")
_KEY = struct.Struct("<HI")
_EXPIRE = struct.Struct("<q")
_END = struct.Struct("<QI")
FILENAME = "snapshot.pion"


class SnapshotError(ValueError):
    """A snapshot that is truncated, corrupt or of a newer version; says where."""


class SnapshotEncoder:
    """Turns keys into record bytes and keeps the running checksum (pure, any thread)."""

    def __init__(self) -> None:
        self.crc = 0
        self.records = 0

    @staticmethod
    def header(base_segment: int, created_ms: int) -> bytes:
        head = _HEADER.pack(MAGIC, VERSION, 0, base_segment, created_ms)
        return head + struct.pack("<I", crc32c.crc32c(head))

    def _record(self, payload: bytes) -> bytes:
        data = _FRAME.pack(len(payload), crc32c.crc32c(payload)) + payload
        self.crc = crc32c.crc32c(data, self.crc)
        self.records += 1
        return data

    def key(self, db: int, key: bytes, expire_ms: int | None, value: bytes) -> bytes:
        expire = -1 if expire_ms is None else expire_ms
        return self._record(b"K" + _KEY.pack(db, len(key)) + key + _EXPIRE.pack(expire) + value)

    def tombstone(self, db: int, key: bytes) -> bytes:
        return self._record(b"X" + _KEY.pack(db, len(key)) + key)

    def extension(self, name: str, data: bytes) -> bytes:
        raw = name.encode()
        return self._record(b"E" + struct.pack("<H", len(raw)) + raw + data)

    def end(self) -> bytes:
        return _FRAME.pack(_END.size + 1, 0) + b"Z" + _END.pack(self.records, self.crc)


class SnapshotFile:
    """The temp file a snapshot is written into, then committed (rename) or discarded."""

    def __init__(self, directory: str, name: str = FILENAME) -> None:
        self.directory = directory
        self.path = os.path.join(directory, name)
        self.tmp_path = self.path + ".tmp"
        self.handle = open(self.tmp_path, "wb", buffering=1024 * 1024)
        self.handle.write(bytes(HEADER_SIZE))  # the header is written last: it names the log cut
        self.size = HEADER_SIZE

    def write(self, data: bytes) -> None:
        faults.check("snapshot.write")
        self.handle.write(data)
        self.size += len(data)

    def commit(self, header: bytes) -> None:
        """Write the header, fsync the temp file, rename it over the snapshot, fsync the directory."""
        faults.check("snapshot.write")
        self.handle.flush()
        os.pwrite(self.handle.fileno(), header, 0)
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.tmp_path, self.path)
        fsync_dir(self.directory)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp_path)


@dataclass(slots=True)
class SnapshotInfo:
    base_segment: int
    created_ms: int


@dataclass(slots=True)
class KeyRecord:
    db: int
    key: bytes
    expire_ms: int | None
    value: memoryview  # a dump_value payload (a slice of the mapped file)


@dataclass(slots=True)
class Tombstone:
    db: int
    key: bytes


@dataclass(slots=True)
class ExtensionRecord:
    name: str
    data: memoryview


class SnapshotReader:
    """Reads a snapshot through mmap; iterate for its records (checks every crc and the end)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < HEADER_SIZE:
                raise SnapshotError(f"snapshot {path} is truncated ({size} bytes)")
            self.map = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
        self.view = memoryview(self.map)
        head = self.view[: _HEADER.size]
        magic, version, _, base, created = _HEADER.unpack(head)
        (crc,) = struct.unpack_from("<I", self.view, _HEADER.size)
        if magic != MAGIC:
            raise SnapshotError(f"{path} is not a Pion snapshot")
        if crc32c.crc32c(head) != crc:
            raise SnapshotError(f"snapshot {path}: header checksum mismatch at offset 0")
        if version > VERSION:
            raise SnapshotError(f"snapshot {path} has version {version}, newer than {VERSION}")
        self.info = SnapshotInfo(base, created)

    def __iter__(self) -> Iterator[KeyRecord | Tombstone | ExtensionRecord]:
        view = self.view
        size = len(view)
        pos = HEADER_SIZE
        running = 0
        count = 0
        while True:
            if pos + 8 > size:
                raise SnapshotError(f"snapshot {self.path} is truncated at offset {pos}")
            length, crc = _FRAME.unpack_from(view, pos)
            end = pos + 8 + length
            if end > size or length == 0:
                raise SnapshotError(f"snapshot {self.path}: bad record length at offset {pos}")
            payload = view[pos + 8 : end]
            kind = payload[0]
            if kind == 0x5A:  # Z
                records, total = _END.unpack_from(payload, 1)
                if records != count or total != running:
                    raise SnapshotError(f"snapshot {self.path}: end record does not match at offset {pos}")
                return
            if crc32c.crc32c(payload) != crc:
                raise SnapshotError(f"snapshot {self.path}: checksum mismatch at offset {pos}")
            running = crc32c.crc32c(view[pos:end], running)
            count += 1
            yield _parse(payload, kind, self.path, pos)
            pos = end

    def close(self) -> None:
        self.view.release()
        with contextlib.suppress(BufferError):
            self.map.close()


def _parse(payload: memoryview, kind: int, path: str, pos: int) -> KeyRecord | Tombstone | ExtensionRecord:
    if kind in (0x4B, 0x58):  # K, X
        db, klen = _KEY.unpack_from(payload, 1)
        start = 1 + _KEY.size
        key = bytes(payload[start : start + klen])
        if kind == 0x58:
            return Tombstone(db, key)
        (expire,) = _EXPIRE.unpack_from(payload, start + klen)
        return KeyRecord(db, key, None if expire < 0 else expire, payload[start + klen + 8 :])
    if kind == 0x45:  # E
        (nlen,) = struct.unpack_from("<H", payload, 1)
        return ExtensionRecord(bytes(payload[3 : 3 + nlen]).decode(), payload[3 + nlen :])
    raise SnapshotError(f"snapshot {path}: unknown record kind {kind} at offset {pos}")
