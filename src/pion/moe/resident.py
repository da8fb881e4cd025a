"""The resident experts: a byte budget of expert copies in mapped shared-memory files.

Why files in shared memory, not Python buffers: a client on the same host (the local lane)
maps the very file the server serves from, so a hit moves no bytes through a socket, and the
RESP lane sends the same mapping with ``writelines`` (no copy into a reply buffer). A file is
written once (``sendfile`` from the shard into a spare file's ready pages, ``moe.spares``),
renamed into place, and never changed; evicting it unlinks it, and the pages go when the last mapping
does (a reply still being sent, or a client still using its map, keeps valid bytes).

Each expert's parts sit at 64-byte aligned offsets in (proj, comp) order, so a float expert's
gate and up weights are adjacent and a client can view them as one fused ``[2I, H]`` matrix.

Threads: ``load`` runs in a worker (the command's, or the loader pool's for a prefetch) and
touches only its own new file; everything else (``land``, ``evict``, the policy) runs on the
event loop, the single writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import mmap
import os
import secrets
import shutil
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pion.codecs.experts import fetch_pieces
from pion.moe.layout import Part
from pion.moe.shards import Shards
from pion.moe.spares import SparePool
from pion.paging.policies import Policy

ALIGN = 64
PAGE = mmap.PAGESIZE
LOADER_THREADS = 2


@dataclass(eq=False)
class Entry:
    """One expert's bytes: in a resident file (``path``) or a private buffer (served once)."""

    key: tuple
    buffer: mmap.mmap | bytearray
    #: (proj, comp, offset in the buffer, nbytes) per part
    offsets: list[tuple[int, int, int, int]]
    nbytes: int
    path: str | None = None
    prefetched: bool = False
    cached: bool = False

    def pieces(self) -> list:
        view = memoryview(self.buffer)
        return fetch_pieces([(proj, comp, view[off:off + size]) for proj, comp, off, size in self.offsets])


def run_load(future: Future) -> Entry:
    """Do a load ``start_load`` set up, once: the first thread to claim it reads, any other waits
    for that read. Returns the entry (raises what the read raised)."""
    if future.set_running_or_notify_cancel():
        try:
            future.set_result(load(*future.pion_load))  # type: ignore[attr-defined]
        except BaseException as exc:
            future.set_exception(exc)
    return future.result()


