"""benchmarks/bench_vector_restart.py runs end to end at its CI size (--smoke): the index is
built, saved, and the restart that loads the saved graph restores every vector, builds none, and
answers what it answered before."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support import procs

ROOT = Path(__file__).resolve().parents[2]


def test_bench_vector_restart_smoke(tmp_path):
    out_file = tmp_path / "restart.json"
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_vector_restart.py"), "--smoke", "--out",
                     str(out_file)], cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "| restart | port open s |" in out.stdout
    result = json.loads(out_file.read_text())
    load, rebuild = result["load"], result["rebuild"]
    assert load["graphs_loaded"] == 1 and load["vectors_restored"] == result["n"] and load["vectors_built"] == 0
    assert rebuild["graphs_loaded"] == 0 and rebuild["vectors_built"] == result["n"]
    assert load["same_ids"] == 1.0
