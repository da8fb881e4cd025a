"""benchmarks/bench_vsets.py runs end to end in its CI-sized mode and reports every case."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support import procs

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