def place(parts: Iterable[Part]) -> tuple[list[tuple[int, int, int, int]], int]:
    """Aligned offsets of an expert's parts in a resident file, and the file's size."""
    offsets, cursor = [], 0
    for part in parts:
        cursor = -(-cursor // ALIGN) * ALIGN
        offsets.append((part.proj, part.comp, cursor, part.nbytes))
        cursor += part.nbytes
    return offsets, max(cursor, 1)


def load(key: tuple, shards: Shards, parts: tuple[Part, ...], spares: SparePool | None, name: str) -> Entry:
    """Read one expert from its shards into a resident file (a spare's pages, filled with
    ``sendfile``), or into a private buffer when ``spares`` is None (a bypass, served once)."""
    offsets, size = place(parts)
    for part in parts:  # queue every range's reads at once: a cold expert's parts overlap on the disk
        shards.advise_willneed(part.shard, part.start, part.nbytes)
    if spares is None:
        buffer = bytearray(size)
        view = memoryview(buffer)
        for part, (_, _, off, nbytes) in zip(parts, offsets, strict=True):
            shards.pread_into(part.shard, part.start, view[off:off + nbytes])
        return Entry(key, buffer, offsets, -(-size // PAGE) * PAGE, None)
    temp, fd = spares.take(size)
    path = str(spares.directory / name)
    try:
        for part, (_, _, off, nbytes) in zip(parts, offsets, strict=True):
            shards.copy_into(part.shard, part.start, nbytes, fd, off)
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
        os.rename(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    finally:
        os.close(fd)
    return Entry(key, mapped, offsets, -(-size // PAGE) * PAGE, path)


@dataclass
class ResidentSet:
    """The cached experts of every loaded model under one byte budget and one policy."""

    budget: int
    policy: Policy
    directory: Path | None = None
    entries: dict[tuple, Entry] = field(default_factory=dict)
    pinned: set[tuple] = field(default_factory=set)
    pending: dict[tuple, Future] = field(default_factory=dict)
    used: int = 0
    evictions: int = 0
    bypasses: int = 0
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))
    _pool: ThreadPoolExecutor | None = None
    spares: SparePool | None = None

    def open(self, base: Path) -> None:
        """The resident-file directory (mode 0700), emptied: files of a past run are stale."""
        if base.exists():
            shutil.rmtree(base)
        base.mkdir(mode=0o700, parents=True)
        self.directory = base
        self.spares = SparePool(base, lambda fn, *args: self.pool().submit(fn, *args))

    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(LOADER_THREADS, thread_name_prefix="pion-moe-load")
        return self._pool

    def get(self, key: tuple) -> Entry | None:
        return self.entries.get(key)

    def pinned_bytes(self) -> int:
        return sum(self.entries[k].nbytes for k in self.pinned if k in self.entries)

    def victims_for(self, nbytes: int, protect: frozenset = frozenset()) -> list[tuple] | None:
        """Residents to evict so ``nbytes`` more fit (policy order), or None if they never can."""
        if nbytes > self.budget:
            return None
        chosen: list[tuple] = []
        freed = 0
        while self.used - freed + nbytes > self.budget:
            victim = self.policy.victim(lambda k: k in self.pinned or k in protect or k in chosen)
            if victim is None:
                return None
            chosen.append(victim)
            freed += self.entries[victim].nbytes
        return chosen

    def should_cache(self, key: tuple, nbytes: int, prefetch: bool = False) -> bool:
        """Admission: is there room (after evicting what the policy would) and does the policy agree?"""
        victims = self.victims_for(-(-nbytes // PAGE) * PAGE)
        return victims is not None and self.policy.admits(key, victims, prefetch)

    def start_load(self, key: tuple, shards: Shards, parts: tuple[Part, ...], cache: bool,
                   background: bool = False) -> Future:
        """The load of ``key`` (shared with one already under way). ``run_load(future)`` does
        the reading: the caller runs it in its own worker thread (a demand fetch: no extra hand-off
        between threads), or, with ``background``, the loader threads do (a prefetch)."""
        found = self.pending.get(key)
        if found is not None:
            if background and not found.running() and not found.done():
                self.pool().submit(run_load, found)
            return found
        spares = self.spares if cache else None
        name = f"{next(self._names):08d}-{secrets.token_hex(6)}.expert"
        future: Future = Future()
        future.pion_load = (key, shards, parts, spares, name)  # type: ignore[attr-defined]
        self.pending[key] = future
        future.add_done_callback(lambda _f, k=key, f=future: self._forget(k, f))
        if background:
            self.pool().submit(run_load, future)
        return future

    def _forget(self, key: tuple, future: Future) -> None:
        if self.pending.get(key) is future:
            del self.pending[key]

    def land(self, entry: Entry, prefetched: bool = False) -> Entry:
        """On the loop: keep a loaded expert if it still fits (evicting by policy), else serve it once."""
        current = self.entries.get(entry.key)
        if current is not None:
            if current is not entry:
                discard(entry)
            return current
        if entry.path is None:
            self.bypasses += 1
            return entry
        victims = self.victims_for(entry.nbytes, frozenset((entry.key,)))
        if victims is None:
            self.bypasses += 1
            discard(entry)  # the mapping stays valid for this reply; the file is gone
            return entry
        for victim in victims:
            self.evict(victim)
        entry.cached, entry.prefetched = True, prefetched
        self.entries[entry.key] = entry
        self.used += entry.nbytes
        self.policy.insert(entry.key)
        return entry

    def evict(self, key: tuple) -> bool:
        entry = self.entries.pop(key, None)
        if entry is None:
            return False
        self.pinned.discard(key)
        self.policy.remove(key)
        self.used -= entry.nbytes
        self.evictions += 1
        entry.cached = False
        discard(entry)
        return True

    def shrink_to(self, budget: int) -> None:
        """A new budget: evict (policy order, pins last) until what is resident fits."""
        self.budget = budget
        while self.used > budget:
            victim = self.policy.victim(lambda k: k in self.pinned) or next(iter(self.pinned & set(self.entries)), None)
            if victim is None:
                break
            self.evict(victim)

    def close(self) -> None:
        for key in list(self.entries):
            self.evict(key)
        if self.spares is not None:
            self.spares.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self.spares is not None:
            self.spares.close()  # one made while the pool drained
            self.spares = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def discard(entry: Entry) -> None:
    """Unlink an entry's file; its mapping (and any reply viewing it) stays valid until released."""
    if entry.path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)


def resident_base(moe_root: str, data_dir: str) -> Path:
    """Where the resident files live: shared memory when the host has it, else the data dir.

    The name includes both directories, so two servers on one host never share it.
    """
    tag = hashlib.sha256(f"{os.path.abspath(moe_root)}\0{os.path.abspath(data_dir)}".encode()).hexdigest()[:16]
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm / f"pion-moe-{os.getuid()}-{tag}"
    return Path(os.path.abspath(data_dir)) / f"moe-resident-{tag}"
