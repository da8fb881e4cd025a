"""benchmarks/bench_vsets.py and bench_vset_kernel.py run end to end in their CI-sized modes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.support import procs

from pion.vector.vset import kernel

ROOT = Path(__file__).resolve().parents[2]


def test_bench_vsets_smoke_reports_recall_qps_and_the_canary():
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_vsets.py"), "--smoke"], cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    summary = json.loads(next(line for line in out.stdout.splitlines() if line.startswith('{"n"')))
    cases = {row["case"] for row in summary["rows"]}
    assert {"ingest", "VSIM EF default(100)", "VSIM EF 10", "VSIM TRUTH (server linear scan)", "memory"} <= cases
    filtered = [row for row in summary["rows"] if row["case"].startswith("VSIM FILTER")]
    assert len(filtered) == 2 and all(row["returned_of_10"] > 0 for row in filtered)
    assert all(0 < row["recall@10"] <= 1 for row in summary["rows"] if "recall@10" in row)
    assert "| VSIM EF default(100) | 1 |" in out.stdout


def test_bench_vset_kernel_smoke_compares_the_paths_and_usearch():
    """benchmarks/bench_vset_kernel.py: both Pion paths build the same graph, every system reports
    rates, ratios to usearch and recall, over RESP too (with servers on the path they say)."""
    pytest.importorskip("usearch")
    if not kernel.available():
        pytest.skip("the compiled vector-set kernel is not built")
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_vset_kernel.py"), "--smoke"], cwd=ROOT,
                    timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    summary = json.loads(next(line for line in out.stdout.splitlines() if line.startswith('{"n"')))
    assert summary["same_graph_pure_and_compiled"] is True
    systems = {(row["phase"], row["system"]) for row in summary["rows"]}
    assert {("engine", "pion pure"), ("engine", "pion compiled"), ("engine", "usearch"), ("resp", "pion-server pure"),
            ("resp", "pion-server compiled"), ("resp", "pion-server compiled NOTHREAD")} <= systems
    for row in summary["rows"]:
        assert 0 < row["recall@10"] <= 1 and row["query_per_s"] > 0 and row["query_vs_usearch"] > 0
    pion = [row for row in summary["rows"] if row["system"].startswith("pion")]
    assert len({row["recall@10"] for row in pion}) == 1  # a set this small is searched exactly: all answer alike
