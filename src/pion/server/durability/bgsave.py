"""Snapshots while the loop keeps serving (BGSAVE, BGREWRITEAOF, save rules) and SAVE.

Python has no fork with copy-on-write, and container values are mutated in place, so a
background save cannot simply read the dicts from another thread. Instead the loop serializes
the keyspace itself, a couple of milliseconds' worth of keys per iteration, and records every key
that changes meanwhile (the keyspace's change signal plus the keys of every logged write). Keys
changed before their turn are skipped; keys changed after it are written again later as
overriding records (or tombstones). When few changed keys remain, the rest are written in one
iteration together with the engines' extensions and the log is cut there: the file is exactly
the keyspace at that cut. A FLUSHALL/FLUSHDB/SWAPDB during the save restarts it.

"Few" is counted in keys (``FINAL_DIRTY``) and in time: the save learns what a key costs to
encode (a moving average over its slices) and goes on slicing while the changed keys left would
hold the loop longer than ``FINAL_SECONDS``; the consistent point's own encoding also stops at a
budget, and if it runs out the keys it wrote count as one more slice (a changed key written early
is harmless: if it changes again it is written again). Why: 2,000 JSON documents of 1,536 floats
take ~0.7 s to encode, a pause no client should see. A write storm cannot starve the save: after
``FINAL_ROUNDS`` such slices the consistent point is taken whatever it costs.

File I/O (writes, fsync, rename, directory fsync) runs on a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pion.storage.arena import BlobRef, snapshot_scope
from pion.storage.serialize import dump_value
from pion.storage.snapshot import FILENAME, SnapshotEncoder, SnapshotFile

if TYPE_CHECKING:
    from pion.server.durability.persistence import Persistence

log = logging.getLogger("pion.snapshot")

#: serialize for at most this long per loop iteration
SLICE_SECONDS = 0.002
#: the slice grows up to this while writers keep re-dirtying keys faster than they are saved
MAX_SLICE_SECONDS = 0.02
#: when fewer changed keys than this remain, finish in one iteration ...
FINAL_DIRTY = 2000
#: ... if encoding them would take at most this long (at the cost per key measured so far); the
#: consistent point's encoding gives up (and the save slices on) past twice this
FINAL_SECONDS = 0.01
#: slices at most, once FINAL_DIRTY is reached, before the consistent point is taken anyway
FINAL_ROUNDS = 256
#: the weight of a slice's cost per key in the moving average
COST_WEIGHT = 0.25
#: above this cost per key the budget is checked after every key, not every 32 (a slice of
#: large documents must not overrun its budget by 32 of them)
_CHECK_EVERY_KEY = 20e-6
_RESTARTING = frozenset({b"flushall", b"flushdb", b"swapdb"})


class SaveAborted(Exception):
    pass


class SaveJob:
    """One snapshot, background (``run``) or blocking (``run_blocking``)."""

    #: the file a background attempt writes (replication's full-sync snapshot uses its own)
    filename = FILENAME

    def __init__(self, owner: Persistence, kind: str) -> None:
        self.owner = owner
        self.server = owner.server
        self.kind = kind  # "bgsave" | "rewrite" | "save"
        self.started = time.time()
        self.max_pause = 0.0
        self.max_pause_cpu = 0.0
        self.keys_done = 0
        self.keys_total = 0
        self.restarts = 0
        self.live: set[BlobRef] = set()
        self._dirty: list[set[bytes]] = []
        self._restart = False
        self._saved_signals: list[Any] = []
        self._pending: list[asyncio.Future] = []
        self.pool: ThreadPoolExecutor | None = None
        #: the extensions' file jobs captured at the consistent point (run before the commit)
        self._file_jobs: list[Any] = []
        #: seconds to encode one key: a moving average over the slices so far (0: none yet)
        self.cost_per_key = 0.0
        #: keys encoded in the consistent point's iteration, and the slices taken to get there
        #: once FINAL_DIRTY was reached (the log line of a finished save says both)
        self.final_keys = 0
        self.final_rounds = 0

    # -- tracking changes -----------------------------------------------------------------------

    def _track(self) -> None:
        self._dirty = [set() for _ in self.server.dbs]
        self._saved_signals = []
        for db in self.server.dbs:
            original = db.on_signal
            self._saved_signals.append(original)
            dirty = self._dirty[db.index]

            def on_signal(db: Any, key: bytes, _orig: Any = original, _dirty: set = dirty) -> None:
                _dirty.add(key)
                if _orig is not None:
                    _orig(db, key)

            db.on_signal = on_signal
        self.owner.journal.observers.append(self._observe)

    def _untrack(self) -> None:
        for db, original in zip(self.server.dbs, self._saved_signals, strict=False):
            db.on_signal = original
        self._saved_signals = []
        observers = self.owner.journal.observers
        if self._observe in observers:
            observers.remove(self._observe)

    def _observe(self, effects: list[tuple[int, list[bytes]]]) -> None:
        table = self.server.table
        for db_index, argv in effects:
            name = bytes(argv[0]).lower()
            if name in _RESTARTING:
                self._restart = True
                continue
            spec = table.get(name)
            if spec is not None and spec.subcommands and len(argv) > 1:
                spec = spec.subcommands.get(bytes(argv[1]).lower(), spec)
            if spec is None or db_index >= len(self._dirty):
                continue
            dirty = self._dirty[db_index]
            for position in spec.key_positions(argv):
                dirty.add(bytes(argv[position]))

    # -- encoding ---------------------------------------------------------------------------------

    def _encode_key(self, enc: SnapshotEncoder, db: Any, key: bytes) -> bytes | None:
        value = db.data.get(key)
        if value is None:
            return None
        return enc.key(db.index, key, db.expires.get(key), dump_value(value))

    def _encode_dirty(self, enc: SnapshotEncoder, out: list[bytes], budget: float | None) -> bool:
        """Write changed keys again (or tombstones); returns False if the budget ran out first."""
        started = time.perf_counter()
        stride = 1 if self.cost_per_key > _CHECK_EVERY_KEY else 32
        count = 0
        try:
            for db in self.server.dbs:
                dirty = self._dirty[db.index]
                while dirty:
                    if budget is not None and count and count % stride == 0 and time.perf_counter() - started > budget:
                        return False
                    key = dirty.pop()
                    record = self._encode_key(enc, db, key)
                    out.append(record if record is not None else enc.tombstone(db.index, key))
                    count += 1
            return True
        finally:
            self._learn(time.perf_counter() - started, count)

    def _learn(self, seconds: float, keys: int) -> None:
        """Fold one slice's cost per key into the moving average."""
        if keys:
            sample = seconds / keys
            self.cost_per_key = sample if not self.cost_per_key else self.cost_per_key + COST_WEIGHT * (sample - self.cost_per_key)

    def _final(self, enc: SnapshotEncoder, out: list[bytes]) -> int:
        """The consistent point, once no changed key is left: engine extensions, the log cut."""
        self._file_jobs = []
        for ext in self.owner.snapshot_extensions:
            out.extend(enc.extension(ext.name, part) for part in ext.parts())
            if ext.files is not None:
                job = ext.files()
                if job is not None:
                    self._file_jobs.append(job)
        return self.owner.cut_log()

    def _run_file_jobs(self) -> None:
        """The extensions' own files (worker thread, or the loop for SAVE); never fails the save."""
        jobs, self._file_jobs = self._file_jobs, []
        for job in jobs:
            try:
                job(self.owner.directory)
            except Exception:  # noqa: BLE001 - such files are an optimisation, checked at load
                log.exception("a snapshot extension's files were not written")

    # -- running ----------------------------------------------------------------------------------

    def run_blocking(self) -> None:
        """SAVE: everything in this loop iteration (nothing changes meanwhile)."""
        server = self.server
        enc = SnapshotEncoder()
        file = SnapshotFile(self.owner.directory)
        dirty_before = server.dirty
        try:
            with snapshot_scope(self.owner.arenas, self.live):
                out: list[bytes] = []
                for db in server.dbs:
                    for key in list(db.data):
                        record = self._encode_key(enc, db, key)
                        if record is not None:
                            out.append(record)
                    self.keys_done += len(db.data)
                self._dirty = [set() for _ in server.dbs]
                base = self._final(enc, out)
            for chunk in out:
                file.write(chunk)
            self._run_file_jobs()
            self.owner.arenas.sync()
            file.write(enc.end())
            file.commit(enc.header(base, int(time.time() * 1000)))
        except BaseException:
            file.abort()
            raise
        self.owner.saved(self, base, dirty_before, file.size)

    async def run(self) -> None:
        """BGSAVE: serialize in slices between other clients' commands."""
        loop = asyncio.get_running_loop()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="pion-snapshot")
        try:
            while True:
                try:
                    base, dirty_before, size = await self._attempt(loop)
                    break
                except SaveAborted:
                    self.restarts += 1
                    log.info("snapshot restarted: the keyspace was flushed or swapped meanwhile")
            self.owner.saved(self, base, dirty_before, size)
        except Exception as exc:
            self.owner.save_failed(self, exc)
        finally:
            self._untrack()
            self.pool.shutdown(wait=False)

    async def _attempt(self, loop: asyncio.AbstractEventLoop) -> tuple[int, int, int]:
        server = self.server
        self._untrack()
        self._restart = False
        self.live = set()
        enc = SnapshotEncoder()
        file = SnapshotFile(self.owner.directory, self.filename)
        dirty_before = server.dirty
        self._pending = []
        try:
            self._track()
            for db in server.dbs:
                if db.data:
                    await self._dump_db(loop, enc, file, db)
            base = await self._converge(loop, enc, file)
            await asyncio.gather(*self._pending)
            header = enc.header(base, int(time.time() * 1000))
            end = enc.end()
            await loop.run_in_executor(self.pool, self._commit, file, end, header)
            return base, dirty_before, file.size
        except BaseException:
            self._untrack()
            await asyncio.gather(*self._pending, return_exceptions=True)
            await loop.run_in_executor(self.pool, file.abort)
            raise

    async def _converge(self, loop: asyncio.AbstractEventLoop, enc: SnapshotEncoder, file: SnapshotFile) -> int:
        """Write the changed keys in slices until a slice writes all that are left: that
        iteration is the consistent point (the extensions and the log cut follow in it, nothing
        changed meanwhile). Returns the cut."""
        budget = SLICE_SECONDS
        self.final_rounds = 0
        while True:
            if self._restart:
                raise SaveAborted
            remaining = sum(len(d) for d in self._dirty)
            limit: float | None = budget
            if remaining <= FINAL_DIRTY:
                if self.final_rounds >= FINAL_ROUNDS:
                    limit = None  # writers kept up with the save this long: take the point now
                elif remaining * self.cost_per_key <= FINAL_SECONDS:
                    limit = max(budget, 2 * FINAL_SECONDS)  # the rest should fit: let it
                self.final_rounds += 1
            mark, cpu = time.perf_counter(), time.thread_time()
            out: list[bytes] = []
            with snapshot_scope(self.owner.arenas, self.live):
                drained = self._encode_dirty(enc, out, limit)
                if drained:
                    self.final_keys = len(out)
                    base = self._final(enc, out)
            if drained:
                self._untrack()
            self._note_pause(time.perf_counter() - mark, time.thread_time() - cpu)
            self._submit(loop, file, out)
            if drained:
                return base
            await self._yield()
            # writers faster than the save: give the save a growing share of the loop so it
            # converges (clients slow down a little instead of one long final pause)
            budget = min(budget * 1.25, MAX_SLICE_SECONDS)

    def _commit(self, file: SnapshotFile, end: bytes, header: bytes) -> None:
        self._run_file_jobs()
        self.owner.arenas.sync()
        file.write(end)
        file.commit(header)

    async def _dump_db(self, loop: asyncio.AbstractEventLoop, enc: SnapshotEncoder, file: SnapshotFile, db: Any) -> None:
        mark, cpu = time.perf_counter(), time.thread_time()
        keys = list(db.data)
        self._note_pause(time.perf_counter() - mark, time.thread_time() - cpu)
        self.keys_total += len(keys)
        dirty = self._dirty[db.index]
        position = 0
        while position < len(keys):
            if self._restart:
                raise SaveAborted
            if db is not self.server.dbs[db.index]:
                raise SaveAborted
            mark, cpu = time.perf_counter(), time.thread_time()
            out: list[bytes] = []
            stride = 1 if self.cost_per_key > _CHECK_EVERY_KEY else 32
            with snapshot_scope(self.owner.arenas, self.live):
                while position < len(keys):
                    key = keys[position]
                    position += 1
                    if key not in dirty:
                        record = self._encode_key(enc, db, key)
                        if record is not None:
                            out.append(record)
                    if position % stride == 0 and time.perf_counter() - mark > SLICE_SECONDS:
                        break
            self.keys_done = position
            self._learn(time.perf_counter() - mark, len(out))
            self._note_pause(time.perf_counter() - mark, time.thread_time() - cpu)
            self._submit(loop, file, out)
            await self._yield()

    def _submit(self, loop: asyncio.AbstractEventLoop, file: SnapshotFile, out: list[bytes]) -> None:
        if out:
            self._pending.append(loop.run_in_executor(self.pool, file.write, b"".join(out)))
        if len(self._pending) > 64:
            for future in self._pending:
                if future.done() and future.exception() is not None:
                    raise future.exception()  # type: ignore[misc]
            self._pending = [f for f in self._pending if not f.done()]

    async def _yield(self) -> None:
        await asyncio.sleep(0)
        if len(self._pending) > 32:  # the disk is behind: let it catch up without holding the loop
            await asyncio.gather(*self._pending[:-16])

    def _note_pause(self, seconds: float, cpu: float) -> None:
        """Wall time includes the loop thread being descheduled on a busy machine; the thread's
        CPU time is the work the save itself did in one go."""
        self.max_pause = max(self.max_pause, seconds)
        self.max_pause_cpu = max(self.max_pause_cpu, cpu)
