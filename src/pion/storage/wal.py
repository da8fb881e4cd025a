"""The write-ahead log's bytes: record framing, the effect encoding, segment files.

A segment is ``<dir>/wal/<number>.wal``: a 16-byte header (``PIONWAL1``, u32 version, u32 0)
then records ``[u32 length][u32 crc32c(payload)][payload]`` (little endian). A payload is the
RESP-like encoding of one command's effects: ``*<n>`` then per effect ``*<1+argc> :<db>`` and
each argument as a bulk string ``$<len>``, or, for a blob kept in an arena, the array
``*4 :<arena> :<offset> :<length> :<crc>``. hiredis parses it in C, so replay is fast.

Reading distinguishes a *torn* tail (a write cut short by a crash: the record runs past the end
of the file, or ends in zeros, and no valid record follows) from *corruption* (anything else).
This module is pure: no threads, no server; ``pion.server.durability.persistence`` drives it.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import crc32c
import hiredis
import numpy as np

from pion.storage import faults
from pion.storage.arena import BlobRef
from pion.storage.fileops import find_frame, fsync_dir

MAGIC = b"PIONWAL1"
VERSION = 1
HEADER = struct.Struct("<8sII")
HEADER_SIZE = HEADER.size
_FRAME = struct.Struct("<II")
FRAME_SIZE = _FRAME.size
#: a length field above this is corruption, never a record
MAX_RECORD = 1 << 30
SUFFIX = ".wal"

Effect = tuple[int, list[bytes]]
Arg = bytes | memoryview | BlobRef


# -- payloads ------------------------------------------------------------------------------------


def encode_effects(
    effects: list[tuple[int, list]],
    to_ref: Callable[[object], BlobRef | None] | None = None,
    inline_below: int = 0,
) -> bytes:
    """The payload for one command's effects. ``to_ref(arg)`` may turn an argument into a ref;
    it is not asked about ``bytes`` shorter than ``inline_below`` (the common, fast case)."""
    out = [b"*%d\r\n" % len(effects)]
    append = out.append
    for db, argv in effects:
        append(b"*%d\r\n:%d\r\n" % (len(argv) + 1, db))
        for arg in argv:
            cls = arg.__class__
            if cls is bytes and len(arg) < inline_below:
                append(b"$%d\r\n%s\r\n" % (len(arg), arg))
                continue
            ref = arg if cls is BlobRef else (to_ref(arg) if to_ref is not None else None)
            if ref is not None:
                append(b"*4\r\n:%d\r\n:%d\r\n:%d\r\n:%d\r\n" % (ref.arena_id, ref.offset, ref.length, ref.crc))
            else:
                append(b"$%d\r\n" % len(arg))
                append(arg if cls is bytes else bytes(arg))
                append(b"\r\n")
    return b"".join(out)


def decode_effects(payload: bytes | memoryview) -> list[tuple[int, list[bytes | BlobRef]]]:
    """The effects of a payload; blob arguments come back as ``BlobRef``. ValueError if malformed."""
    reader = hiredis.Reader()
    reader.feed(payload)
    try:
        tree = reader.gets()
        extra = reader.gets()
    except hiredis.ProtocolError as exc:
        raise ValueError(f"bad payload: {exc}") from None
    if tree is False or extra is not False or not isinstance(tree, list):
        raise ValueError("bad payload: not one complete array")
    effects = []
    for item in tree:
        if not isinstance(item, list) or not item or not isinstance(item[0], int):
            raise ValueError("bad payload: effect without a db index")
        args: list[bytes | BlobRef] = []
        for arg in item[1:]:
            if arg.__class__ is bytes:
                args.append(arg)
            elif isinstance(arg, list) and len(arg) == 4 and all(isinstance(x, int) for x in arg):
                args.append(BlobRef(*arg))
            else:
                raise ValueError("bad payload: unexpected argument type")
        if not args:
            raise ValueError("bad payload: empty command")
        effects.append((item[0], args))
    return effects


def frame(payload: bytes) -> bytes:
    """One record: length, crc32c, payload."""
    return _FRAME.pack(len(payload), crc32c.crc32c(payload)) + payload


# -- segment files ------------------------------------------------------------------------------


def segment_path(directory: str, number: int) -> str:
    return os.path.join(directory, "%012d%s" % (number, SUFFIX))


def list_segments(directory: str) -> list[tuple[int, str]]:
    """(number, path) of every segment in ``directory``, oldest first."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        stem = name[: -len(SUFFIX)]
        if name.endswith(SUFFIX) and stem.isdigit():
            found.append((int(stem), os.path.join(directory, name)))
    return sorted(found)


