"""The in-repo memory QA set (benchmarks/data/memory_qa.json: 200 facts, 100 paraphrasing
questions) on the packaged all-MiniLM-L6-v2: recall@5 of the long-term memory search and of
``search_nodes`` against the official server's substring search on the same graph. The same
stores the MCP tools call (``pion mcp`` adds only the transport; benchmarks/bench_memory.py
measures through a real MCP session and publishes the numbers in docs/mcp.md)."""

from __future__ import annotations

import json
from pathlib import Path

from pion.client.agent_memory import PionMemory
from pion.client.mcp.graph import KnowledgeGraph, substring_search
from pion.client.mcp.longterm import LongTermMemory

QA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "memory_qa.json"


def test_recall_at_5_beats_the_official_substring_search(minilm):
    data = json.loads(QA.read_text())
    memory = PionMemory(minilm)
    longterm, graph = LongTermMemory(memory), KnowledgeGraph(memory)
    ids = longterm.create([{"text": f["text"], "session_id": f["session"]} for f in data["facts"]])
    people: dict[str, list[str]] = {}
    for fact in data["facts"]:
        people.setdefault(fact["person"], []).append(fact["text"])
    graph.create_entities([{"name": p, "entityType": "person", "observations": o} for p, o in people.items()])
    whole = graph.read_graph()
    memories = nodes = official = 0
    for q in data["questions"]:
        found = longterm.search(q["question"], limit=5)["memories"]
        memories += ids[q["answer"]] in [m["id"] for m in found]
        nodes += q["person"] in [e["name"] for e in graph.search_nodes(q["question"], 5)["entities"]]
        official += q["person"] in [e["name"] for e in substring_search(whole, q["question"])["entities"][:5]]
    n = len(data["questions"])
    assert n == 100 and len(data["facts"]) == 200
    assert memories / n >= 0.9 and nodes / n >= 0.9, (memories, nodes)
    assert official / n <= 0.6, official
