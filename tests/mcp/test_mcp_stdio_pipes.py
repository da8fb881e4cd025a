"""``pion.client.mcp.stdio``'s pipe streams: lines read on the event loop whatever the chunking,
the last line without its newline, EOF; a write larger than the pipe's buffer goes out whole
while the reader drains it (the loop waits, no thread)."""

from __future__ import annotations

import os

import anyio
import pytest

pytest.importorskip("mcp")

from pion.client.mcp.stdio import PipeLines, PipeWriter  # noqa: E402


def test_lines_come_whole_across_chunks_and_the_last_one_without_newline():
    async def main() -> list[str]:
        r, w = os.pipe()
        lines = PipeLines(r)
        got: list[str] = []

        async def feed() -> None:
            for part in (b'{"a": 1}\n{"b":', b' "\xc3\xa9"}\n', b"", b"tail"):
                if part:
                    os.write(w, part)
                await anyio.sleep(0.01)
            os.close(w)

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            async for line in lines:
                got.append(line)
        os.close(r)
        return got

    assert anyio.run(main) == ['{"a": 1}\n', '{"b": "é"}\n', "tail"]


def test_a_write_larger_than_the_pipe_goes_out_whole():
    big = "x" * (1 << 20) + "\n"

    async def main() -> int:
        r, w = os.pipe()
        writer, lines = PipeWriter(w), PipeLines(r)
        total = 0

        async def drain() -> None:
            nonlocal total
            async for line in lines:
                total += len(line)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            assert await writer.write(big) == len(big)
            await writer.flush()
            os.close(w)
        os.close(r)
        return total

    assert anyio.run(main) == len(big)
