"""The benchmark scripts run end to end in their CI-sized mode (`--smoke`: tiny models, two lengths)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import procs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.hf]


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("transformers")
    return procs.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *args], cwd=ROOT,
                          timeout=600)


def test_bench_ttft_smoke_writes_its_table_json_and_plot(tmp_path):
    out = run("bench_ttft.py", "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "ratios at N=68" in out.stdout and "auto@socket" in out.stdout
    assert "first hit in a fresh process at N=68" in out.stdout
    assert (tmp_path / "ttft_hf_smoke.png").stat().st_size > 0 and (tmp_path / "ttft_hf_smoke.json").exists()


def test_bench_fidelity_smoke_finds_auto_exact():
    out = run("bench_fidelity.py")
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "auto" in out.stdout and "FAIL" not in out.stdout


@pytest.mark.llama
def test_bench_ttft_llama_smoke_compares_pion_with_llama_disk_cache(tmp_path):
    """llama.cpp on the packaged GGUF: every warm path a hit with the cold first token."""
    import json

    out = run("bench_ttft.py", "--runtime", "llama", "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "disk/cross" in out.stdout and "pion/cross" in out.stdout and "FAIL" not in out.stdout
    rows = json.loads((tmp_path / "ttft_llama_smoke.json").read_text())["rows"]
    assert [r["n"] for r in rows] == [34, 68]
    assert all(r[p]["hits"] and r[p]["first"] == r["cold"]["first"] for r in rows
               for p in ("ram/same", "disk/cross", "pion/same", "pion/cross"))


def test_bench_moe_smoke_checks_tokens_and_writes_tables_and_plot(tmp_path):
    out = run("bench_moe.py", "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "| zipf 1.1+markov 64x24 top-8 | 25% |" in out.stdout and "| local | cold miss |" in out.stdout
    assert "| False |" not in out.stdout  # every paged run generated the in-memory model's tokens
    assert (tmp_path / "moe_hit_rate_smoke.png").stat().st_size > 0 and (tmp_path / "moe_bench_smoke.json").exists()
