"""Blob arenas: large immutable byte strings kept in append-only files and read through mmap.

Why: K/V row batches and big values would make the log and the snapshot huge, and reading them
back would make restart time grow with the bytes cached. Each blob is written once to an arena
file and referenced by a ``BlobRef``; after a restart the files are mapped, never read, and a
replayed command gets a ``memoryview`` of the mapping. Arena files are created sparse at a fixed
capacity and mapped once, so a view never needs a remap (no growing number of mappings).

Threads: ``put``/``view``/``ref_of`` run on the loop thread; ``sync`` (fsync of the files written
since the last sync) runs on the log writer thread, before the log records that reference them.
A large blob can be written off the loop: ``reserve`` (loop) takes its room, ``write_at`` (any
thread, e.g. a worker encoding it) writes it, ``commit`` (loop) registers it as ``put`` would.
See docs/dev/arena-contract.md for the contract with the engines.

Layout: ``BlobRef`` and ``ArenaError`` live in ``blobref`` (shared with the log and snapshot
code), the snapshot tokens (``pack_blob`` / ``unpack_blob`` / ``snapshot_scope``) in
``blobpack``; both are re-exported here. This module is the store: files, allocation, views,
durability and compaction.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import crc32c
import numpy as np

from pion.storage import faults
from pion.storage.arena_check import BlobChecks
from pion.storage.blobpack import pack_blob, snapshot_scope, unpack_blob
from pion.storage.blobref import ArenaError, BlobRef
from pion.storage.faults import DiskWriteError
from pion.storage.fileops import fsync_dir, gaps, punch_hole, round_up

#: the ref type and the snapshot tokens are re-exported: engines and the server import them from here
__all__ = [
    "DEFAULT_ARENA_SIZE", "ArenaError", "ArenaStore", "BlobRef", "pack_blob", "snapshot_scope", "unpack_blob",
]

DEFAULT_ARENA_SIZE = 256 * 1024 * 1024
_SUFFIX = ".arena"


class _Arena:
    __slots__ = ("id", "path", "fd", "capacity", "used", "map", "dirty", "dropped")

    def __init__(self, arena_id: int, path: str, fd: int, capacity: int, used: int) -> None:
        self.id = arena_id
        self.path = path
        self.fd = fd
        self.capacity = capacity
        self.used = used
        self.map: mmap.mmap | None = mmap.mmap(fd, capacity, access=mmap.ACCESS_READ) if capacity else None
        self.dirty = False
        self.dropped = False


class ArenaStore(BlobChecks):
    """The arena files of one data directory (crc checks of mapped blobs: ``arena_check``)."""

    def __init__(self, directory: str, arena_size: int = DEFAULT_ARENA_SIZE) -> None:
        self.directory = directory
        self.arena_size = arena_size
        self._arenas: dict[int, _Arena] = {}
        self._current: _Arena | None = None
        #: (arena_id, offset) -> (length, crc) of every blob put or mapped since start
        self._index: dict[tuple[int, int], tuple[int, int]] = {}
        #: (arena_id, offset) -> weak ref to the numpy array every view of that blob comes from;
        #: alive means some value still holds a view, so compaction must keep the range
        self._holders: dict[tuple[int, int], weakref.ref] = {}
        self._holder_keys: dict[int, tuple[int, int]] = {}
        self.live_bytes = 0
        self.reclaimed_bytes = 0
        #: ranges compaction kept only because a view was still held (an engine skipped pack_blob)
        self.kept_held = 0
        self._lock = threading.Lock()
        #: reservations not yet committed, (arena_id, offset) -> length: compaction keeps them
        self._inflight: dict[tuple[int, int], int] = {}
        #: writes in progress on other threads; ``close`` waits for them
        self._writers = 0
        self._idle = threading.Condition(self._lock)
        self._closed = False
        #: (arena_id, offset) -> does the blob match its crc (checked once: ``blob_ok``)
        self._checked: dict[tuple[int, int], bool] = {}
        self.bad_blobs = 0
        self._verifier: threading.Thread | None = None
        os.makedirs(directory, exist_ok=True)
        for arena_id in self._existing_ids():
            path = self._path(arena_id)
            fd = os.open(path, os.O_RDWR)  # read-write: compaction punches holes
            size = os.fstat(fd).st_size
            self._arenas[arena_id] = _Arena(arena_id, path, fd, size, size)

    # -- files ---------------------------------------------------------------------------

    def _path(self, arena_id: int) -> str:
        return os.path.join(self.directory, "%06d%s" % (arena_id, _SUFFIX))

    def _existing_ids(self) -> list[int]:
        ids = []
        for name in os.listdir(self.directory):
            if name.endswith(_SUFFIX) and name[: -len(_SUFFIX)].isdigit():
                ids.append(int(name[: -len(_SUFFIX)]))
        return sorted(ids)

    def _new_arena(self, min_size: int) -> _Arena:
        arena_id = max(self._arenas, default=0) + 1
        path = self._path(arena_id)
        capacity = max(self.arena_size, round_up(min_size, mmap.PAGESIZE))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, capacity)  # sparse: only written blocks use disk
            arena = _Arena(arena_id, path, fd, capacity, 0)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        arena.dirty = True
        with self._lock:
            self._arenas[arena_id] = arena
            self._new_files = True
        self._current = arena
        return arena

    _new_files = False

    # -- the engine-facing API -------------------------------------------------------------

    def put(self, data: bytes | bytearray | memoryview) -> BlobRef:
        """Append a blob; durable once the next log record (or snapshot) has been fsynced.
        A failed write raises ``DiskWriteError`` and leaves nothing registered."""
        room = self.reserve(len(data) if not isinstance(data, memoryview) else data.nbytes)
        try:
            crc = self.write_at(room, data)
        except DiskWriteError:
            self.cancel(room)
            raise
        return self.commit(room, data, crc)

    def reserve(self, length: int) -> BlobRef:
        """Room for a blob of ``length`` bytes (a ref with crc 0), to be filled by ``write_at``
        and registered by ``commit``; until then nothing refers to it and compaction keeps it.
        A reservation given up (``cancel``) is dead space, reclaimed like any other."""
        arena = self._current
        if arena is None or arena.used + length > arena.capacity:
            try:
                arena = self._new_arena(length)
            except OSError as exc:
                raise DiskWriteError(exc.errno, f"cannot create an arena file: {exc.strerror or exc}") from exc
        offset = arena.used
        arena.used = round_up(offset + length, 8)
        with self._lock:
            self._inflight[(arena.id, offset)] = length
        return BlobRef(arena.id, offset, length, 0)

    def write_at(self, room: BlobRef, data: bytes | bytearray | memoryview, at: int = 0) -> int:
        """Write ``data`` at byte ``at`` of a reservation; returns its crc32c. Any thread: the
        parts of one blob may be written by several workers at once."""
        view = memoryview(data).cast("B") if len(data) else memoryview(b"")
        with self._lock:
            arena = self._arenas.get(room.arena_id)
            if self._closed or arena is None or (room.arena_id, room.offset) not in self._inflight:
                raise ArenaError(f"no reservation {room} to write")
            if at + view.nbytes > room.length:
                raise ArenaError(f"{view.nbytes} bytes at {at} overflow the reservation {room}")
            self._writers += 1
        try:
            faults.check("arena.write")
            written = 0
            while written < view.nbytes:
                written += os.pwrite(arena.fd, view[written:], room.offset + at + written)
            return crc32c.crc32c(view)
        except DiskWriteError:
            raise
        except OSError as exc:
            raise DiskWriteError(exc.errno, exc.strerror or str(exc)) from exc
        finally:
            with self._lock:
                self._writers -= 1
                if not self._writers:
                    self._idle.notify_all()

    def commit(self, room: BlobRef, data: bytes | bytearray | memoryview, crc: int | None = None) -> BlobRef:
        """Register a reservation whose bytes are all written (``data``: its bytes, for the crc
        when the writer did not compute it). Returns the blob's ref; a writer that logs the blob
        logs ``view(ref)``, which the journal resolves with ``ref_of``."""
        key = (room.arena_id, room.offset)
        with self._lock:
            if self._inflight.pop(key, None) is None:
                raise ArenaError(f"no reservation {room} to commit")
            self._arenas[room.arena_id].dirty = True
        if crc is None:
            crc = crc32c.crc32c(memoryview(data).cast("B") if len(data) else b"")
        ref = BlobRef(room.arena_id, room.offset, room.length, crc)
        self._index[key] = (room.length, crc)
        self._checked[key] = True  # the crc was computed from the bytes written
        self.live_bytes += room.length
        return ref

    def cancel(self, room: BlobRef) -> None:
        """Give a reservation up (the command that took it failed)."""
        with self._lock:
            self._inflight.pop((room.arena_id, room.offset), None)

    def view(self, ref: BlobRef) -> memoryview:
        """A read-only view of the blob's bytes in the mapping (no read, no copy)."""
        arena = self._arenas.get(ref.arena_id)
        if arena is None or arena.map is None or ref.offset + ref.length > arena.capacity:
            raise ArenaError(f"blob {ref} is outside arena {ref.arena_id}")
        key = (ref.arena_id, ref.offset)
        if key not in self._index:
            self._index[key] = (ref.length, ref.crc)
            self.live_bytes += ref.length
        holder = self._holders.get(key)
        array = holder() if holder is not None else None
        if array is None or array.nbytes != ref.length:
            array = np.frombuffer(arena.map, dtype=np.uint8, count=ref.length, offset=ref.offset)
            ident = id(array)
            self._holders[key] = weakref.ref(array, lambda wref: self._holder_gone(key, ident, wref))
            self._holder_keys[ident] = key
        return memoryview(array)

    def _holder_gone(self, key: tuple[int, int], ident: int, wref: weakref.ref) -> None:
        if self._holders.get(key) is wref:
            del self._holders[key]
        if self._holder_keys.get(ident) == key:
            del self._holder_keys[ident]

    def ref_of(self, obj: Any) -> BlobRef | None:
        """The ref of a view returned by ``view()`` (the whole blob, not a sub-slice), else None."""
        if obj.__class__ is not memoryview or not obj.nbytes:
            return None
        array = obj.obj
        key = self._holder_keys.get(id(array))
        if key is None:
            return None
        holder = self._holders.get(key)
        if holder is None or holder() is not array:
            return None
        entry = self._index.get(key)
        if entry is None or entry[0] != obj.nbytes:
            return None
        return BlobRef(key[0], key[1], entry[0], entry[1])

    def held(self) -> set[tuple[int, int]]:
        """Blobs some live object still holds a view of."""
        return {key for key, holder in self._holders.items() if holder() is not None}

    def verify(self, ref: BlobRef) -> bool:
        """Whether the blob's bytes still match its crc (reads them: tools and tests only)."""
        try:
            return crc32c.crc32c(self.view(ref)) == ref.crc
        except ArenaError:
            return False

    # -- durability --------------------------------------------------------------------------

    def sync(self) -> None:
        """fsync the arenas written since the last call (any thread); then the directory."""
        with self._lock:
            dirty = [arena for arena in self._arenas.values() if arena.dirty]
            for arena in dirty:
                arena.dirty = False
            new_files, self._new_files = self._new_files, False
        for arena in dirty:
            try:
                faults.check("arena.sync")
                os.fsync(arena.fd)
            except OSError:
                with self._lock:
                    if arena.dropped:  # compacted away meanwhile: nothing left to make durable
                        continue
                    arena.dirty = True
                raise
        if new_files:
            fsync_dir(self.directory)

    def close(self) -> None:
        with self._lock:  # no write from a worker may land on a closed (or reused) descriptor
            self._closed = True
            self._idle.wait_for(lambda: not self._writers, timeout=30)
        for arena in self._arenas.values():
            if arena.map is not None:
                with contextlib.suppress(BufferError):
                    arena.map.close()  # views still held keep it alive otherwise
            with contextlib.suppress(OSError):
                os.close(arena.fd)
        self._arenas.clear()

    # -- compaction ----------------------------------------------------------------------------

    def arena_ids(self) -> list[int]:
        return sorted(self._arenas)

    @property
    def current_id(self) -> int:
        return self._current.id if self._current is not None else 0

    def reclaim(self, live: Iterable[BlobRef], keep_current: bool = True) -> int:
        """Release every range no live ref covers; returns the bytes released.

        Whole dead arenas are unlinked; in others, dead ranges are punched out
        (``fallocate(PUNCH_HOLE)``) where the filesystem supports it.
        """
        by_arena: dict[int, list[tuple[int, int]]] = {}
        for ref in live:
            by_arena.setdefault(ref.arena_id, []).append((ref.offset, ref.offset + ref.length))
        live_keys = {(ref.arena_id, ref.offset) for ref in live}
        with self._lock:  # reserved and being written: keep it
            for (arena_id, offset), length in self._inflight.items():
                by_arena.setdefault(arena_id, []).append((offset, offset + length))
        for key in self.held() - live_keys:  # held in memory but not in the snapshot: keep it
            entry = self._index.get(key)
            if entry is not None:
                self.kept_held += 1
                by_arena.setdefault(key[0], []).append((key[1], key[1] + entry[0]))
        released = 0
        for arena in list(self._arenas.values()):
            ranges = sorted(by_arena.get(arena.id, ()))
            current = keep_current and arena is self._current
            if not ranges and not current:
                released += self._drop(arena)
                continue
            # the file being appended to stays, but its dead ranges below the write position
            # are punched out too (overwritten big values would otherwise linger up to its size)
            for start, end in gaps(ranges, arena.used if current else arena.capacity):
                released += punch_hole(arena.fd, start, end - start)
            self._forget(arena.id, {start for start, _ in ranges})
        self.reclaimed_bytes += released
        return released

    def _drop(self, arena: _Arena) -> int:
        try:
            size = os.fstat(arena.fd).st_blocks * 512
        except OSError:
            size = arena.used
        with contextlib.suppress(FileNotFoundError):
            os.unlink(arena.path)
        with self._lock:
            del self._arenas[arena.id]
            arena.dropped = True
        self._forget(arena.id, set())
        if arena.map is not None:
            with contextlib.suppress(BufferError):
                arena.map.close()
        with contextlib.suppress(OSError):
            os.close(arena.fd)
        return size

    def _forget(self, arena_id: int, keep_offsets: set[int]) -> None:
        for key in [k for k in self._index if k[0] == arena_id and k[1] not in keep_offsets]:
            self.live_bytes -= self._index.pop(key)[0]
            self._checked.pop(key, None)

    def refs(self) -> Iterator[BlobRef]:
        """Every blob known since start (put, or mapped on replay / snapshot load)."""
        for (arena_id, offset), (length, crc) in self._index.items():
            yield BlobRef(arena_id, offset, length, crc)

    def disk_bytes(self) -> int:
        """Blocks the arena files occupy on disk (sparse-aware)."""
        total = 0
        for arena in self._arenas.values():
            with contextlib.suppress(OSError):
                total += os.fstat(arena.fd).st_blocks * 512
        return total
