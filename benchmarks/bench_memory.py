"""Agent memory over MCP: recall@5 on the in-repo QA set, and tool-call latency at 10k memories.

One ``pion-server`` with the packaged all-MiniLM-L6-v2 (no API key, nothing downloaded) and one
``pion mcp`` started by the official MCP SDK's stdio client, as an MCP client application
would. Everything below goes through ``session.call_tool``.

1. QA (``benchmarks/data/memory_qa.py``: 200 facts about 40 people over 20 sessions, 100
   questions that paraphrase them, half naming the person by a nickname): the facts go in as
   long-term memories (``create_long_term_memories``) and as a knowledge graph (one entity per
   person, the facts as its observations: ``create_entities``). Per question, recall@5 is
   whether the fact is among ``search_long_term_memory``'s first 5 (semantic and hybrid
   modes), and whether its person is among ``search_nodes``' first 5 entities. The baselines
   run on the same graph (``read_graph``): the official memory server's ``searchNodes``
   (case-insensitive substring of the whole query in a name, type or observation) and, more
   generous than the official, every entity ranked by how many of the query's words (4+
   letters) occur in it.
2. Latency: memories are added (``AI.MEMORY ADDMANY`` in batches, for speed) up to ``--n``
   (default 10,000) in all; then ``--calls`` calls of each tool are timed from the client
   (p50, p99, mean).

Prints the load average (the machine is shared) and writes ``benchmarks/results/memory_mcp.json``.

    python benchmarks/bench_memory.py                 # QA + 10k latency
    python benchmarks/bench_memory.py --smoke         # CI-sized (hash embeddings, 500 memories)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
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

from pion.client.mcp.graph import substring_search  # noqa: E402

QA = ROOT / "benchmarks" / "data" / "memory_qa.json"
WORDS = ["coffee", "meeting", "project", "deadline", "garden", "holiday", "invoice", "recipe", "concert", "train",
         "budget", "doctor", "birthday", "laptop", "report", "weekend", "museum", "bicycle", "parcel", "lesson"]


async def call(session, name: str, arguments: dict | None = None):
    result = await session.call_tool(name, arguments or {})
    if result.is_error:
        raise RuntimeError(f"{name}: {result.content[0].text}")
    return result.structured_content


def word_overlap(graph: dict, query: str, k: int) -> list[str]:
    words = {w for w in re.findall(r"[a-z0-9']+", query.lower()) if len(w) >= 4}
    scored = []
    for entity in graph["entities"]:
        text = " ".join([entity["name"], entity["entityType"], *entity["observations"]]).lower()
        score = sum(1 for w in words if w in text)
        if score:
            scored.append((-score, entity["name"]))
    return [name for _, name in sorted(scored)[:k]]


async def qa(session, data: dict, k: int = 5) -> dict:
    facts, questions = data["facts"], data["questions"]
    writes: dict[str, float] = {}
    t0 = time.perf_counter()
    ids = (await call(session, "create_long_term_memories", {"memories": [
        {"text": f["text"], "session_id": f["session"], "topics": ["qa"]} for f in facts]}))["ids"]
    writes[f"create_long_term_memories ({len(facts)} facts)"] = round(time.perf_counter() - t0, 3)
    by_person: dict[str, list[str]] = {}
    for f in facts:
        by_person.setdefault(f["person"], []).append(f["text"])
    t0 = time.perf_counter()
    await call(session, "create_entities", {"entities": [
        {"name": p, "entityType": "person", "observations": obs} for p, obs in by_person.items()]})
    writes[f"create_entities ({len(by_person)} entities, {len(facts)} observations)"] = round(
        time.perf_counter() - t0, 3)
    graph = await call(session, "read_graph")
    found = {"search_long_term_memory (semantic)": 0, "search_long_term_memory (hybrid)": 0,
             "search_nodes (Pion, semantic)": 0, "official substring searchNodes": 0,
             "word-overlap baseline (4+ letter words)": 0}
    nick = {key: 0 for key in found}
    misses = []
    for q in questions:
        fact_id = ids[q["answer"]]
        got = {}
        for mode in ("semantic", "hybrid"):
            res = await call(session, "search_long_term_memory", {"text": q["question"], "limit": k,
                                                                   "search_mode": mode})
            got[f"search_long_term_memory ({mode})"] = fact_id in [m["id"] for m in res["memories"]]
        nodes = await call(session, "search_nodes", {"query": q["question"], "limit": k})
        got["search_nodes (Pion, semantic)"] = q["person"] in [e["name"] for e in nodes["entities"]][:k]
        official = substring_search(graph, q["question"])
        got["official substring searchNodes"] = q["person"] in [e["name"] for e in official["entities"]][:k]
        got["word-overlap baseline (4+ letter words)"] = q["person"] in word_overlap(graph, q["question"], k)
        for key, ok in got.items():
            found[key] += ok
            nick[key] += ok and q["nickname"]
        if not got["search_long_term_memory (semantic)"]:
            misses.append(q["question"])
    n, n_nick = len(questions), sum(q["nickname"] for q in questions)
    return {"recall_at_5": {key: round(v / n, 3) for key, v in found.items()},
            "recall_at_5_nickname_questions": {key: round(v / n_nick, 3) for key, v in nick.items()},
            "questions": n, "nickname_questions": n_nick, "facts": len(facts), "semantic_misses": misses[:10],
            "write_seconds": writes}


def fill(port: int, total: int, rng: random.Random, batch: int = 250) -> float:
    r = redis.Redis(port=port, protocol=3, socket_timeout=900)
    have = int(dict(r.execute_command("AI.MEMORY", "STATS")).get(b"memories", 0))
    start, i = time.perf_counter(), 0
    while have < total:
        args = ["AI.MEMORY", "ADDMANY"]
        for _ in range(min(batch, total - have)):
            a, b, c = rng.sample(WORDS, 3)
            args += [f"s{i % 200:03d}", "semantic", f"note {i}: the {a} and the {b} after the {c} ({rng.random():.6f})",
                     json.dumps({"id": f"filler-{i}"})]
            i += 1
        have += len(r.execute_command(*args))
        print(f"  filled {have}/{total} memories ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return time.perf_counter() - start


async def latency(session, calls: int, rng: random.Random) -> dict:
    async def timed(name: str, make) -> dict:
        times = []
        for j in range(calls):
            args = make(j)
            t0 = time.perf_counter()
            await call(session, name, args)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        return {"p50_ms": round(statistics.median(times), 2), "p99_ms": round(times[int(0.99 * (len(times) - 1))], 2),
                "mean_ms": round(statistics.fmean(times), 2), "calls": calls}

    def phrase(j: int) -> str:
        return f"what did I note about the {rng.choice(WORDS)} and the {rng.choice(WORDS)} {j}"

    out = {}
    out["search_long_term_memory"] = await timed("search_long_term_memory", lambda j: {"text": phrase(j), "limit": 5})
    out["search_long_term_memory (hybrid)"] = await timed(
        "search_long_term_memory", lambda j: {"text": phrase(j), "limit": 5, "search_mode": "hybrid"})
    out["search_nodes"] = await timed("search_nodes", lambda j: {"query": phrase(j), "limit": 5})
    out["create_long_term_memories (1)"] = await timed(
        "create_long_term_memories", lambda j: {"memories": [{"text": f"latency probe {j}: {phrase(j)}"}]})
    out["memory_prompt"] = await timed("memory_prompt", lambda j: {"query": phrase(j), "limit": 5})
    out["get_working_memory"] = await timed("get_working_memory", lambda j: {"session_id": f"w{j % 10}"})
    out["kv_get"] = await timed("kv_get", lambda j: {"key": f"k{j}"})
    return out


async def run_mcp(url: str, work) -> dict:
    from mcp.client.stdio import stdio_client

    from mcp import ClientSession, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "pion.cli.main", "mcp", "--url", url],
                                   env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await work(session)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="memories for the latency run (default 10,000)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per tool (default 200)")
    parser.add_argument("--smoke", action="store_true", help="CI-sized: hash embeddings, 500 memories, 20 calls")
    parser.add_argument("--provider", default=None, choices=["hash", "minilm"],
                        help="embeddings (default: minilm; hash with --smoke): hash isolates what is not the model")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.smoke:
        args.n, args.calls = 500, 20
    provider = args.provider or ("hash" if args.smoke else "minilm")
    out = Path(args.out or ROOT / "benchmarks" / "results" / ("memory_mcp_smoke.json" if args.smoke else "memory_mcp.json"))
    rng = random.Random(17)
    data = json.loads(QA.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        server = ProcessServer(Path(tmp), "--embed-provider", provider).start(timeout=120)
        url = f"pion://127.0.0.1:{server.port}"
        try:
            t0 = time.perf_counter()
            result = {"qa": asyncio.run(run_mcp(url, lambda s: qa(s, data)))}
            result["qa"]["seconds"] = round(time.perf_counter() - t0, 1)
            print(json.dumps(result["qa"]["recall_at_5"], indent=1), result["qa"]["write_seconds"], flush=True)
            result["fill_seconds"] = round(fill(server.port, args.n, rng), 1)
            result["memories"] = args.n
            result["latency"] = asyncio.run(run_mcp(url, lambda s: latency(s, args.calls, rng)))
        finally:
            server.stop()
    load = os.getloadavg()
    result.update(provider=provider, load=[round(x, 2) for x in load], cpus=os.cpu_count())
    print(f"\nembeddings: {provider}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    print(f"\nrecall@5 on {result['qa']['questions']} questions over {result['qa']['facts']} facts "
          f"({result['qa']['nickname_questions']} by nickname):\n")
    print("| search | recall@5 | on nickname questions |\n|---|---|---|")
    for key, value in result["qa"]["recall_at_5"].items():
        print(f"| {key} | {value:.2f} | {result['qa']['recall_at_5_nickname_questions'][key]:.2f} |")
    print(f"\ntool-call latency at {args.n} memories ({args.calls} calls each, from the MCP client over stdio):\n")
    print("| tool | p50 ms | p99 ms | mean ms |\n|---|---|---|---|")
    for key, value in result["latency"].items():
        print(f"| {key} | {value['p50_ms']} | {value['p99_ms']} | {value['mean_ms']} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
