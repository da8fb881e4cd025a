"""``pion check-wal --fix`` is safe against a crash at any point (issue #13, item 7): after a crash
between any two of its file operations the log is a prefix of what it was (the server refuses to
start on the damage, or loads keys 0..m-1 and none after), never a log with a hole that checks
clean; running --fix again finishes the repair, and the backup holds every byte it removed."""

from __future__ import annotations

import os
import shutil

import pytest

from pion.cli import check_wal
from pion.cli.main import main as pion_main
from pion.server.run import StartupError
from pion.storage import wal
from tests.recovery.helpers import DirServer

KEYS = 120


class Crash(BaseException):
    """The process dies here (nothing after this operation happens)."""


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A data directory whose log spans several segments, with a flipped byte in the second."""
    base = tmp_path_factory.mktemp("damaged") / "data"
    srv = DirServer(base, wal_segment_size=4096).start()
    r = srv.client()
    for i in range(KEYS):
        r.set(f"k{i:03d}", "v" * 60)
    srv.stop()
    segments = wal.list_segments(str(base / "wal"))
    assert len(segments) >= 4
    path = segments[1][1]
    offsets = [offset for offset, _ in wal.SegmentScan(path)]
    data = bytearray(open(path, "rb").read())
    data[offsets[len(offsets) // 2] + 30] ^= 0x40
    open(path, "wb").write(data)
    return base


def crash_after(monkeypatch, budget: int) -> None:
    """Let ``budget`` file operations of the fix happen, then crash at the next one."""
    left = [budget]

    def wrap(fn):
        def op(*args, **kwargs):
            if left[0] == 0:
                raise Crash()
            left[0] -= 1
            return fn(*args, **kwargs)
        return op

    for module, name in ((os, "unlink"), (os, "replace"), (shutil, "copy2"), (shutil, "move"),
                         (wal, "truncate_segment"), (os, "truncate")):
        monkeypatch.setattr(module, name, wrap(getattr(module, name)))


def loaded_keys(datadir) -> list[str] | None:
    """The keys a server loads from ``datadir``, or None when it refuses to start."""
    srv = DirServer(datadir)
    try:
        srv.start()
    except StartupError:
        return None
    try:
        return sorted(k.decode() for k in srv.client().keys("*"))
    finally:
        srv.stop()


def test_a_crash_at_any_step_of_the_fix_leaves_a_prefix_of_the_log(damaged, tmp_path, monkeypatch):
    steps, finished = 0, False
    while not finished:
        work = tmp_path / f"try{steps}"
        shutil.copytree(damaged, work)
        with monkeypatch.context() as patch:
            crash_after(patch, steps)
            try:
                finished = pion_main(["check-wal", "--fix", str(work)]) == 0
            except Crash:
                pass
        keys = loaded_keys(work)
        if keys is not None:  # a prefix: k000 .. k(m-1), nothing after
            assert keys == [f"k{i:03d}" for i in range(len(keys))], (steps, keys[:3], len(keys))
        else:
            assert not finished
        if not finished:  # the next --fix (no crash) completes the repair
            assert pion_main(["check-wal", "--fix", str(work)]) == 0
            keys = loaded_keys(work)
            assert keys == [f"k{i:03d}" for i in range(len(keys))] and 0 < len(keys) < KEYS
        steps += 1
        assert steps < 50
    assert steps > 3  # it really was cut at several points


def test_the_backup_holds_every_removed_byte(damaged, tmp_path, capsys):
    work = tmp_path / "work"
    shutil.copytree(damaged, work)
    before = {os.path.basename(p): open(p, "rb").read() for _, p in wal.list_segments(str(work / "wal"))}
    assert pion_main(["check-wal", "--fix", str(work)]) == 0
    backup = next(p for p in work.iterdir() if p.name.startswith("wal-backup-"))
    kept = {os.path.basename(p): open(p, "rb").read() for _, p in wal.list_segments(str(work / "wal"))}
    saved = {p.name: p.read_bytes() for p in backup.iterdir()}
    for name, data in before.items():
        assert saved.get(name) == data or kept.get(name) == data
    assert check_wal.run(type("A", (), {"dir": str(work), "fix": False, "no_blobs": False})()) == 0