class SegmentWriter:
    """Appends batches to one segment with ``pwrite`` at a tracked offset, so a failed or partial
    write can be cut off (``ftruncate``) and retried without leaving half a record behind.

    Opening never truncates a segment that holds records: a segment the writer comes back to (a
    retry after its first open failed, or any re-open) is resumed at the end of its last valid
    record. Only bytes past that end (what a failed write left) are cut. ``keep_size`` is the
    offset below which nothing may ever be cut again: synced bytes, and under ``appendfsync
    everysec``/``no`` bytes whose writes were already acknowledged."""

    def __init__(self, directory: str, number: int) -> None:
        self.directory = directory
        self.number = number
        self.path = segment_path(directory, number)
        self.size = 0
        self.synced_size = 0
        self.keep_size = 0
        self.needs_dir_sync = True
        #: a failed write may have left bytes past ``size``: cut them before writing again
        self.dirty_tail = False
        self.resumed = False
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            existing = os.fstat(fd).st_size
            end = _valid_end(self.path) if existing >= HEADER_SIZE else 0
            if end:
                # records already here (this writer's earlier life): keep them all, resume after them
                self.size = self.synced_size = self.keep_size = end
                self.resumed = True
                if existing > end:
                    os.ftruncate(fd, end)
            else:
                if existing:
                    os.ftruncate(fd, 0)  # a header cut short by an earlier failed open: no records
                self.fd = fd
                self.write(HEADER.pack(MAGIC, VERSION, 0))
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def write(self, data: bytes) -> None:
        """Write all of ``data`` at the end; on failure cut the file back and raise."""
        view = memoryview(data)
        start = self.size
        done = 0
        try:
            faults.check("wal.write")
            while done < len(view):
                done += os.pwrite(self.fd, view[done:], start + done)
        except OSError:
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                self.dirty_tail = True  # the retry truncates again before writing
            raise
        self.size = start + done

    def cut_back(self) -> int:
        """After a failure: forget the written but unacknowledged bytes (they are written again
        or never acknowledged); never below ``keep_size``. Returns the new size."""
        self.size = max(self.keep_size, self.synced_size, HEADER_SIZE)
        self.dirty_tail = True
        return self.size

    def truncate_to_size(self) -> None:
        """Before a retry: drop whatever a failed write left past the last good record."""
        os.ftruncate(self.fd, max(self.size, self.keep_size))

    def sync(self) -> None:
        faults.check("wal.sync")
        os.fdatasync(self.fd) if hasattr(os, "fdatasync") else os.fsync(self.fd)
        if self.needs_dir_sync:
            fsync_dir(self.directory)
            self.needs_dir_sync = False
        self.synced_size = self.size
        self.keep_size = max(self.keep_size, self.size)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


PROBE_NAME = "probe.tmp"


def probe_write(directory: str, size: int) -> None:
    """Write ``size`` bytes to a scratch file beside the segments, fsync it, remove it: is the
    disk writable again after a failure? (The log itself is never the probe.) Raises OSError."""
    path = os.path.join(directory, PROBE_NAME)
    faults.check("wal.write")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(bytes(size))
        done = 0
        while done < size:
            done += os.pwrite(fd, view[done:], done)
        faults.check("wal.sync")
        os.fsync(fd)
    finally:
        os.close(fd)
        remove_probe(directory)


def remove_probe(directory: str) -> None:
    try:
        os.unlink(os.path.join(directory, PROBE_NAME))
    except OSError:
        pass


