"""``pion mcp``'s stdio transport: the SDK's own message loop over pipes read and written on the
event loop, not in a thread per line.

Why: the SDK's ``stdio_server`` wraps stdin and stdout in ``anyio.wrap_file``, so each line read
and each reply's write and flush is a hand-off to a worker thread and back: three thread hops
per tool call on top of the tool's own. On a busy 2-core machine a hop waits for a core, and a
``kv_get`` (one redis-py GET, 0.04 ms) took 10 ms at p50 over stdio against 0.35 ms through
the SDK in memory (docs/mcp.md). Here the pipes are non-blocking and awaited with
``anyio.wait_readable``/``wait_writable`` (the loop's own readiness callbacks), and handed to
the SDK's ``stdio_server`` as the streams it accepts, so the JSON-RPC parsing, the session and
the tools are the SDK's, unchanged.

As the SDK does, the process's fd 0 and 1 are pointed elsewhere while serving (0 at the null
device, 1 at stderr) so a stray print or a child process cannot corrupt the wire; the wire is
a private copy of each, and both are put back at the end. Where the SDK has no such entry
point (an unknown layout), ``run`` falls back to ``server.run("stdio")``.
"""

from __future__ import annotations

import os
from typing import Any

import anyio

_CHUNK = 1 << 16


class PipeLines:
    """Lines of UTF-8 text from a non-blocking pipe, as ``async for line in stdin`` reads them."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.eof = False
        os.set_blocking(fd, False)

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                return line.decode("utf-8", "replace")
            if self.eof:
                if self.buf:
                    line = bytes(self.buf)
                    self.buf.clear()
                    return line.decode("utf-8", "replace")
                raise StopAsyncIteration
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            if chunk:
                self.buf += chunk
            else:
                self.eof = True


class PipeWriter:
    """``await write(text)`` / ``await flush()`` on a non-blocking pipe: each write goes out whole
    before it returns (a full pipe waits on the loop, not in a thread), so flush has nothing left."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)

    async def write(self, text: str) -> int:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                n = os.write(self.fd, data)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                continue
            data = data[n:]
        return len(text)

    async def flush(self) -> None:
        return None


def _lowlevel(server: Any) -> Any:
    """The SDK's low-level server inside the high-level one (2.x ``MCPServer``, 1.x ``FastMCP``)."""
    for name in ("_lowlevel_server", "_mcp_server"):
        low = getattr(server, name, None)
        if low is not None and hasattr(low, "run") and hasattr(low, "create_initialization_options"):
            return low
    return None


async def _serve(low: Any, rfd: int, wfd: int) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server(stdin=PipeLines(rfd), stdout=PipeWriter(wfd)) as (read_stream, write_stream):  # type: ignore[arg-type]
        await low.run(read_stream, write_stream, low.create_initialization_options())


def run(server: Any) -> None:
    """Serve ``server`` over this process's stdin and stdout until the client closes stdin."""
    low = _lowlevel(server)
    if low is None:
        server.run(transport="stdio")
        return
    rfd, wfd = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        anyio.run(_serve, low, rfd, wfd)
    finally:
        for fd in (rfd, wfd):  # the pipes' open files are shared with fd 0 and 1: blocking again
            try:
                os.set_blocking(fd, True)
            except OSError:
                pass
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (devnull, saved_in, saved_out, rfd, wfd):
            try:
                os.close(fd)
            except OSError:
                pass
