"""``benchmarks/bench_rag.py --smoke`` runs end to end (tiny random model, inproc and pion backends)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.hf
def test_bench_rag_smoke_writes_its_table_json_and_plot(tmp_path):
    pytest.importorskip("transformers")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_rag.py"), "--smoke", "--out-dir",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "blend15" in out.stdout and "pion:none" in out.stdout and "load average" in out.stdout
    data = json.loads((tmp_path / "rag_smoke.json").read_text())
    configs = {(e["k"], e["config"]) for e in data["table"]}
    assert {(1, "text"), (1, "none"), (3, "first16"), (3, "blend15"), (3, "pion:blend15")} <= configs
    blend = next(e for e in data["table"] if e["config"] == "blend15")
    assert 0.14 < blend["recomputed"] < 0.2
    assert (tmp_path / "rag_smoke.png").stat().st_size > 0
