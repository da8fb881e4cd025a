"""Durability wiring: the data directory, the log, the arenas, snapshots, recovery, memory.

``install(server)`` (called by ``make_server``) takes the data-directory lock, opens the arenas,
puts the journal in place (the write-ahead log when ``appendonly``), the memory guard, the INFO
persistence section, the DEBUG RELOAD hook, and its component (``persistence_hooks.Durability``),
whose start recovers the keyspace before any other part starts and the listeners open. ``server.parts.persistence`` is the ``Persistence`` object;
engines register ``SnapshotExtension``s on it (docs/dev/arena-contract.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.durability.bgsave import SaveJob
from pion.server.durability.memory_guard import MemoryManager
from pion.server.durability.status import DataDirLock, DirLockedError, breadcrumbs, last_command
from pion.server.durability.wal_journal import ObservedJournal, WalJournal
from pion.server.errors import StartupError
from pion.storage import wal
from pion.storage.arena import ArenaStore
from pion.storage.recovery import ARENA_DIR, WAL_DIR
from pion.storage.snapshot import FILENAME, SnapshotError, SnapshotReader

if TYPE_CHECKING:
    from pion.config import Settings
    from pion.server.app import Server

log = logging.getLogger("pion.persistence")

#: Redis's CONFIG_BGSAVE_RETRY_DELAY: after a failed save, save rules wait this long
RETRY_DELAY = 5.0


@dataclass(slots=True)
class SnapshotExtension:
    """An engine's own state in the snapshot: ``dump() -> bytes`` at the cut, ``load(bytes)`` at start.

    ``sections`` (optional) dumps the state as several records instead, each with its own
    checksum, and ``load`` is called once per section: a damaged record then costs one section,
    not the whole engine, when the snapshot is salvaged (``pion check-wal --fix``).

    ``files`` (optional) is called at the same consistent point, on the loop, and returns a job
    (or None) that the save runs on its worker thread with the data directory before the
    snapshot is renamed into place: state too big to hold the loop for, in files of the
    engine's own (the search engine's HNSW graphs). Such files must be safe to load with any
    snapshot, older or newer; a failing job is logged and does not fail the snapshot."""

    name: str
    dump: Callable[[], bytes]
    load: Callable[[bytes], None]
    sections: Callable[[], list[bytes]] | None = None
    files: Callable[[], Callable[[str], None] | None] | None = None

    def parts(self) -> list[bytes]:
        return self.sections() if self.sections is not None else [self.dump()]


def parse_save_rules(text: str) -> list[tuple[int, int]]:
    words = text.split()
    if len(words) % 2:
        raise ValueError("save rules are pairs: <seconds> <changes>")
    return [(int(words[i]), int(words[i + 1])) for i in range(0, len(words), 2)]


class Persistence:
    def __init__(self, server: Server) -> None:
        settings = server.settings
        self.server = server
        self.directory = os.path.abspath(settings.dir)
        self.wal_dir = os.path.join(self.directory, WAL_DIR)
        self.snapshot_extensions: list[SnapshotExtension] = []
        self.lock = DataDirLock(self.directory)
        self.arenas: ArenaStore = None  # type: ignore[assignment]
        self.journal: ObservedJournal = ObservedJournal()
        self.memory = MemoryManager(server)
        self.job: SaveJob | None = None
        self.task: asyncio.Task[None] | None = None
        self.scheduled: str | None = None
        self.lastsave = int(time.time())
        self.last_save_ok = True
        self.last_save_error = ""
        self.last_save_seconds = -1
        self.last_failure_at = 0.0
        self.saves = 0
        self.rewrites = 0
        self.rewrite_failures = 0
        self.last_rewrite_ok = True
        self.last_rewrite_seconds = -1
        self.max_pause_ms = 0.0
        self.max_pause_cpu_ms = 0.0
        self.snapshot_bytes = 0
        #: arena bytes the last snapshot references (the base of the automatic rewrite)
        self.arena_base_bytes = 0
        self.recovery: Any = None
        self.started = False
        self.status, self.crash = breadcrumbs(settings, self.directory, server, self.status_fields)

    # -- setup ------------------------------------------------------------------------------------

    def open(self) -> None:
        """Lock the directory and open the arenas and the journal (make_server time)."""
        os.makedirs(self.directory, exist_ok=True)
        self.lock.acquire()
        settings = self.server.settings
        self.arenas = ArenaStore(os.path.join(self.directory, ARENA_DIR), _arena_size(settings))
        self.server.parts.arenas = self.arenas
        if settings.appendonly:
            os.makedirs(self.wal_dir, exist_ok=True)
            self.journal = WalJournal(self.wal_dir, self.arenas, self._next_segment(), settings)
        else:
            self.journal = ObservedJournal(self.arenas)
        self.server.journal = self.journal

    def _next_segment(self) -> int:
        last = max((number for number, _ in wal.list_segments(self.wal_dir)), default=0)
        return max(last, self.snapshot_base()) + 1

    def snapshot_base(self) -> int:
        path = os.path.join(self.directory, FILENAME)
        if not os.path.exists(path):
            return 0
        try:
            reader = SnapshotReader(path)
        except SnapshotError:
            return 0  # recovery reports it
        base = reader.info.base_segment
        reader.close()
        return base

    def cut_log(self) -> int:
        """Cut the log here (a snapshot's consistent point); returns the last covered segment."""
        if isinstance(self.journal, WalJournal):
            return self.journal.cut()
        return max((n for n, _ in wal.list_segments(self.wal_dir)), default=self.snapshot_base())

    # -- saving -----------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.job is not None

    def save(self) -> None:
        """SAVE: a blocking snapshot (raises ReplyError if one is running in the background)."""
        if self.job is not None:
            raise ReplyError("ERR Background save already in progress")
        job = SaveJob(self, "save")
        try:
            job.run_blocking()
        except Exception as exc:
            self.save_failed(job, exc)
            raise ReplyError("ERR") from None

    def start_background(self, kind: str) -> None:
        job = self.job = SaveJob(self, kind)
        self.task = asyncio.get_running_loop().create_task(job.run())

    def saved(self, job: SaveJob, base: int, dirty_before: int, size: int) -> None:
        """On the loop after the rename: drop covered segments, reclaim arenas, update stats."""
        seconds = int(time.time() - job.started)
        for number, path in wal.list_segments(self.wal_dir):
            if number <= base:
                try:
                    os.unlink(path)
                except OSError as exc:
                    log.warning("could not remove covered log segment %s: %s", path, exc)
        live = set(job.live)
        self.arena_base_bytes = sum(ref.length for ref in live)  # what the snapshot itself keeps
        if isinstance(self.journal, WalJournal):
            live |= self.journal.refs_since_cut
        released = self.arenas.reclaim(live)
        self.server.dirty = max(0, self.server.dirty - dirty_before)
        self.lastsave = int(time.time())
        self.snapshot_bytes = size
        self.max_pause_ms = job.max_pause * 1000  # the last save's longest slice
        self.max_pause_cpu_ms = job.max_pause_cpu * 1000
        if job.kind == "rewrite":
            self.rewrites += 1
            self.last_rewrite_ok = True
            self.rewrite_failures = 0
            self.last_rewrite_seconds = seconds
        else:
            self.saves += 1
            self.last_save_ok = True
            self.last_save_seconds = seconds
        log.info("snapshot saved (%s): %d bytes, log cut at segment %d, %d arena bytes released, "
                 "longest loop pause %.1f ms, %d changed keys in the consistent point's iteration "
                 "(after %d slices of the last changes)", job.kind, size, base, released, job.max_pause * 1000,
                 job.final_keys, job.final_rounds)
        self._finish(job)

    def save_failed(self, job: SaveJob, exc: BaseException) -> None:
        log.error("snapshot (%s) failed: %s", job.kind, exc)
        self.last_failure_at = time.time()
        if job.kind == "rewrite":
            self.last_rewrite_ok = False
            self.rewrite_failures += 1
        else:
            self.last_save_ok = False
            self.last_save_error = str(exc)
        self._finish(job)

    def _finish(self, job: SaveJob) -> None:
        if self.job is job:
            self.job = None
            self.task = None
        if job.kind != "save" and self.scheduled is not None:
            kind, self.scheduled = self.scheduled, None
            self.start_background(kind)

    # -- the cron ---------------------------------------------------------------------------------

    def cron(self, server: Server) -> None:
        self.status.tick()
        if not self.started or self.job is not None or server.loading:
            return
        now = time.time()
        if self.last_failure_at and now - self.last_failure_at < RETRY_DELAY:
            return
        for seconds, changes in _rules(server.settings):
            if server.dirty >= changes and now - self.lastsave >= seconds:
                log.info("%d changes in %d seconds. Saving...", changes, seconds)
                self.start_background("bgsave")
                return
        journal = self.journal
        settings = server.settings
        if isinstance(journal, WalJournal) and settings.auto_aof_rewrite_percentage:
            # the log and the arena bytes its records reference, against the snapshot and the
            # arena bytes it keeps: big values overwritten or evicted leave dead arena bytes that
            # only a snapshot reclaims, so they count as log growth (the bound in docs/durability.md)
            grown = journal.log_bytes + journal.arena_bytes
            base = max(self.snapshot_bytes + self.arena_base_bytes, 1)
            growth = grown * 100 // base
            if grown >= settings.auto_aof_rewrite_min_size and growth >= settings.auto_aof_rewrite_percentage:
                log.info("starting automatic rewrite: log and arenas grew %d%% over the snapshot "
                         "(%d log bytes, %d arena bytes)", growth, journal.log_bytes, journal.arena_bytes)
                self.start_background("rewrite")

    # -- the guard --------------------------------------------------------------------------------

    def write_refusal(self, name: str, flags: frozenset[str]) -> ReplyError | None:
        """-MISCONF for a write (or PING) while the log cannot be written or, with save rules and
        ``stop-writes-on-bgsave-error``, the last snapshot failed (``pion.server.admission``)."""
        if "write" in flags or name == "ping":
            if self.journal.write_error() is not None:
                return ReplyError(errors.MISCONF)
            if not self.last_save_ok and _rules(self.server.settings) and _stop_writes(self.server.settings):
                return ReplyError(errors.MISCONF_SNAPSHOT)
        return None

    # -- status and INFO ----------------------------------------------------------------------------

    def status_fields(self) -> dict[str, Any]:
        server = self.server
        journal = self.journal
        return {
            "port": server.bound_port or server.settings.port, "start_unix_s": int(server.start_time),
            "uptime_s": int(time.time() - server.start_time), "connected_clients": len(server.clients),
            "keys": sum(len(db.data) for db in server.dbs), "used_memory": self.memory.used_memory(),
            "maxmemory": server.settings.maxmemory, "appendonly": int(isinstance(journal, WalJournal)),
            "appendfsync": server.settings.appendfsync,
            "last_fsync_unix_s": int(getattr(journal, "last_fsync", 0)),
            "log_bytes": getattr(journal, "log_bytes", 0), "last_save_unix_s": self.lastsave,
            "last_error": journal.write_error() or (self.last_save_error if not self.last_save_ok else ""),
            "last_command": last_command(server), "loading": int(server.loading),
        }

    def info(self, server: Server) -> dict[str, Any]:
        journal = self.journal
        job = self.job
        now = time.time()
        on = isinstance(journal, WalJournal)
        fields: dict[str, Any] = {
            "loading": int(server.loading), "async_loading": 0,
            "current_cow_peak": 0, "current_cow_size": 0, "current_cow_size_age": 0, "current_fork_perc": "0.00",
            "current_save_keys_processed": job.keys_done if job else 0,
            "current_save_keys_total": job.keys_total if job else 0,
            "rdb_changes_since_last_save": server.dirty,
            "rdb_bgsave_in_progress": int(job is not None and job.kind == "bgsave"),
            "rdb_last_save_time": self.lastsave, "rdb_last_bgsave_status": "ok" if self.last_save_ok else "err",
            "rdb_last_bgsave_time_sec": self.last_save_seconds,
            "rdb_current_bgsave_time_sec": int(now - job.started) if job and job.kind == "bgsave" else -1,
            "rdb_saves": self.saves, "rdb_last_cow_size": 0,
            "rdb_last_load_keys_expired": 0,
            "rdb_last_load_keys_loaded": self.recovery.snapshot_keys if self.recovery else 0,
            "aof_enabled": int(on), "aof_rewrite_in_progress": int(job is not None and job.kind == "rewrite"),
            "aof_rewrite_scheduled": int(self.scheduled == "rewrite"),
            "aof_last_rewrite_time_sec": self.last_rewrite_seconds,
            "aof_current_rewrite_time_sec": int(now - job.started) if job and job.kind == "rewrite" else -1,
            "aof_last_bgrewrite_status": "ok" if self.last_rewrite_ok else "err", "aof_rewrites": self.rewrites,
            "aof_rewrites_consecutive_failures": self.rewrite_failures,
            "aof_last_write_status": "ok" if journal.last_write_ok() else "err", "aof_last_cow_size": 0,
            "module_fork_in_progress": 0, "module_fork_last_cow_size": 0,
        }
        if on:
            fields.update({
                "aof_current_size": self.snapshot_bytes + journal.log_bytes, "aof_base_size": self.snapshot_bytes,
                "aof_pending_rewrite": int(self.scheduled == "rewrite"), "aof_buffer_length": 0,
                "aof_pending_bio_fsync": 0, "aof_delayed_fsync": 0,
            })
        fields.update(self._pion_fields())
        return fields

    def _pion_fields(self) -> dict[str, Any]:
        journal = self.journal
        report = self.recovery
        return {
            "pion_appendfsync": self.server.settings.appendfsync,
            "pion_wal_segments": len(wal.list_segments(self.wal_dir)),
            "pion_wal_durable_seq": journal.durable_seq,
            "pion_wal_last_fsync_time": int(getattr(journal, "last_fsync", 0)),
            "pion_wal_write_failures": getattr(journal, "write_failures", 0),
            "pion_arena_files": len(self.arenas.arena_ids()) if self.arenas else 0,
            "pion_arena_live_bytes": self.arenas.live_bytes if self.arenas else 0,
            "pion_arena_disk_bytes": self.arenas.disk_bytes() if self.arenas else 0,
            "pion_arena_reclaimed_bytes": self.arenas.reclaimed_bytes if self.arenas else 0,
            "pion_arena_snapshot_bytes": self.arena_base_bytes,
            "pion_arena_bytes_since_snapshot": getattr(journal, "arena_bytes", 0),
            "pion_arena_verified_blobs": self.arenas.verified_blobs if self.arenas else 0,
            "pion_arena_bad_blobs": self.arenas.bad_blobs if self.arenas else 0,
            "pion_snapshot_bytes": self.snapshot_bytes,
            "pion_bgsave_last_max_pause_ms": "%.2f" % self.max_pause_ms,
            "pion_bgsave_last_max_pause_cpu_ms": "%.2f" % self.max_pause_cpu_ms,
            "pion_recovery_seconds": "%.3f" % (report.seconds if report else 0.0),
            "pion_recovery_records": report.records if report else 0,
            "pion_recovery_truncated_tails": len(report.truncated) if report else 0,
            "pion_evicted_by_policy": self.memory.evictions,
        }

    # -- switching the log at runtime -------------------------------------------------------------

    def config_changed(self, server: Server, old: Settings, new: Settings) -> str | None:
        if os.path.abspath(new.dir) != self.directory:
            return "the data directory is locked by this running server; restart it with --dir to move it"
        journal = self.journal
        if new.appendfsync != old.appendfsync and isinstance(journal, WalJournal):
            journal.set_policy(new.appendfsync)
        if new.appendonly != old.appendonly:
            self.set_appendonly(new.appendonly)
        if isinstance(self.journal, WalJournal):
            self.journal.blob_threshold = new.blob_threshold
            self.journal.segment_size = new.wal_segment_size
        self.memory.follow_settings(self.journal)
        if new.maxmemory and (new.maxmemory, new.maxmemory_policy) != (old.maxmemory, old.maxmemory_policy):
            self.memory.evict()  # as Redis's CONFIG SET maxmemory: evict now, not at the next write
        return None

    def set_appendonly(self, on: bool) -> None:
        """CONFIG SET appendonly: yes takes a blocking snapshot first, then logs from there."""
        old = self.journal
        if on:
            os.makedirs(self.wal_dir, exist_ok=True)
            self.save()
            new: ObservedJournal = WalJournal(self.wal_dir, self.arenas, self._next_segment(), self.server.settings)
        else:
            new = ObservedJournal(self.arenas)
        new.observers = old.observers
        new.seq = new.durable_seq = old.seq
        if isinstance(new, WalJournal):
            new.synced_seq = old.seq
            new.start(asyncio.get_running_loop())
        old.close()
        self.journal = self.server.journal = new


def _rules(settings: Settings) -> list[tuple[int, int]]:
    try:
        return parse_save_rules(settings.save)
    except ValueError:
        return []


def _stop_writes(settings: Settings) -> bool:
    return settings.stop_writes_on_bgsave_error


def _arena_size(settings: Settings) -> int:
    return settings.arena_file_size


def install(server: Server) -> Persistence:
    """Wire durability onto a server (make_server). Raises StartupError for a locked directory."""
    from pion.server.durability.persistence_hooks import wire

    owner = Persistence(server)
    try:
        owner.open()
    except DirLockedError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        owner.lock.release()
        raise StartupError(f"cannot use data directory {owner.directory}: {exc}") from None
    wire(server, owner)
    return owner
