"""Helpers for the MCP tests: ``pion mcp`` as a real subprocess, reached by the official SDK's own
client sessions over stdio or streamable HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.ai.conftest import minilm_server  # noqa: F401 - the packaged model's server, one per module
from tests.support.servers import free_port, wait_for_port


def mcp_argv(url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pion.cli.main", "mcp", "--url", url, *extra]


@contextlib.asynccontextmanager
async def stdio_session(url: str, env: dict[str, str] | None = None) -> AsyncIterator[Any]:
    from mcp.client.stdio import stdio_client

    from mcp import ClientSession, StdioServerParameters

    argv = mcp_argv(url)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ, **(env or {})))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.contextmanager
def http_server(url: str, env: dict[str, str] | None = None):
    """``pion mcp --transport streamable-http`` on a free loopback port; yields its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen(mcp_argv(url, "--transport", "streamable-http", "--port", str(port)),
                            env=dict(os.environ, **(env or {})), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, 60, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.asynccontextmanager
async def http_session(endpoint: str) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client

    from mcp import ClientSession

    async with streamable_http_client(endpoint) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


async def call(session: Any, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """A tool's result: the parsed structured content, else the text parsed as JSON when it is JSON."""
    result = await session.call_tool(name, arguments or {})
    if result.is_error:
        raise AssertionError(f"{name} failed: {result.content[0].text}")
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    text = result.content[0].text
    try:
        return json.loads(text)
    except ValueError:
        return text


async def call_error(session: Any, name: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(name, arguments)
    assert result.is_error, f"{name} should have failed"
    return result.content[0].text


@pytest.fixture
def pion_url(make_server):
    srv = make_server(embed_provider="hash")
    return f"pion://127.0.0.1:{srv.port}"


@pytest.fixture
def minilm(minilm_server):  # noqa: F811 - the fixture imported above
    from pion.client.agent_memory import connect

    client = connect(f"pion://127.0.0.1:{minilm_server.port}")
    yield client
    client.close()
