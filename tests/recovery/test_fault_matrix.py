"""The fault-injection matrix (issue #26): for each point (op, k, errno) the k-th ``open`` for
writing, ``write``, ``pwrite``, ``fsync``/``fdatasync``, ``ftruncate``, ``rename``/``replace`` or
``unlink`` the server makes on a file of its data directory fails with ENOSPC or EIO, during a
workload that crosses 64 KiB segment rollovers, a BGSAVE, a BGREWRITEAOF and arena writes (values
over ``blob-threshold``), under ``appendfsync always``. The server must keep running; the fault
is freed; more writes are acknowledged; SIGKILL; restart. Then:

- every acknowledged write is there: each key holds its last acknowledged value, or a value a
  write answered ``-MISCONF`` after it set (allowed only because acknowledged writes followed
  it: its record precedes theirs in the log);
- nothing answered ``-MISCONF`` is visible unless a later acknowledged write made it durable,
  and no value appears that no write made (a key of an earlier point means a lost FLUSHALL);
- the recovered keyspace equals the live one read just before the kill (what the server applied
  before its last acknowledged write is durable with it; what it refused does not appear);
- INFO never said ``aof_last_write_status:ok`` while the on-disk log missed an acknowledged
  write: the data directory is copied the moment INFO first says ok after a ONCE fault (the
  client idle) and that copy, started on its own, must hold every write acknowledged by then;
  after the fault is freed and writes are acknowledged again, INFO must say ok.

``tests/recovery/fault_matrix.py`` has the workload, the model and the runner (its docstring
details each step). A counting run (``DEBUG SYSFAULT WATCH`` / ``COUNT`` / ``TRACE``) first
measures how many calls of each op the workload makes (N) and which calls start a new log file.

CI form (``test_fault_matrix_sample``, one test per op): k = first, middle and last of 1..N plus,
for open, pwrite and fsync, the first call on each of the first four new log files (a rollover's open, header write and
sync), ENOSPC and EIO alternating over those k, ONCE; plus one STICKY point for the ops whose
failure repeats (open, pwrite, fsync); ftruncate, which the workload hardly calls unless a write
failed, also as a second fault (``DEBUG SYSFAULT ALSO``): the first ftruncate after a failed
pwrite or fsync fails too, at four of those points. Slow form (``test_fault_matrix_every_k``): every k of
1..N for every op, both errnos, ONCE, and STICKY at the same points as the CI form; the
ftruncate double faults at every pwrite and fsync point of the CI sample, both errnos. Each test
reports the points it ran and how many of them injected a failure (``fired``): a k past this
run's N (the counts vary a little with group-commit timing) injects nothing and is not counted.
"""

from __future__ import annotations

import json
import os

import pytest

from pion.storage import wal
from tests.recovery.fault_matrix import ERRNOS, OPS, MatrixRunner, PointResult, boundaries, spread

STICKY_OPS = ("open", "pwrite", "fsync")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    runner = MatrixRunner(tmp_path_factory.mktemp("matrix") / "data").start()
    try:
        runner.counts, runner.trace = runner.count()
        yield runner
    finally:
        runner.stop()


def sample(runner: MatrixRunner, op: str) -> list[int]:
    """First, middle and last k; for the log's own ops also the first call on each of the first
    four new log files (unlink's and rename's calls are all the snapshot's, no rollover's)."""
    n = max(runner.counts[op], 1)
    rollovers = boundaries(runner.trace, op)[:4] if op in ("open", "pwrite", "fsync") else []
    return sorted(set(spread(n, 3)) | set(rollovers))


def double_faults(runner: MatrixRunner) -> list[tuple]:
    """The workload itself hardly truncates (N is 0 or 1): a failed pwrite or fsync is what
    makes the writer cut a segment back, so ftruncate is also failed as the second fault after
    one, at the pwrite and fsync points of the CI sample, both errnos."""
    return [(first, k, "ENOSPC", "ONCE", ("ftruncate", 1, errno))
            for first in ("pwrite", "fsync") for k in sample(runner, first) for errno in ERRNOS]


def run_points(runner: MatrixRunner, points: list[tuple]) -> list[PointResult]:
    results = []
    for op, k, errno, mode, *also in points:
        try:
            result = runner.point(op, k, errno, mode, also=also[0] if also else None)
        except Exception as exc:  # the point failed outright (the server died, a write hung ...)
            result = PointResult(op, k, errno, mode, problems=[f"{type(exc).__name__}: {exc}"])
            runner.server.kill9()
            runner.server.start(timeout=120)
        results.append(result)
    return results


def report(op: str, results: list[PointResult]) -> None:
    fired = [r for r in results if r.fired >= (2 if "+" in r.op else 1)]  # a double fault: both fired
    bad = [r for r in results if r.problems]
    print(json.dumps({"op": op, "points": len(results), "fired": len(fired),
                      "fired_enospc": sum(r.errno == "ENOSPC" for r in fired),
                      "fired_eio": sum(r.errno == "EIO" for r in fired),
                      "ok_copies": sum(r.ok_copy for r in results), "failed": len(bad)}))
    assert not bad, "\n".join(f"{r.op} k={r.k} {r.errno} {r.mode} (refused {r.refused}): " + " | ".join(r.problems[:4])
                              for r in bad[:12])


def test_the_matrix_notices_a_lost_segment(matrix):
    """The checks can fail: a point whose log loses its newest segment after the kill (as the
    issue's re-created segment did) is reported, with the acknowledged writes it lost."""

    def drop_newest_segment(datadir):
        segments = wal.list_segments(str(datadir / "wal"))
        os.unlink(segments[-1][1])

    result = matrix.point("pwrite", 1, "ENOSPC", tamper=drop_newest_segment)
    assert result.fired == 1
    assert any("lost" in problem for problem in result.problems), result.problems
    assert any("differs from the memory" in problem for problem in result.problems), result.problems


@pytest.mark.parametrize("op", OPS)
def test_fault_matrix_sample(matrix, op):
    ks = sample(matrix, op)
    points = [(op, k, ERRNOS[i % 2], "ONCE") for i, k in enumerate(ks)]
    if op in STICKY_OPS:
        points.append((op, (boundaries(matrix.trace, op) or [1])[0], "ENOSPC", "STICKY"))
    if op == "ftruncate":
        points += double_faults(matrix)[::7]
    results = run_points(matrix, points)
    report(op, results)
    if matrix.counts[op] > 1:
        assert any(r.fired for r in results), f"no {op} fault fired: the workload makes {matrix.counts[op]} calls"


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("op", OPS)
def test_fault_matrix_every_k(matrix, op):
    n = max(matrix.counts[op], 1)
    points = [(op, k, errno, "ONCE") for k in range(1, n + 1) for errno in ERRNOS]
    points += [(op, k, errno, "STICKY") for k in sample(matrix, op) for errno in ERRNOS]
    if op == "ftruncate":
        points += double_faults(matrix)
    report(op, run_points(matrix, points))
