"""The official MCP memory server's knowledge graph, kept in Pion, with semantic ``search_nodes``.

Same entities (``name``, ``entityType``, ``observations``), relations (``from``, ``to``,
``relationType``) and operation semantics as modelcontextprotocol/servers ``src/memory``
(``KnowledgeGraphManager``): creating an existing entity or relation is skipped and only the new
ones are returned; adding observations to a missing entity fails with ``Entity with name X not
found``, and so does a relation with an end that is not an entity; deleting an entity deletes its relations. The graph lives in the caller's database (its
tenant): an entity is a hash ``__pion:kg:e:<name>``, the order of creation is the sorted set
``__pion:kg:entities``, relations are the sorted set ``__pion:kg:relations``.

What differs is ``search_nodes``: the official one keeps entities whose name, type or some
observation contains the query as a substring (so a question, or "Ben" for "Benjamin", finds
nothing); here every entity (``"<name> (<type>)"``) and every observation (``"<name>: <text>"``)
is an AI.MEMORY of session ``__kg__`` with an id derived from its text, and the query is ranked
against them by meaning (and BM25 with ``alpha``); entities come back best first.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pion.client.agent_memory import PionMemory

SESSION = "__kg__"
ENTITY = b"__pion:kg:e:"
ORDER = b"__pion:kg:entities"
RELATIONS = b"__pion:kg:relations"
SEQ = b"__pion:kg:seq"


class GraphError(ValueError):
    """A request the official server also refuses (the text is its text)."""


def _id(*parts: str) -> str:
    return "kg-" + hashlib.sha1("\0".join(parts).encode()).hexdigest()[:32]


def _entity_text(name: str, entity_type: str) -> str:
    return f"{name} ({entity_type})"


def _relation_member(relation: dict[str, str]) -> bytes:
    return json.dumps([relation["from"], relation["to"], relation["relationType"]], ensure_ascii=False).encode()


def _relation(member: bytes) -> dict[str, str]:
    source, target, kind = json.loads(member)
    return {"from": source, "to": target, "relationType": kind}


class KnowledgeGraph:
    def __init__(self, memory: PionMemory) -> None:
        self.memory = memory
        self.redis = memory.redis

    # -- reading ------------------------------------------------------------------------------

    def _entities(self, names: list[str]) -> list[dict[str, Any]]:
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(ENTITY + name.encode())
        out = []
        for name, fields in zip(names, pipe.execute(), strict=True):
            if fields:
                out.append({"name": name, "entityType": fields[b"entityType"].decode(),
                            "observations": json.loads(fields[b"observations"])})
        return out

    def _names(self) -> list[str]:
        return [n.decode() for n in self.redis.zrange(ORDER, 0, -1)]

    def _relations(self) -> list[dict[str, str]]:
        return [_relation(m) for m in self.redis.zrange(RELATIONS, 0, -1)]

    def read_graph(self) -> dict[str, Any]:
        return {"entities": self._entities(self._names()), "relations": self._relations()}

    def _subgraph(self, entities: list[dict[str, Any]]) -> dict[str, Any]:
        """The entities and every relation with at least one end among them (as the official
        server answers since it stopped dropping a node's links to nodes not asked for)."""
        return {"entities": entities, "relations": touching(self._relations(), {e["name"] for e in entities})}

    def open_nodes(self, names: list[str]) -> dict[str, Any]:
        wanted = set(names)
        return self._subgraph(self._entities([n for n in self._names() if n in wanted]))

    def search_nodes(self, query: str, limit: int = 10, alpha: float = 0.3) -> dict[str, Any]:
        """The ``limit`` entities whose name, type or observations mean the closest to ``query``,
        best first, and the relations among them."""
        hits = self.memory.recall(SESSION, query, k=max(4 * limit, 20), alpha=alpha, recency=0.0)
        ranked: list[str] = []
        for hit in hits:
            name = hit["meta"].get("entity")
            if name is not None and name not in ranked:
                ranked.append(name)
            if len(ranked) == limit:
                break
        return self._subgraph(self._entities(ranked))

    # -- writing ------------------------------------------------------------------------------

    def _known(self, names: list[str]) -> set[str]:
        """Which of ``names`` are entities already: one ZMSCORE of just those, so a call costs
        what its own entities cost, not the size of the whole graph."""
        if not names:
            return set()
        scores = self.redis.execute_command("ZMSCORE", ORDER, *names)
        return {name for name, score in zip(names, scores, strict=True) if score is not None}

    def create_entities(self, entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
        existing = self._known(list(dict.fromkeys(e["name"] for e in entities)))
        new, seen = [], set()
        for entity in entities:
            if entity["name"] not in existing and entity["name"] not in seen:
                seen.add(entity["name"])
                new.append({"name": entity["name"], "entityType": entity["entityType"],
                            "observations": list(dict.fromkeys(entity.get("observations") or []))})
        items = []
        for entity in new:
            items.append(self._entity_memory(entity))
            items += [self._observation_memory(entity["name"], o) for o in entity["observations"]]
        self.memory.add_many(items)  # embeddings first: a failure leaves the graph unchanged
        pipe = self.redis.pipeline(transaction=True)
        for entity in new:
            pipe.hset(ENTITY + entity["name"].encode(), mapping={
                "entityType": entity["entityType"], "observations": json.dumps(entity["observations"])})
            pipe.incr(SEQ)
        seqs = pipe.execute()[1::2]
        if new:
            self.redis.zadd(ORDER, {e["name"]: seq for e, seq in zip(new, seqs, strict=True)})
        return new

    def _entity_memory(self, entity: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
        text = _entity_text(entity["name"], entity["entityType"])
        return (SESSION, "entity", text, {"entity": entity["name"], "id": _id("e", entity["name"])})

    def _observation_memory(self, name: str, observation: str) -> tuple[str, str, str, dict[str, Any]]:
        return (SESSION, "observation", f"{name}: {observation}", {"entity": name, "id": _id("o", name, observation)})

    def create_relations(self, relations: list[dict[str, str]]) -> list[dict[str, str]]:
        members = {_relation_member(r): r for r in relations}
        if not members:
            return []
        known = {e["name"] for e in self._entities(list({n for r in relations for n in (r["from"], r["to"])}))}
        for relation in relations:
            for end in (relation["from"], relation["to"]):
                if end not in known:
                    raise GraphError(f"Entity with name {end} not found")
        pipe = self.redis.pipeline(transaction=False)
        for member in members:
            pipe.zscore(RELATIONS, member)
        new = [(member, r) for (member, r), score in zip(members.items(), pipe.execute(), strict=True) if score is None]
        if new:
            start = self.redis.incrby(SEQ, len(new)) - len(new)
            self.redis.zadd(RELATIONS, {member: start + i + 1 for i, (member, _) in enumerate(new)})
        return [{"from": r["from"], "to": r["to"], "relationType": r["relationType"]} for _, r in new]

    def add_observations(self, observations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        entities = {e["name"]: e for e in self._entities([o["entityName"] for o in observations])}
        for request in observations:
            if request["entityName"] not in entities:
                raise GraphError(f"Entity with name {request['entityName']} not found")
        results, items = [], []
        for request in observations:
            entity = entities[request["entityName"]]
            added = [c for c in dict.fromkeys(request["contents"]) if c not in entity["observations"]]
            entity["observations"] += added
            items += [self._observation_memory(entity["name"], c) for c in added]
            results.append({"entityName": request["entityName"], "addedObservations": added})
        self.memory.add_many(items)
        self._save_observations(entities.values())
        return results

    def _save_observations(self, entities: Any) -> None:
        pipe = self.redis.pipeline(transaction=True)
        for entity in entities:
            pipe.hset(ENTITY + entity["name"].encode(), "observations", json.dumps(entity["observations"]))
        pipe.execute()

    def delete_entities(self, names: list[str]) -> tuple[list[str], list[str]]:
        """(deleted names, names not found); an entity's relations go with it."""
        gone = self._entities(names)
        ids = []
        for entity in gone:
            ids.append(_id("e", entity["name"]))
            ids += [_id("o", entity["name"], o) for o in entity["observations"]]
        self.memory.forget(*ids)
        doomed = set(names)
        stale = [_relation_member(r) for r in self._relations() if r["from"] in doomed or r["to"] in doomed]
        pipe = self.redis.pipeline(transaction=True)
        for name in names:
            pipe.delete(ENTITY + name.encode())
        if names:
            pipe.zrem(ORDER, *names)
        if stale:
            pipe.zrem(RELATIONS, *stale)
        pipe.execute()
        present = {e["name"] for e in gone}
        return [n for n in names if n in present], [n for n in names if n not in present]

    def delete_observations(self, deletions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        """(observations deleted, entities not found): a missing entity is skipped, as officially."""
        entities = {e["name"]: e for e in self._entities([d["entityName"] for d in deletions])}
        ids, missing = [], []
        for deletion in deletions:
            entity = entities.get(deletion["entityName"])
            if entity is None:
                missing.append(deletion["entityName"])
                continue
            doomed = set(deletion["observations"])
            ids += [_id("o", entity["name"], o) for o in entity["observations"] if o in doomed]
            entity["observations"] = [o for o in entity["observations"] if o not in doomed]
        self.memory.forget(*ids)
        self._save_observations(entities.values())
        return len(ids), missing

    def delete_relations(self, relations: list[dict[str, str]]) -> int:
        """How many stored relations were deleted."""
        if not relations:
            return 0
        return int(self.redis.zrem(RELATIONS, *{_relation_member(r) for r in relations}))


def touching(relations: list[dict[str, str]], names: set[str]) -> list[dict[str, str]]:
    return [r for r in relations if r["from"] in names or r["to"] in names]


def substring_search(graph: dict[str, Any], query: str) -> dict[str, Any]:
    """The official server's ``searchNodes``, verbatim in meaning: the baseline the QA benchmark
    compares against (case-insensitive substring of name, type or any observation)."""
    q = query.lower()
    entities = [e for e in graph["entities"] if q in e["name"].lower() or q in e["entityType"].lower()
                or any(q in o.lower() for o in e["observations"])]
    return {"entities": entities, "relations": touching(graph["relations"], {e["name"] for e in entities})}
