"""The knowledge graph's create_entities costs what its own entities cost: the commands it sends
do not grow with the graph (it used to read every entity name on each call)."""

from __future__ import annotations

import redis

from pion.client.agent_memory import PionMemory
from pion.client.mcp.graph import KnowledgeGraph


def _calls(r: redis.Redis) -> dict[str, int]:
    return {name: int(stats["calls"]) for name, stats in r.info("commandstats").items()}


def _people(tag: str, n: int) -> list[dict]:
    return [{"name": f"{tag}{i}", "entityType": "person", "observations": [f"{tag}{i} likes tea"]} for i in range(n)]


def test_create_entities_sends_the_same_commands_into_a_small_and_a_large_graph(make_server):
    srv = make_server(embed_provider="hash")
    r = redis.Redis(port=srv.port, socket_timeout=60)
    kg = KnowledgeGraph(PionMemory(r))
    costs = []
    for size in (10, 1500):
        kg.create_entities(_people(f"bulk{size}-", size))
        before = _calls(r)
        created = kg.create_entities([*_people(f"new{size}-", 3), {"name": f"bulk{size}-0", "entityType": "x"}])
        after = _calls(r)
        assert [e["name"] for e in created] == [f"new{size}-{i}" for i in range(3)]  # the existing one skipped
        costs.append({name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)})
    assert costs[0] == costs[1]
    assert "cmdstat_zrange" not in costs[1]
    assert len(kg.read_graph()["entities"]) == 10 + 1500 + 6
