"""Check a data directory's log (and snapshot and arenas); with --fix, cut the log at the first bad record.

Like redis-check-aof: every bad record is reported with its file and offset (after a bad spot
the scan resynchronises on the next valid record, so damage further on is reported too). With
``--fix`` the segment holding the first bad record and the ones after it are copied to a backup
folder, the later segments are removed (replaying them without the records that were lost would
apply later writes to a state they never saw) and the damaged one is replaced by its repaired
copy, in an order that is safe against a crash at any point (``_fix``). Records referencing an
arena blob whose bytes no longer match their checksum count as bad.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

from pion.storage import wal
from pion.storage.arena import ArenaError, ArenaStore, BlobRef
from pion.storage.fileops import fsync_dir
from pion.storage.recovery import ARENA_DIR, WAL_DIR
from pion.storage.snapshot import FILENAME, SnapshotError, SnapshotReader, salvage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fix", action="store_true", help="truncate the log at the first bad record (keeps a backup)")
    parser.add_argument("--no-blobs", action="store_true", help="do not read arena blobs to check their checksums")
    parser.add_argument("dir", help="the server's data directory (--dir), or its wal/ folder")


@dataclass
class SegmentReport:
    number: int
    path: str
    size: int
    records: int = 0
    good_end: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)


def _dirs(target: str) -> tuple[str, str]:
    if os.path.isdir(os.path.join(target, WAL_DIR)):
        return target, os.path.join(target, WAL_DIR)
    return os.path.dirname(os.path.abspath(target)), target


def check_segment(number: int, path: str, arenas: ArenaStore | None, is_last: bool) -> SegmentReport:
    """Every bad spot of one segment, resynchronising on the next intact record after each."""
    data = wal.SegmentScan(path).data
    report = SegmentReport(number, path, len(data))
    start: int | None = None
    while True:
        scan = wal.SegmentScan(path, data, start)
        for offset, payload in scan:
            reason = _check_payload(payload, arenas)
            if reason is not None:
                report.bad.append((offset, reason))
            elif not report.bad:
                report.good_end = offset + wal.FRAME_SIZE + len(payload)
            report.records += 1
        if not report.bad:
            report.good_end = max(report.good_end, scan.end)
        problem = scan.problem
        if problem is None:
            return report
        note = "" if problem.kind != "torn" or is_last else " (not in the last segment: recovery refuses it)"
        report.bad.append((problem.offset, f"{problem.kind}: {problem.reason}{note}"))
        if problem.offset == 0:
            return report
        start = wal.find_valid_record(memoryview(data), problem.offset + 1)
        if start is None:
            return report


def _check_payload(payload: bytes, arenas: ArenaStore | None) -> str | None:
    try:
        effects = wal.decode_effects(payload)
    except ValueError as exc:
        return str(exc)
    if arenas is None:
        return None
    for _, args in effects:
        for arg in args:
            if arg.__class__ is BlobRef:
                try:
                    ok = arenas.verify(arg)
                except ArenaError:
                    ok = False
                if not ok:
                    return f"arena blob {arg.arena_id}:{arg.offset}+{arg.length} is missing or damaged"
    return None


def check_snapshot(data_dir: str) -> tuple[str, str | None]:
    path = os.path.join(data_dir, FILENAME)
    if not os.path.exists(path):
        return path, None
    try:
        reader = SnapshotReader(path)
        count = sum(1 for _ in reader)
        reader.close()
    except SnapshotError as exc:
        return path, str(exc)
    return path, f"ok ({count} records, log cut at segment {reader.info.base_segment})"


def salvage_snapshot(data_dir: str, wal_dir: str, backup: str) -> bool:
    """--fix of a damaged snapshot: rewrite it with every intact record; True if it was done."""
    segments = [number for number, _ in wal.list_segments(wal_dir)]
    try:
        report = salvage(data_dir, backup, base_segment=min(segments) - 1 if segments else 0)
    except (SnapshotError, OSError) as exc:
        print(f"the snapshot cannot be salvaged: {exc}", file=sys.stderr)
        return False
    for problem in report.problems:
        print(f"BAD snapshot: {problem}")
    lost = ", ".join(report.lost[:20]) + (" ..." if len(report.lost) > 20 else "")
    print(f"SALVAGED {os.path.join(data_dir, FILENAME)}: {report.kept} intact records kept, "
          f"{len(report.problems)} damaged spot(s) dropped" + (f" (lost: {lost})" if lost else "")
          + f"; original in {backup}")
    if any("header" in problem for problem in report.problems):
        print("WARNING: the snapshot's header was damaged: its log cut was inferred from the segments present")
    return True


def run(args: argparse.Namespace) -> int:
    data_dir, wal_dir = _dirs(args.dir)
    if not os.path.isdir(wal_dir):
        print(f"no log in {args.dir} (expected {wal_dir})", file=sys.stderr)
        return 2
    for name in os.listdir(wal_dir):  # a --fix cut short before its rename: the original is in place
        if name.endswith(wal.SUFFIX + ".repair"):
            os.unlink(os.path.join(wal_dir, name))
    snap_path, snap_state = check_snapshot(data_dir)
    if snap_state is not None and not snap_state.startswith("ok") and args.fix:
        print(f"snapshot {snap_path}: {snap_state}")
        if salvage_snapshot(data_dir, wal_dir, backup_dir(data_dir)):
            snap_path, snap_state = check_snapshot(data_dir)
    base = 0
    if snap_state is not None:
        print(f"snapshot {snap_path}: {snap_state}")
        if snap_state.startswith("ok"):
            reader = SnapshotReader(snap_path)
            base = reader.info.base_segment
            reader.close()
    arena_dir = os.path.join(data_dir, ARENA_DIR)
    arenas = ArenaStore(arena_dir) if not args.no_blobs and os.path.isdir(arena_dir) else None
    segments = [(n, p) for n, p in wal.list_segments(wal_dir) if n > base]
    reports = [check_segment(n, p, arenas, i == len(segments) - 1) for i, (n, p) in enumerate(segments)]
    bad = 0
    for report in reports:
        for offset, reason in report.bad:
            print(f"BAD {report.path} offset {offset}: {reason}")
            bad += 1
        state = "ok" if not report.bad else f"valid up to offset {report.good_end} of {report.size}"
        print(f"segment {report.path}: {report.records} records, {state}")
    snap_bad = snap_state is not None and not snap_state.startswith("ok")
    print(f"checked {len(reports)} segments: {bad} bad record(s)" + ("; the snapshot is damaged" if snap_bad else ""))
    if not bad:
        if snap_bad:
            print(f"run `pion check-wal --fix {args.dir}` to salvage every intact record of the snapshot "
                  "(the damaged file is kept in a backup)")
        return 1 if snap_bad else 0
    if not args.fix:
        print(f"run `pion check-wal --fix {args.dir}` to cut the log at the first bad record (a backup is kept)")
        return 1
    return _fix(data_dir, reports)


def _fix(data_dir: str, reports: list[SegmentReport]) -> int:
    """Cut the log at its first bad record, so that after a crash at any point the log is a
    prefix of what it was (never a log with a hole in the middle, never one that checks clean
    while later records survive past a cut).

    1. The damaged segment and every later one are copied to ``wal-backup-<time>/`` and fsynced.
    2. The later segments are removed newest first, the directory fsynced after each: meanwhile
       the log is a prefix that still holds the damage, so a server refuses to start on it.
    3. The repaired copy of the damaged segment (its bytes up to the bad record) is written to a
       temporary file, fsynced, and renamed over it; the directory is fsynced.

    A crash in 1 or 2 leaves the damage in place (run ``--fix`` again); in 3 either the old or
    the repaired segment. Nothing is lost that the backup does not hold.
    """
    first = next(i for i, report in enumerate(reports) if report.bad)
    report = reports[first]
    later = reports[first + 1 :]
    wal_dir = os.path.dirname(report.path)
    backup = backup_dir(data_dir)
    os.makedirs(backup)
    for damaged in [report, *later]:
        target = os.path.join(backup, os.path.basename(damaged.path))
        shutil.copy2(damaged.path, target)
        _fsync_file(target)
    fsync_dir(backup)
    fsync_dir(data_dir)
    for segment in reversed(later):
        os.unlink(segment.path)
        fsync_dir(wal_dir)
        print(f"MOVED {segment.path} to {backup} (it follows the cut)")
    cut = report.bad[0][0]
    repaired = report.path + ".repair"
    with open(report.path, "rb") as source, open(repaired, "wb") as out:
        out.write(source.read(cut) if cut >= wal.HEADER_SIZE else wal.HEADER.pack(wal.MAGIC, wal.VERSION, 0))
        out.flush()
        os.fsync(out.fileno())
    os.replace(repaired, report.path)
    fsync_dir(wal_dir)
    dropped = report.size - max(cut, wal.HEADER_SIZE)
    print(f"FIXED {report.path}: truncated at offset {cut} ({dropped} bytes dropped); original in {backup}")
    return 0


def backup_dir(data_dir: str) -> str:
    """A new ``wal-backup-<time>[-n]`` folder name in the data directory."""
    backup = os.path.join(data_dir, "wal-backup-%s" % time.strftime("%Y%m%d-%H%M%S"))
    suffix = 1
    while os.path.exists(backup + ("" if suffix == 1 else f"-{suffix}")):
        suffix += 1
    return backup + ("" if suffix == 1 else f"-{suffix}")


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
