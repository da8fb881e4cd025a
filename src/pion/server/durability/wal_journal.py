"""The write-ahead journal: group commit of log records on a writer thread.

The loop thread encodes each command's effects into a record (large arguments go to an arena)
and collects the records of one loop iteration; at the end of the iteration they are handed to
the writer thread, which fsyncs the arenas they reference, writes the batch with one ``pwrite``
and, under ``appendfsync always``, one ``fdatasync``; then it tells the loop (via
``call_soon_threadsafe``), which advances ``durable_seq`` and releases held replies. Parsing and
running commands continue meanwhile: the next batch forms while the disk works.

A failure never cuts, rewrites or duplicates synced or acknowledged bytes (the writer thread's
section below says how): the records not in a file are answered ``-MISCONF`` and held for the
next batch, writes are refused while ``write_error()`` is set, and the writer probes the disk
every second with a scratch file until it works again (then the error clears).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pion.protocol import errors
from pion.protocol.resp import encode_error
from pion.server.admin.latency import Histogram
from pion.server.durability.journal import Journal
from pion.storage import wal
from pion.storage.arena import ArenaStore, BlobRef
from pion.storage.faults import DiskWriteError

if TYPE_CHECKING:
    from pion.server.net.client import Client

log = logging.getLogger("pion.wal")

Effects = list[tuple[int, list[bytes]]]
#: a payload past this size is re-encoded with every argument over 64 KiB moved to an arena
MAX_INLINE_PAYLOAD = 64 * 1024 * 1024
RETRY_SECONDS = 1.0


class ObservedJournal(Journal):
    """The in-memory journal plus observers that see every write's effects (memory accounting,
    snapshot dirty tracking). Used as is when the log is off."""

    def __init__(self, arenas: ArenaStore | None = None) -> None:
        super().__init__()
        self.observers: list[Callable[[Effects], None]] = []
        self.arenas = arenas

    def append(self, effects: Effects) -> int:
        for observer in self.observers:
            observer(effects)
        return super().append(effects)


class WalJournal(ObservedJournal):
    def __init__(self, wal_dir: str, arenas: ArenaStore, first_segment: int, settings: Any) -> None:
        super().__init__(arenas)
        self.wal_dir = wal_dir
        self.policy = settings.appendfsync
        self.blob_threshold = settings.blob_threshold
        #: id(arg) -> (arg, ref) of the arguments ``stage`` put in an arena for the commands of
        #: this loop iteration (holding ``arg`` keeps its id its own); cleared when the
        #: iteration's records are handed over, so every record of the iteration finds its
        #: staged arguments, also when the fast lane appends a batch of them after they ran
        self._staged: dict[int, tuple[Any, BlobRef]] = {}
        self.segment_size = settings.wal_segment_size
        self.loop: asyncio.AbstractEventLoop | None = None
        #: loop side: records of this iteration as (seq, segment number, bytes)
        self._batch: list[tuple[int, int, bytes]] = []
        self._scheduled = False
        self.segment = first_segment
        self._segment_bytes = wal.HEADER_SIZE
        #: bytes of log since the last snapshot (INFO aof_current_size, auto rewrite)
        self.log_bytes = 0
        self.synced_seq = 0
        self.last_fsync = 0.0
        self.refs_since_cut: set[BlobRef] = set()
        #: arena bytes the records since the last snapshot reference (the automatic rewrite
        #: counts them with the log: overwritten big values are reclaimed only by a snapshot)
        self.arena_bytes = 0
        self._waiters: list[tuple[int, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._marks: dict[Any, list[tuple[int, int]]] = {}
        self._error: str | None = None
        #: a failed blob arena write: (reason, monotonic time, journal seq then); writes are
        #: refused for RETRY_SECONDS after it, INFO says err until a later record is written
        self._arena_error: tuple[str, float, int] | None = None
        self.write_failures = 0
        #: writer-thread counters: batches written and fsyncs done (group commit: fsyncs < records)
        self.batches = 0
        self.fsyncs = 0
        #: how long each log fsync took (the writer thread records, /metrics reads)
        self.fsync_latency = Histogram()
        # shared with the writer thread
        self._cv = threading.Condition()
        self._queue: list[tuple[int, int, bytes]] = []
        self._closing = False
        self._writer: wal.SegmentWriter | None = None
        #: writer thread: the groups written to the current segment since its last sync, each
        #: with the segment size after it
        self._unsynced: list[tuple[list[tuple[int, int, bytes]], int]] = []
        self._thread = threading.Thread(target=self._run, name="pion-wal", daemon=True)
        #: test hook: an OSError the writer raises on its next attempt(s)
        self.inject_failures: list[OSError] = []

    def start(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Begin writing; without a loop (a bare server in a unit test) records are written but
        nobody waits for them."""
        self.loop = loop
        if not self._thread.is_alive():
            wal.remove_probe(self.wal_dir)  # a kill during a disk probe leaves its scratch file
            self._thread.start()

    # -- loop side ----------------------------------------------------------------------------

    def stage(self, argv: list) -> None:
        """Put a write's arguments of ``blob-threshold`` bytes or more in an arena before the
        command runs (the record then references them): a full disk refuses the command with
        ``DiskWriteError`` while nothing has changed yet. (The K/V writers do not come here:
        their commands are ``zero_copy`` and log the arena view their row writer placed the
        blob in, which ``append`` resolves with ``ArenaStore.ref_of``.)"""
        threshold = self.blob_threshold
        arenas = self.arenas
        for arg in argv:
            if len(arg) >= threshold and not (arg.__class__ is memoryview and arenas.ref_of(arg) is not None):
                entry = self._staged.get(id(arg))
                if entry is None or entry[0] is not arg:
                    self._staged[id(arg)] = (arg, arenas.put(arg))

    def append(self, effects: Effects) -> int:
        for observer in self.observers:
            observer(effects)
        staged = self._staged
        refs: list[BlobRef] = []

        def to_ref(arg: Any, limit: int = self.blob_threshold) -> BlobRef | None:
            ref = None
            if arg.__class__ is memoryview:  # an arena view a writer placed the blob in (or a replayed one)
                ref = self.arenas.ref_of(arg)
            if ref is None and staged:  # an argument ``stage`` put (held in ``staged``: its id is its own)
                entry = staged.get(id(arg))
                ref = entry[1] if entry is not None and entry[0] is arg else None
            if ref is None and len(arg) >= limit:
                try:
                    ref = self.arenas.put(arg)
                except DiskWriteError as exc:
                    # the change is in memory already (a value the command made, not one it was
                    # given): keep the bytes in the record itself; if the log cannot be written
                    # either, the record is answered -MISCONF and retried like any other
                    self.note_disk_error(exc)
                    return None
            if ref is not None:
                refs.append(ref)
            return ref

        # the refs are resolved here, then the record is encoded with them in place: the log
        # format code never calls back into the journal
        payload = wal.encode_effects(_referenced(effects, to_ref, 0 if staged else min(self.blob_threshold, 4096)))
        if len(payload) > MAX_INLINE_PAYLOAD:
            refs.clear()
            payload = wal.encode_effects(_referenced(effects, lambda arg: to_ref(arg, 64 * 1024), 0))
        if refs:
            fresh = [ref for ref in refs if ref not in self.refs_since_cut]
            self.arena_bytes += sum(ref.length for ref in fresh)
            self.refs_since_cut.update(fresh)
        record = wal.frame(payload)
        if self._segment_bytes + len(record) > self.segment_size and self._segment_bytes > wal.HEADER_SIZE:
            self.segment += 1
            self._segment_bytes = wal.HEADER_SIZE
            self.log_bytes += wal.HEADER_SIZE
        self._segment_bytes += len(record)
        self.log_bytes += len(record)
        self.seq += 1
        self._batch.append((self.seq, self.segment, record))
        if self.loop is None:
            try:
                self.start(asyncio.get_running_loop())
            except RuntimeError:
                self.start(None)
                self._hand_over()
                self.durable_seq = self.seq
                return self.seq
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._hand_over)
        return self.seq

    def cut(self) -> int:
        """Start a new segment for the records after this point; returns the last one before it
        (a snapshot taken now covers every segment up to that number)."""
        covered = self.segment
        self.segment += 1
        self._segment_bytes = wal.HEADER_SIZE
        self.log_bytes = 0
        self.refs_since_cut = set()
        self.arena_bytes = 0
        return covered

    def _hand_over(self) -> None:
        self._scheduled = False
        if self._staged:
            self._staged = {}
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        with self._cv:
            self._queue.extend(batch)
            self._cv.notify()

    def when_durable(self, seq: int, callback: Callable[[], None]) -> None:
        if seq <= self.durable_seq:
            callback()
            return
        heapq.heappush(self._waiters, (seq, next(self._order), callback))

    def note_reply(self, client: Client, seq: int, index: int = -1) -> None:
        """Remember where in its output this write's reply goes (its next entry, or ``index``),
        to answer -MISCONF if it fails."""
        conn = client.conn
        if conn is not None and client.reply_mode == "on":
            marks = self._marks.get(conn)
            if marks is None:
                marks = self._marks[conn] = []
            marks.append((len(conn.out) if index < 0 else index, seq))

    def write_error(self) -> str | None:
        if self._error is not None:
            return self._error
        failure = self._arena_error
        if failure is not None and time.monotonic() - failure[1] < RETRY_SECONDS:
            return failure[0]
        return None

    def last_write_ok(self) -> bool:
        return self._error is None and self._arena_error is None

    def note_disk_error(self, exc: OSError) -> None:
        """On the loop: a blob arena write failed. Writes are refused with -MISCONF for
        RETRY_SECONDS (then the next one tries the disk again); logged once per outage."""
        self.write_failures += 1
        reason = f"arena write failed: {exc.strerror or exc}"
        if self._arena_error is None and self._error is None:
            log.error("%s: refusing writes with -MISCONF until a write succeeds", reason)
        self._arena_error = (reason, time.monotonic(), self.seq)

    def _written(self, seq: int, synced: bool) -> None:
        """On the loop: the writer finished records up to ``seq``."""
        if self._error is not None:
            log.warning("log writes succeed again; accepting writes")
            self._error = None
        failure = self._arena_error
        # a record the failed command wrote itself (a staged store's abort) proves nothing about
        # the disk: only one accepted after the refusal window clears the error
        if failure is not None and seq > failure[2] and time.monotonic() - failure[1] >= RETRY_SECONDS:
            log.warning("disk writes succeed again; accepting writes")
            self._arena_error = None
        if synced:
            self.synced_seq = max(self.synced_seq, seq)
            self.last_fsync = time.time()
        self._release(seq)

    def _disk_ok(self) -> None:
        """On the loop: the writer's probe wrote and synced a scratch file: accept writes again
        (the held records go to the log ahead of the next one)."""
        if self._error is not None:
            log.warning("log writes succeed again; accepting writes")
            self._error = None

    def _failed(self, seq: int, message: str) -> None:
        """On the loop: records up to ``seq`` could not be made durable."""
        self.write_failures += 1
        if self._error is None:
            log.error("log write failed (%s): refusing writes with -MISCONF until it succeeds", message)
        self._error = message
        failed_from = self.durable_seq
        error = encode_error(errors.MISCONF)
        for conn, marks in self._marks.items():
            for index, mark_seq in marks:
                if failed_from < mark_seq <= seq and index < len(conn.out):
                    conn.out[index] = error
        self._release(seq)

    def _release(self, seq: int) -> None:
        if seq <= self.durable_seq:
            return
        self.durable_seq = seq
        for conn in list(self._marks):
            marks = [mark for mark in self._marks[conn] if mark[1] > seq]
            if marks:
                self._marks[conn] = marks
            else:
                del self._marks[conn]
        waiters = self._waiters
        while waiters and waiters[0][0] <= seq:
            callback = heapq.heappop(waiters)[2]
            try:
                callback()
            except Exception:  # one broken connection must not keep the others' replies held
                log.exception("releasing a held reply failed")

    def set_policy(self, policy: str) -> None:
        with self._cv:
            self.policy = policy
            self._cv.notify()

    def close(self) -> None:
        """Write and sync what is queued, then stop the writer."""
        self._hand_over()
        with self._cv:
            self._closing = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join(30)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # -- writer thread ----------------------------------------------------------------------------
    #
    # What a failure may and may not do (docs/durability.md, "A full disk"):
    # - bytes that were synced, or whose writes were acknowledged (``everysec``/``no`` answer a
    #   write once it is in the file), are never cut, rewritten or written twice;
    # - records of a failed batch (answered -MISCONF, already applied in memory) are held, not
    #   written again on their own: they go to the log ahead of the next batch, so they reach the
    #   disk only together with a later write that is acknowledged (or a clean shutdown);
    # - while the log cannot be written, writes are refused; the writer probes the disk every
    #   RETRY_SECONDS with a scratch file (never with the log) and clears the error when it works.

    def _run(self) -> None:
        held: list[tuple[int, int, bytes]] = []
        failing = False
        while True:
            with self._cv:
                timeout = RETRY_SECONDS if failing or self.policy == "everysec" else None
                if not self._queue and not self._closing:
                    self._cv.wait(timeout)
                items = self._queue
                self._queue = []
                closing = self._closing
                policy = self.policy
            if closing and not items and not held and not self._unsynced:
                return
            if failing and not items and not closing:
                if self._probe(held, policy):
                    failing = False
                    self._notify(self._disk_ok)
                continue
            batch = held + items if held else items
            try:
                self._write(batch, policy, closing)
                held = []
                failing = False
            except OSError as exc:
                held = self._recover_from(exc, batch, policy)
                failing = True
                if closing:
                    log.error("log could not be written at shutdown: %s", exc)
                    return

    def _write(self, items: list[tuple[int, int, bytes]], policy: str, closing: bool) -> None:
        if self.inject_failures:
            raise self.inject_failures.pop(0)
        if items:
            self.arenas.sync()
        writer = self._writer
        if writer is not None and writer.dirty_tail:
            writer.truncate_to_size()
            writer.dirty_tail = False
        position = 0
        while position < len(items):
            segment = items[position][1]
            end = position
            while end < len(items) and items[end][1] == segment:
                end += 1
            writer = self._writer_for(segment)
            group = items[position:end]
            writer.write(b"".join(item[2] for item in group))
            self._unsynced.append((group, writer.size))
            position = end
        if items:
            self.batches += 1
        now = time.monotonic()
        sync = policy == "always" or closing or (policy == "everysec" and now - self._last_sync >= 1.0)
        writer = self._writer
        if sync and writer is not None and self._unsynced:
            started = time.perf_counter_ns()
            writer.sync()
            self.fsync_latency.record(time.perf_counter_ns() - started)
            self.fsyncs += 1
            self._last_sync = now
            self._unsynced = []
            if items:
                self._kept_seq = items[-1][0]
        elif writer is not None and policy != "always":
            # everysec and no answer a write once it is in the file: from here on it is never cut
            writer.keep_size = writer.size
            if items:
                self._kept_seq = items[-1][0]
            if policy == "no":
                # nothing will fsync these: once written they need no retry, so do not keep them
                # (they piled up to a whole segment, 64 MiB of records and more of objects, in memory)
                self._unsynced = []
        if items:
            self._notify(self._written, items[-1][0], sync)
        elif sync:
            self._notify(self._written, self.synced_seq, True)

    _last_sync = 0.0

    def _writer_for(self, segment: int) -> wal.SegmentWriter:
        writer = self._writer
        if writer is not None and writer.number == segment:
            return writer
        if writer is not None:
            writer.sync()  # a finished segment is complete on disk before the next one starts
            if self._unsynced:
                # its records are durable now: answer them, whatever happens to the next segment
                self._kept_seq = self._unsynced[-1][0][-1][0]
                self._notify(self._written, self._kept_seq, True)
            writer.close()
            self._writer = None
            self._unsynced = []
        self._writer = wal.SegmentWriter(self.wal_dir, segment)
        if self._writer.resumed:
            log.warning("log segment %s re-opened: resuming after its %d bytes of records",
                        self._writer.path, self._writer.size)
        return self._writer

    def _recover_from(
        self, exc: OSError, items: list[tuple[int, int, bytes]], policy: str,
    ) -> list[tuple[int, int, bytes]]:
        """After a failed write or sync: cut the segment back to what must be kept (synced or
        acknowledged bytes), and hold every record that is not in the file any more. Records
        already synced are never held (that would write them twice); acknowledged ones that
        only wait for an fsync stay where they are, in ``_unsynced``."""
        log.error("log write failed: %s", exc)
        writer = self._writer
        keep = writer.cut_back() if writer is not None else 0
        kept: list[tuple[list[tuple[int, int, bytes]], int]] = []
        in_file: set[int] = set()
        for group, end in self._unsynced:
            if writer is not None and end <= keep:
                kept.append((group, end))
                in_file.update(item[0] for item in group)
        self._unsynced = kept
        # what is in a file now: the kept groups, and everything up to the last notified sync
        kept_seq = self._kept_seq
        held = [item for item in items if item[0] > kept_seq and item[0] not in in_file]
        # held records are answered -MISCONF; with none (an fsync of acknowledged records failed)
        # the error still refuses further writes until the probe's fsync succeeds
        self._notify(self._failed, held[-1][0] if held else 0, f"{exc.__class__.__name__}: {exc}")
        return held

    def _probe(self, held: list[tuple[int, int, bytes]], policy: str) -> bool:
        """Is the disk writable again? Sync what acknowledged writes left unsynced, and write a
        scratch file as large as the held records (up to 1 MiB), fsync it and remove it. The log
        itself is never the probe: a held record written by a probe would survive a kill -9
        although it was answered -MISCONF."""
        try:
            if self.inject_failures:
                raise self.inject_failures.pop(0)
            writer = self._writer
            if writer is not None and writer.dirty_tail:
                writer.truncate_to_size()
                writer.dirty_tail = False
            if writer is not None and self._unsynced:
                writer.sync()
                self._kept_seq = max(self._kept_seq, self._unsynced[-1][0][-1][0])
                self._notify(self._written, self._unsynced[-1][0][-1][0], True)
                self._unsynced = []
            size = min(sum(len(item[2]) for item in held), 1 << 20) or wal.HEADER_SIZE
            wal.probe_write(self.wal_dir, size)
        except OSError as exc:
            log.debug("disk still failing: %s", exc)
            return False
        return True

    #: writer thread: the last record that is in a file for good (synced, or acknowledged under
    #: everysec/no): never held, never written again
    _kept_seq = 0

    def _notify(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:
                pass  # the loop is gone (shutdown)


def _referenced(effects: Effects, to_ref: Callable[[Any], BlobRef | None], inline_below: int) -> Effects:
    """``effects`` with every argument ``to_ref`` turns into a ``BlobRef`` replaced by it
    (``bytes`` shorter than ``inline_below`` are not asked: the common, fast case)."""
    out = []
    for db, argv in effects:
        changed: list[Any] | None = None
        for index, arg in enumerate(argv):
            if arg.__class__ is bytes and len(arg) < inline_below:
                continue
            ref = arg if arg.__class__ is BlobRef else to_ref(arg)
            if ref is not None and ref is not arg:
                if changed is None:
                    changed = list(argv)
                changed[index] = ref
        out.append((db, argv if changed is None else changed))
    return out
