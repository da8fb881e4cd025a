"""benchmarks/bench_vector.py runs end to end at its CI size (--smoke): a server, ingest, every
query configuration, the canary, the table, the JSON and the plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support import procs

ROOT = Path(__file__).resolve().parents[2]


def test_bench_vector_smoke(tmp_path):
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_vector.py"), "--smoke", "--out-dir",
                          str(tmp_path)], cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "| filter | EF_RUNTIME |" in out.stdout and "canary:" in out.stdout
    result = json.loads((tmp_path / "vector_smoke.json").read_text())
    assert {r["filter"] for r in result["rows"]} == {"none", "10%", "1%"}
    assert all(r["all_k"] == 1.0 for r in result["rows"])  # filtered KNN still returns k
    assert max(r["recall"] for r in result["rows"] if r["filter"] == "none") >= 0.95
    assert (tmp_path / "vector_smoke.png").stat().st_size > 0


def test_bench_vector_peer_smoke(tmp_path):
    """``--peer redis-stack --smoke``: both servers, every load from 1 and 8 clients, same recall."""
    import pytest

    from tests.support.stack import StackServer

    why = StackServer.missing()
    if why is not None:
        pytest.skip(why)
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_vector.py"), "--peer", "redis-stack", "--smoke",
                     "--out-dir", str(tmp_path)], cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "| filter | clients | Pion recall@10 |" in out.stdout and "ingest: Pion" in out.stdout
    result = json.loads((tmp_path / "vector_peer_smoke.json").read_text())
    assert {(r["filter"], r["clients"]) for r in result["rows"]} == {
        (f, c) for f in ("none", "TAG 10%", "TAG 1%", "NUMERIC 10%", "NUMERIC 1%") for c in (1, 8)}
    for row in result["rows"]:  # both answer every query in full, with the exact answer at this size
        assert row["pion_all_k"] == 1.0 and row["redis-stack_all_k"] == 1.0
        assert row["pion_recall"] >= 0.95 and row["redis-stack_recall"] >= 0.95
    # each server's CPU per query is read from /proc: Pion's (a Python process) is never zero
    assert sum(row["pion_cpu_us"] for row in result["rows"]) > 0
    assert all(row["redis-stack_cpu_us"] >= 0 for row in result["rows"])
    assert (tmp_path / "vector_peer_smoke.png").stat().st_size > 0


def test_bench_vector_ab_smoke(tmp_path):
    """``bench_vector_ab.py`` at a tiny size, this tree against itself: both servers answer every
    round and the line with both QPS and CPU figures comes out."""
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_vector_ab.py"), "--other-src", str(ROOT / "src"),
                     "--n", "500", "--dim", "16", "--queries", "40", "--rounds", "2", "--clients", "1",
                     "--filters", "*"], cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    line = next(row for row in out.stdout.splitlines() if "clients 1:" in row)
    assert "this " in line and "other " in line and "CPU" in line and "this / other" in line
