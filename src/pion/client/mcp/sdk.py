"""The one place that knows which major version of the MCP Python SDK is installed.

mcp 2.x renamed ``FastMCP`` to ``MCPServer`` (``mcp.server.fastmcp`` raises on import there) and
moved the transport settings (host, port, path) from the constructor to ``run()``; mcp 1.x (1.6
and later, the version redis/agent-memory-server and mem0 pin) has ``FastMCP`` with them in the
constructor. ``make_server`` and ``run`` hide the difference, so the tools are written once and
``pion mcp`` runs on either (tests/mcp/test_mcp_sdk_v1.py runs it on a real 1.x install).
"""

from __future__ import annotations

from typing import Any

EXTRA_HINT = "pion mcp needs the MCP SDK: pip install 'pion[mcp]'"
TRANSPORTS = ("stdio", "streamable-http")


def _server_class() -> tuple[type, int]:
    try:
        from mcp.server import MCPServer  # mcp 2.x

        return MCPServer, 2
    except ImportError:
        pass
    try:
        from mcp.server.fastmcp import FastMCP  # mcp 1.x

        return FastMCP, 1
    except ImportError:
        raise ImportError(EXTRA_HINT) from None


def sdk_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcp")
    except PackageNotFoundError:
        return "unknown"


def make_server(name: str, instructions: str, *, host: str = "127.0.0.1", port: int = 8000,
                path: str = "/mcp") -> Any:
    """An MCP server object of the installed SDK; the transport settings go where that SDK reads them."""
    cls, major = _server_class()
    if major == 2:
        server = cls(name, instructions=instructions)
    else:
        server = cls(name, instructions=instructions, host=host, port=port, streamable_http_path=path)
    server._pion_http = {"host": host, "port": port, "streamable_http_path": path}
    server._pion_sdk_major = major
    return server


def run(server: Any, transport: str, *, token: str | None = None, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (streamable HTTP, through
    ``pion.client.mcp.http``: the Host/Origin allow-list always, the bearer ``token`` when given)."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got '{transport}'")
    if transport == "stdio":  # the SDK's session over pipes read on the loop (pion.client.mcp.stdio)
        from pion.client.mcp import stdio

        stdio.run(server)
        return
    from pion.client.mcp import http

    http.serve(server, token=token, extra_hosts=allowed_hosts)


def tool_error(message: str) -> Exception:
    """The SDK's ToolError (answered to the client as an error result, not a crash)."""
    try:
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        try:
            from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]
        except ImportError:
            return ValueError(message)
    return ToolError(message)


def tool_result(texts: list[str], structured: dict[str, Any]) -> Any:
    """A tool result with text blocks and structured content, as the official TypeScript servers answer."""
    from mcp.types import CallToolResult, TextContent

    blocks = [TextContent(type="text", text=text) for text in texts]
    # the wire name: mcp 1.x's field, an accepted alias of mcp 2.x's ``structured_content``
    return CallToolResult(content=blocks, structuredContent=structured)
