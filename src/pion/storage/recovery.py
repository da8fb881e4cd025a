"""Startup recovery: load the snapshot, then replay the log segments written after it.

The rules (docs/design.md, the durability contract): a torn record at the very end of the last
segment is a write cut short by a crash; it is cut off and reported with its offset. A bad
record anywhere else (a checksum mismatch, a torn record in an older segment, garbage) stops the
start with the file, the offset and the repair command; recovery never guesses.

This module is pure storage: applying a record is the caller's ``apply(db, args)`` (the server
replays it through the dispatcher), loading a key is ``load_key``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pion.storage import wal
from pion.storage.snapshot import FILENAME, ExtensionRecord, KeyRecord, SnapshotError, SnapshotReader, Tombstone

log = logging.getLogger("pion.recovery")

WAL_DIR = "wal"
ARENA_DIR = "arenas"


class RecoveryError(Exception):
    """The data directory cannot be loaded as it is; the message names the file, offset and fix."""


@dataclass(slots=True)
class RecoveryReport:
    snapshot_keys: int = 0
    snapshot_base: int = 0
    snapshot_created_ms: int = 0
    segments: int = 0
    records: int = 0
    effects: int = 0
    failed_effects: int = 0
    truncated: list[wal.Problem] = field(default_factory=list)
    last_segment: int = 0
    seconds: float = 0.0


def repair_hint(directory: str) -> str:
    return f"run `pion check-wal --fix {directory}` to cut the log at that point (a backup is kept)"


def load_snapshot(
    directory: str,
    load_key: Callable[[KeyRecord], None],
    drop_key: Callable[[Tombstone], None],
    load_extension: Callable[[ExtensionRecord], None],
    report: RecoveryReport,
) -> None:
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
        return
    try:
        reader = SnapshotReader(path)
        report.snapshot_base = reader.info.base_segment
        report.snapshot_created_ms = reader.info.created_ms
        for record in reader:
            if record.__class__ is KeyRecord:
                load_key(record)  # type: ignore[arg-type]
                report.snapshot_keys += 1
            elif record.__class__ is Tombstone:
                drop_key(record)  # type: ignore[arg-type]
            else:
                load_extension(record)  # type: ignore[arg-type]
        reader.close()
    except SnapshotError as exc:
        raise RecoveryError(f"{exc}; the snapshot cannot be loaded: run `pion check-wal --fix {directory}` to "
                            "salvage every intact record (the damaged file is kept in a backup)") from None


def replay_log(
    directory: str,
    base_segment: int,
    apply: Callable[[int, list], None],
    report: RecoveryReport,
) -> None:
    """Apply every record of the segments after ``base_segment``; cut a torn tail of the last."""
    wal_dir = os.path.join(directory, WAL_DIR)
    segments = wal.list_segments(wal_dir)
    for number, path in segments:
        if number <= base_segment:  # covered by the snapshot: a crash came before their deletion
            os.unlink(path)
    live = [(number, path) for number, path in segments if number > base_segment]
    for index, (number, path) in enumerate(live):
        is_last = index == len(live) - 1
        scan = wal.SegmentScan(path)
        for offset, payload in scan:
            try:
                effects = wal.decode_effects(payload)
            except ValueError as exc:
                raise RecoveryError(
                    f"corrupt record in {path} at offset {offset}: {exc}; {repair_hint(directory)}"
                ) from None
            for db, args in effects:
                apply(db, args)
                report.effects += 1
            report.records += 1
        report.segments += 1
        report.last_segment = number
        problem = scan.problem
        if problem is None:
            continue
        if problem.kind == "torn" and is_last:
            wal.truncate_segment(path, problem.offset)
            log.warning(
                "log tail was cut short by a crash: dropped %d bytes of %s at offset %d (%s)",
                len(scan.data) - problem.offset, path, problem.offset, problem.reason,
            )
            report.truncated.append(problem)
            continue
        raise RecoveryError(f"{problem}; {repair_hint(directory)}")


def recover(
    directory: str,
    load_key: Callable[[KeyRecord], None],
    drop_key: Callable[[Tombstone], None],
    load_extension: Callable[[ExtensionRecord], None],
    apply: Callable[[int, list], None],
    replay: bool = True,
) -> RecoveryReport:
    """Snapshot, then (if ``replay``) the log. Raises RecoveryError; returns what was done."""
    started = time.perf_counter()
    report = RecoveryReport()
    load_snapshot(directory, load_key, drop_key, load_extension, report)
    if replay:
        replay_log(directory, report.snapshot_base, apply, report)
    report.seconds = time.perf_counter() - started
    return report
