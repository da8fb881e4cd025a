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
from pion.storage.fileops import find_frame, fsync_dir

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
    """Reads a snapshot through mmap; iterate for its records (checks every crc and the end).

    With ``salvage`` a damaged record does not stop the reading: it is noted in ``problems``
    (with the key it seems to hold, in ``lost``), the reader resynchronises on the next intact
    record and goes on, so every intact record is returned (``pion check-wal --fix``)."""

    def __init__(self, path: str, salvage: bool = False) -> None:
        self.path = path
        self.salvage = salvage
        self.problems: list[str] = []
        self.lost: list[str] = []
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < HEADER_SIZE:
                raise SnapshotError(f"snapshot {path} is truncated ({size} bytes)")
            self.map = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
        self.view = memoryview(self.map)
        head = self.view[: _HEADER.size]
        magic, version, _, base, created = _HEADER.unpack(head)
        (crc,) = struct.unpack_from("<I", self.view, _HEADER.size)
        if magic != MAGIC and not salvage:
            raise SnapshotError(f"{path} is not a Pion snapshot")
        if crc32c.crc32c(head) != crc:
            if not salvage:
                raise SnapshotError(f"snapshot {path}: header checksum mismatch at offset 0")
            self.problems.append("offset 0: header checksum mismatch (its log cut is not trusted)")
            base = -1
        if version > VERSION and not salvage:
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
                self._damaged(pos, f"truncated at offset {pos}", None)  # no frame can follow
                return
            length, crc = _FRAME.unpack_from(view, pos)
            end = pos + 8 + length
            if end > size or length == 0:
                pos = self._damaged(pos, f"bad record length at offset {pos}", None)  # type: ignore[assignment]
                if pos is None:
                    return
                continue
            payload = view[pos + 8 : end]
            kind = payload[0]
            if kind == 0x5A:  # Z
                records, total = _END.unpack_from(payload, 1) if length >= _END.size + 1 else (-1, -1)
                if records != count or total != running:
                    if not self.salvage:
                        raise SnapshotError(f"snapshot {self.path}: end record does not match at offset {pos}")
                    self.problems.append(f"offset {pos}: the end record counts records that were dropped")
                return
            if crc32c.crc32c(payload) != crc:
                pos = self._damaged(pos, f"checksum mismatch at offset {pos}", payload)  # type: ignore[assignment]
                if pos is None:
                    return
                continue
            try:
                record = _parse(payload, kind, self.path, pos)
            except (SnapshotError, struct.error, UnicodeDecodeError) as exc:
                pos = self._damaged(pos, str(exc), None)  # type: ignore[assignment]
                if pos is None:
                    return
                continue
            running = crc32c.crc32c(view[pos:end], running)
            count += 1
            yield record
            pos = end

    def _damaged(self, pos: int, reason: str, payload: memoryview | None) -> int | None:
        """A bad spot: raise (normal reading), or note it and return where reading resumes."""
        if not self.salvage:
            raise SnapshotError(f"snapshot {self.path}: {reason}")
        self.problems.append(reason)
        guess = _key_of(payload) if payload is not None else None
        if guess is not None:
            self.lost.append(guess)
        return find_frame(self.view, pos + 1, b"KXE")

    def close(self) -> None:
        self.view.release()
        with contextlib.suppress(BufferError):
            self.map.close()


def _key_of(payload: memoryview) -> str | None:
    """The db and key a damaged K/X record seems to hold (its checksum failed: a guess)."""
    if len(payload) < 1 + _KEY.size or payload[0] not in (0x4B, 0x58):
        return None
    db, klen = _KEY.unpack_from(payload, 1)
    start = 1 + _KEY.size
    if klen > len(payload) - start:
        return None
    return f"db {db} key {bytes(payload[start:start + klen])!r}"


@dataclass(slots=True)
class SalvageReport:
    kept: int
    problems: list[str]
    lost: list[str]
    backup: str


def salvage(directory: str, backup_dir: str, base_segment: int | None = None) -> SalvageReport:
    """Rewrite a damaged snapshot with every intact record (keys, tombstones, extension
    sections), the damaged file copied to ``backup_dir`` first; the rewrite is atomic (temp
    file, fsync, rename). ``base_segment`` replaces the log cut when the header is damaged."""
    import shutil

    path = os.path.join(directory, FILENAME)
    reader = SnapshotReader(path, salvage=True)
    enc = SnapshotEncoder()
    out = SnapshotFile(directory)
    kept = 0
    try:
        for record in reader:
            if record.__class__ is KeyRecord:
                out.write(enc.key(record.db, record.key, record.expire_ms, bytes(record.value)))  # type: ignore[union-attr]
            elif record.__class__ is Tombstone:
                out.write(enc.tombstone(record.db, record.key))
            else:
                out.write(enc.extension(record.name, bytes(record.data)))  # type: ignore[union-attr]
            kept += 1
        out.write(enc.end())
        base = reader.info.base_segment if reader.info.base_segment >= 0 else (base_segment or 0)
        os.makedirs(backup_dir, exist_ok=True)
        target = os.path.join(backup_dir, FILENAME)
        shutil.copy2(path, target)
        with open(target, "rb") as handle:
            os.fsync(handle.fileno())
        fsync_dir(backup_dir)
        out.commit(enc.header(base, reader.info.created_ms))
    except BaseException:
        out.abort()
        raise
    finally:
        reader.close()
    return SalvageReport(kept, reader.problems, reader.lost, backup_dir)


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
