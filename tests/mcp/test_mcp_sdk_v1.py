"""``pion mcp`` on the MCP Python SDK 1.x (``mcp.server.fastmcp.FastMCP``: the version
redis/agent-memory-server and mem0 pin), reached by the 1.x SDK's own client over stdio and
streamable HTTP.

The shared environment has mcp 2.x; the 1.x SDK lives in a directory of its own put first on
PYTHONPATH (``pip install --target .venv/mcp1 'mcp>=1.30,<2'``: ``make test`` does it). The test runs
the client in a subprocess with that path, so both sides import 1.x. Without that directory
(or ``PION_TEST_MCP1_PATH``) it is skipped and says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp.conftest import http_server

ROOT = Path(__file__).resolve().parents[2]
MCP1 = Path(os.environ.get("PION_TEST_MCP1_PATH") or Path(sys.prefix) / "mcp1")

CLIENT = r'''
import asyncio, json, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

async def exercise(session):
    await session.initialize()
    names = sorted(t.name for t in (await session.list_tools()).tools)
    made = await session.call_tool("create_entities", {"entities": [
        {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]})
    found = await session.call_tool("search_nodes", {"query": "who programmed first"})
    memories = await session.call_tool("create_long_term_memories", {"memories": [{"text": "likes tea"}]})
    searched = await session.call_tool("search_long_term_memory", {"text": "tea"})
    bad = await session.call_tool("add_observations", {"observations": [{"entityName": "Nobody", "contents": ["x"]}]})
    return {"tools": names, "made": made.structuredContent, "made_text": made.content[0].text,
            "found": found.structuredContent, "memories": memories.structuredContent,
            "searched": searched.structuredContent, "bad": [bad.isError, bad.content[0].text]}

async def main(kind, target):
    if kind == "stdio":
        params = StdioServerParameters(command=sys.executable, args=["-m", "pion.cli.main", "mcp", "--url", target],
                                       env=dict(os.environ))
        async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
            return await exercise(session)
    async with streamablehttp_client(target) as (r, w, _), ClientSession(r, w) as session:
        return await exercise(session)

import importlib.metadata
from pion.client.mcp.sdk import _server_class
out = asyncio.run(main(sys.argv[1], sys.argv[2]))
out["sdk"] = importlib.metadata.version("mcp")
out["major"] = _server_class()[1]
print(json.dumps(out))
'''

pytestmark = pytest.mark.skipif(not (MCP1 / "mcp" / "server" / "fastmcp").is_dir(),
                                reason=f"no MCP SDK 1.x at {MCP1} (pip install --target .venv/mcp1 'mcp>=1.30,<2')")


def v1_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(MCP1), str(ROOT / "src"), str(ROOT)]))


def run_client(kind: str, target: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CLIENT, kind, target], capture_output=True, text=True,
                          timeout=240, env=v1_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(out: dict) -> None:
    assert out["sdk"].startswith("1.") and out["major"] == 1
    assert {"create_entities", "search_nodes", "search_long_term_memory", "memory_prompt",
            "compact_long_term_memories", "semantic_cache_get", "kv_get"} <= set(out["tools"])
    assert out["made"]["entities"][0]["name"] == "Ada" and json.loads(out["made_text"])[0]["name"] == "Ada"
    assert out["found"]["entities"][0]["name"] == "Ada"
    assert out["searched"]["memories"][0]["text"] == "likes tea"
    assert out["bad"][0] is True and "Entity with name Nobody not found" in out["bad"][1]


def test_stdio_on_sdk_1x(make_server):
    srv = make_server(embed_provider="hash")
    check(run_client("stdio", f"pion://127.0.0.1:{srv.port}"))


def test_streamable_http_on_sdk_1x(make_server):
    srv = make_server(embed_provider="hash")
    with http_server(f"pion://127.0.0.1:{srv.port}", env={"PYTHONPATH": v1_env()["PYTHONPATH"]}) as endpoint:
        check(run_client("http", endpoint))