def _valid_end(path: str) -> int:
    """The end of the last valid record of a segment. A segment whose header is not Pion's is
    not this writer's to reuse: refused (``OSError``), never overwritten."""
    scan = SegmentScan(path)
    for _ in scan:
        pass
    if scan.problem is not None and scan.problem.offset == 0:
        raise OSError(errno.EEXIST, f"{path} exists and is not a Pion log segment; refusing to overwrite it")
    return scan.end


# -- reading ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Problem:
    """The first bad spot of a segment: ``torn`` (cut-off tail) or ``corrupt``."""

    path: str
    offset: int
    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} record in {self.path} at offset {self.offset}: {self.reason}"


class SegmentScan:
    """Iterate ``(offset, payload)`` over a segment's valid records; afterwards ``problem`` says
    why reading stopped early (None at a clean end) and ``end`` is the end of the last good one."""

    def __init__(self, path: str, data: bytes | None = None, start: int | None = None) -> None:
        """``start`` resumes at a record offset (check-wal, after a bad spot) instead of the header."""
        self.path = path
        if data is None:
            with open(path, "rb") as handle:
                data = handle.read()
        self.data = data
        self.start = start
        self.problem: Problem | None = None
        self.end = 0
        self.records = 0

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        data = self.data
        size = len(data)
        if self.start is None:
            if size < HEADER_SIZE:
                self.problem = Problem(self.path, 0, "torn", f"segment header cut short ({size} bytes)")
                return
            magic, version, _ = HEADER.unpack_from(data, 0)
            if magic != MAGIC or version != VERSION:
                self.problem = Problem(self.path, 0, "corrupt", "not a Pion log segment (bad magic/version)")
                return
        pos = self.end = HEADER_SIZE if self.start is None else self.start
        view = memoryview(data)
        while pos < size:
            problem = self._check(view, pos, size)
            if problem is not None:
                self.problem = problem
                return
            length = _FRAME.unpack_from(data, pos)[0]
            payload = data[pos + FRAME_SIZE : pos + FRAME_SIZE + length]
            yield pos, payload
            pos += FRAME_SIZE + length
            self.end = pos
            self.records += 1

    def _check(self, view: memoryview, pos: int, size: int) -> Problem | None:
        if size - pos < FRAME_SIZE:
            return self._tail(view, pos, "record header cut short")
        length, crc = _FRAME.unpack_from(view, pos)
        if length == 0 or length > MAX_RECORD:
            if not np.frombuffer(view[pos:], dtype=np.uint8).any():
                return Problem(self.path, pos, "torn", "zero-filled tail")
            return Problem(self.path, pos, "corrupt", f"impossible record length {length}")
        end = pos + FRAME_SIZE + length
        if end > size:
            return self._tail(view, pos, f"record of {length} bytes runs past the end of the file")
        payload = view[pos + FRAME_SIZE : end]
        if crc32c.crc32c(payload) != crc:
            if end == size and payload[-1] == 0:  # a payload ends in CRLF: zeros are a cut-off write
                return self._tail(view, pos, "record ends in zeros (write cut short)")
            return Problem(self.path, pos, "corrupt", "checksum mismatch")
        return None

    def _tail(self, view: memoryview, pos: int, reason: str) -> Problem:
        """Torn only if no valid record starts anywhere after ``pos``: else a corrupt length."""
        found = find_valid_record(view, pos + 1)
        if found is not None:
            return Problem(self.path, pos, "corrupt", f"{reason}, yet a valid record follows at {found}")
        return Problem(self.path, pos, "torn", reason)


def find_valid_record(view: memoryview, start: int) -> int | None:
    """The offset of the first intact record at or after ``start``, if any (a payload starts
    with ``*`` and ends with LF; ``fileops.find_frame`` finds the candidates with numpy)."""
    found = find_frame(view, start, b"*", 0x0A)
    if found is not None and int.from_bytes(view[found : found + 4], "little") < 4:
        return find_valid_record(view, found + 1)
    return found


def truncate_segment(path: str, offset: int) -> None:
    """Cut a segment at ``offset`` (a torn tail) and make it durable."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if offset < HEADER_SIZE:
            os.ftruncate(fd, 0)
            os.pwrite(fd, HEADER.pack(MAGIC, VERSION, 0), 0)
        else:
            os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)
