"""MCP tool latency at ``--n`` memories, broken down, and (``--baseline-src``) before/after in one run.

One ``pion-server`` (``--provider``: hash embeddings by default, so the model is out of the
numbers; ``minilm`` for the packaged model) filled with ``--n`` memories (``AI.MEMORY ADDMANY``),
then, interleaved round by round so the machine's load weighs on all alike:

- ``pion mcp`` over stdio from this tree (and, with ``--baseline-src DIR``, from another tree's
  ``src/``), reached by the official SDK's stdio client: ``kv_get`` (the MCP round trip with one
  GET) and ``search_long_term_memory`` (semantic, limit 5; every query text distinct, so no
  embedding cache helps; and once more with one text asked again and again, which the
  server's embedding cache answers);
- the same two tools through the SDK in memory (no pipes: the SDK's own share);
- ``LongTermMemory.search`` called directly (redis-py, the server's RECALL with the query's
  embedding: no MCP at all) and one redis-py GET.

With ``--provider minilm`` it also times the packaged model embedding one short query
in this process (one torch thread), the floor the model sets under any search by meaning.
Prints the load average and a table of p50/p99 in milliseconds and a JSON line.

    python benchmarks/bench_mcp_latency.py                          # 10,000 memories, hash
    python benchmarks/bench_mcp_latency.py --baseline-src ../main/src
    python benchmarks/bench_mcp_latency.py --smoke      # CI-sized
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.support.servers import ProcessServer  # noqa: E402

WORDS = ["coffee", "meeting", "project", "deadline", "garden", "holiday", "invoice", "recipe", "concert", "train"]


def fill(port: int, n: int) -> None:
    r = redis.Redis(port=port, protocol=3, socket_timeout=900)
    for lo in range(0, n, 250):
        args = ["AI.MEMORY", "ADDMANY"]
        for i in range(lo, min(n, lo + 250)):
            a, b, c = WORDS[i % 10], WORDS[(i // 10) % 10], WORDS[(i // 100) % 10]
            args += [f"s{i % 200:03d}", "semantic", f"note {i}: the {a} and the {b} after the {c}",
                     json.dumps({"id": f"filler-{i}"})]
        r.execute_command(*args)


def summary(times: list[float]) -> dict:
    times = sorted(times)
    return {"p50_ms": round(statistics.median(times), 2), "p99_ms": round(times[int(0.99 * (len(times) - 1))], 2),
            "calls": len(times)}


async def main_async(args, port: int) -> dict:
    from mcp.client.stdio import stdio_client

    from mcp import ClientSession, StdioServerParameters
    from pion.client.mcp.server import Backend, build

    url = f"pion://127.0.0.1:{port}"
    trees = {"this tree": str(ROOT / "src")}
    if args.baseline_src:
        trees["baseline tree"] = str(Path(args.baseline_src).resolve())
    stack = []
    sessions = {}
    try:
        for label, src in trees.items():
            params = StdioServerParameters(command=sys.executable, args=["-m", "pion.cli.main", "mcp", "--url", url],
                                           env=dict(os.environ, PYTHONPATH=src))
            cm = stdio_client(params)
            read, write = await cm.__aenter__()
            stack.append(cm)
            session = ClientSession(read, write)
            await session.__aenter__()
            stack.append(session)
            await session.initialize()
            sessions[f"stdio, {label}"] = session
        try:
            from mcp import Client

            memory = Client(build(url))
            await memory.__aenter__()
            stack.append(memory)
            sessions["SDK in memory (no pipes)"] = memory
        except ImportError:  # the 1.x SDK has no in-process Client
            pass
        backend = Backend(url)
        times: dict[str, list[float]] = {}
        counter = 0

        def phrase() -> str:
            nonlocal counter
            counter += 1
            return f"what did I note about the {WORDS[counter % 10]} and the {WORDS[(counter // 3) % 10]} {counter}"

        async def one(label: str, fn) -> None:
            t0 = time.perf_counter()
            await fn()
            times.setdefault(label, []).append((time.perf_counter() - t0) * 1000)

        for session in sessions.values():  # warm: the first call loads what it loads
            await session.call_tool("kv_get", {"key": "k"})
            await session.call_tool("search_long_term_memory", {"text": phrase(), "limit": 5})
        backend.longterm.search(phrase(), limit=5)
        for r in range(args.rounds):
            order = list(sessions.items())
            order = order[r % len(order):] + order[: r % len(order)]
            for _ in range(args.calls // args.rounds):
                for name, session in order:
                    await one(f"kv_get, {name}", lambda s=session: s.call_tool("kv_get", {"key": "k"}))
                    await one(f"search_long_term_memory, {name}",
                              lambda s=session: s.call_tool("search_long_term_memory", {"text": phrase(), "limit": 5}))
                    await one(f"search_long_term_memory, one repeated text, {name}",
                              lambda s=session: s.call_tool("search_long_term_memory",
                                                            {"text": "what did I note about the garden", "limit": 5}))

                async def direct_search() -> None:
                    backend.longterm.search(phrase(), limit=5)

                async def direct_get() -> None:
                    backend.redis.get("k")

                await one("LongTermMemory.search direct (no MCP)", direct_search)
                await one("redis-py GET direct (no MCP)", direct_get)
        return {label: summary(ts) for label, ts in times.items()}
    finally:
        for cm in reversed(stack):
            await cm.__aexit__(None, None, None)


def model_floor(calls: int) -> dict | None:
    """The packaged MiniLM embedding one short query, in this process, one torch thread."""
    try:
        import torch

        from pion.embedding.worker import load_minilm
    except ImportError:
        return None
    torch.set_num_threads(1)
    model = load_minilm()
    model.embed(["warm up"])
    times = []
    for j in range(calls):
        t0 = time.perf_counter()
        model.embed([f"what did I note about the coffee and the garden {j}"])
        times.append((time.perf_counter() - t0) * 1000)
    return summary(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--calls", type=int, default=100, help="timed calls per tool and path")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--provider", default="hash", choices=["hash", "minilm"])
    ap.add_argument("--baseline-src", default="", metavar="DIR", help="also a `pion mcp` from another tree's src/")
    ap.add_argument("--smoke", action="store_true", help="CI size: 300 memories, 10 calls in 2 rounds")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.calls, args.rounds = 300, 10, 2
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        server = ProcessServer(Path(tmp), "--embed-provider", args.provider, "--appendfsync", "no").start(timeout=120)
        try:
            t0 = time.perf_counter()
            fill(server.port, args.n)
            filled = time.perf_counter() - t0
            rows = asyncio.run(main_async(args, server.port))
        finally:
            server.stop()
    floor = model_floor(args.calls) if args.provider == "minilm" else None
    if floor is not None:
        rows["MiniLM embedding one query in-process (model alone)"] = floor
    load_after = os.getloadavg()
    out = {"n": args.n, "provider": args.provider, "fill_seconds": round(filled, 1),
           "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
           "rows": rows}
    print(json.dumps(out))
    print(f"\nMCP latency at {args.n} memories ({args.provider} embeddings); load average {load_before[0]:.2f} -> "
          f"{load_after[0]:.2f}\n")
    print("| path | p50 ms | p99 ms |\n|---|---|---|")
    for label, row in rows.items():
        print(f"| {label} | {row['p50_ms']} | {row['p99_ms']} |")


if __name__ == "__main__":
    main()
