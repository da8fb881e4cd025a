"""``benchmarks/bench_rag.py --smoke`` and ``bench_rag_curve.py --smoke`` run end to end (tiny random
model; inproc and pion backends)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support import procs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.hf
def test_bench_rag_smoke_writes_its_table_json_and_plot(tmp_path):
    pytest.importorskip("transformers")
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_rag.py"), "--smoke", "--out-dir",
                          str(tmp_path)], cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "blend15" in out.stdout and "pion:none" in out.stdout and "load average" in out.stdout
    data = json.loads((tmp_path / "rag_smoke.json").read_text())
    configs = {(e["k"], e["config"]) for e in data["table"]}
    assert {(1, "text"), (1, "none"), (3, "first16"), (3, "blend15"), (3, "pion:blend15")} <= configs
    blend = next(e for e in data["table"] if e["config"] == "blend15")
    assert 0.14 < blend["recomputed"] < 0.2
    assert (tmp_path / "rag_smoke.png").stat().st_size > 0


@pytest.mark.hf
def test_bench_rag_curve_smoke_measures_every_selector_and_resumes(tmp_path):
    pytest.importorskip("transformers")
    target = tmp_path / "curve.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_rag_curve.py"), "--smoke", "--out", str(target)]
    out = procs.run(command, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    data = json.loads(target.read_text())
    plans = {e["plan"]: e for e in data["table"]}
    assert {"text", "none", "first16", "v1@5", "k1@15", "sink4+v1@30", "funnel@15"} <= set(plans)
    assert plans["text"]["kl"] == 0 and plans["none"]["recomputed"] == 0
    assert 0.14 < plans["funnel@15"]["recomputed"] < 0.2 and plans["funnel@15"]["n"] == 2
    assert target.with_suffix(".png").stat().st_size > 0
    again = procs.run(command + ["--resume"], cwd=ROOT, timeout=600)
    assert again.returncode == 0 and "q1 (" not in again.stdout  # nothing measured twice
    assert json.loads(target.read_text())["table"] == data["table"]
