"""benchmarks/bench_mcp_latency.py runs end to end in its smallest mode and reports every path.

Marked slow (about 25 s on the shared 2-core machine: a server and two MCP processes start);
the transport it measures is covered in CI by test_mcp_stdio_pipes.py and every stdio test."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support import procs

pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_mcp_latency_smoke_reports_each_path():
    out = procs.run([sys.executable, str(ROOT / "benchmarks" / "bench_mcp_latency.py"), "--smoke"], cwd=ROOT,
                    timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    rows = summary["rows"]
    for label in ("kv_get, stdio, this tree", "search_long_term_memory, stdio, this tree",
                  "search_long_term_memory, one repeated text, stdio, this tree",
                  "LongTermMemory.search direct (no MCP)", "redis-py GET direct (no MCP)"):
        assert rows[label]["calls"] == 10 and rows[label]["p50_ms"] > 0, label
