"""Long-term and working memory in the shape of redis/agent-memory-server's MCP tools, kept in Pion.

Long-term memories are AI.MEMORY documents (the server embeds them: no API key, no client-side
vectors); a memory without a ``session_id`` goes to the session ``__longterm__``. Filters take
agent-memory-server's objects: ``{"eq": v}`` for session/namespace/user, ``{"any": [...]}``,
``{"all": [...]}`` or ``{"eq": v}`` for topics/entities/memory_type, and ``{"gt"|"gte"|"lt"|"lte"|
"eq": iso, "between": [iso, iso]}`` for ``created_at`` and ``event_date``. ``distance_threshold``
is a cosine distance (0..2, RedisVL's scale): a memory is kept when ``1 - similarity <= it``.
Working memory is a JSON document per (namespace, session) with a TTL, as agent-memory-server
keeps it; the structured ``memories`` given to ``set_working_memory`` are promoted to long-term
memory at once.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pion.client.agent_memory import PionMemory

NO_SESSION = "__longterm__"
WORKING = b"__pion:wm:"
MODES = {"semantic": 0.0, "hybrid": 0.5, "keyword": 1.0}
#: agent-memory-server's MemoryTypeEnum; a long-term memory's AI.MEMORY role is its type, so a search
#: restricted to these roles never sees the knowledge graph's memories (roles entity/observation)
MEMORY_TYPES = ("semantic", "episodic", "message")


class FilterError(ValueError):
    """A filter this store cannot apply (the text says which and what to use instead)."""


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def epoch_ms(value: Any) -> int:
    if isinstance(value, int | float):
        return int(value)
    return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)


def _eq(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) <= {"eq"}:
        return value.get("eq")
    raise FilterError(f"{name}: only {{'eq': value}} is supported")


def _many(name: str, value: Any) -> tuple[list[str] | None, list[str]]:
    """(any-of values for the server, all-of values checked here)."""
    if value is None:
        return None, []
    if isinstance(value, list):
        return value, []
    ops = set(value)
    if not ops <= {"eq", "any", "all"}:
        raise FilterError(f"{name}: supported operators are eq, any and all, not {sorted(ops - {'eq', 'any', 'all'})}")
    if "eq" in value:
        return [value["eq"]], []
    if "any" in value:
        return list(value["any"]), list(value.get("all") or [])
    return list(value["all"]), list(value["all"])


def _range(name: str, value: Any) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    lo = hi = None
    for op, raw in value.items():
        if op == "between":
            lo, hi = epoch_ms(raw[0]), epoch_ms(raw[1])
        elif op in ("gt", "gte"):
            lo = epoch_ms(raw) + (1 if op == "gt" else 0)
        elif op in ("lt", "lte"):
            hi = epoch_ms(raw) - (1 if op == "lt" else 0)
        elif op == "eq":
            lo = hi = epoch_ms(raw)
        else:
            raise FilterError(f"{name}: supported operators are gt, gte, lt, lte, eq and between, not {op}")
    return lo, hi


def record(hit: dict[str, Any]) -> dict[str, Any]:
    """An AI.MEMORY record as an agent-memory-server MemoryRecord (plus ``dist`` and ``score`` for a hit)."""
    meta = hit.get("meta") or {}
    out = {
        "id": hit["id"], "text": hit["content"],
        "session_id": meta.get("session_id"), "user_id": meta.get("user_id"), "namespace": meta.get("namespace"),
        "topics": meta.get("topics") or [], "entities": meta.get("entities") or [],
        "memory_type": meta.get("memory_type") or hit.get("role") or "semantic",
        "event_date": iso(epoch_ms(meta["event_date"])) if meta.get("event_date") else None,
        "created_at": iso(hit.get("created")), "updated_at": iso(hit.get("updated")),
        "last_accessed": iso(hit.get("updated")),
    }
    if "similarity" in hit:
        out["dist"] = round(1.0 - hit["similarity"], 6)
        out["score"] = hit["score"]
    return out


class LongTermMemory:
    def __init__(self, memory: PionMemory) -> None:
        self.memory = memory
        self.redis = memory.redis

    def create(self, memories: list[dict[str, Any]], session_id: str | None = None) -> list[str]:
        items = []
        for mem in memories:
            text = mem.get("text")
            if not text:
                raise FilterError("every memory needs a non-empty 'text'")
            meta = {k: mem.get(k) for k in ("id", "user_id", "namespace", "topics", "entities", "memory_type",
                                            "event_date", "session_id") if mem.get(k) not in (None, [], "")}
            if session_id and "session_id" not in meta:
                meta["session_id"] = session_id
            if "event_date" in meta:
                meta["event_date"] = epoch_ms(meta["event_date"])
            if meta.get("memory_type", "semantic") not in MEMORY_TYPES:
                raise FilterError(f"memory_type must be one of {', '.join(MEMORY_TYPES)}, not {meta['memory_type']!r}")
            items.append((meta.get("session_id") or NO_SESSION, meta.get("memory_type") or "semantic", text, meta))
        return self.memory.add_many(items)

    def search(self, text: str | None, *, search_mode: str = "semantic", session_id: Any = None,
               namespace: Any = None, topics: Any = None, entities: Any = None, created_at: Any = None,
               user_id: Any = None, memory_type: Any = None, event_date: Any = None,
               distance_threshold: float | None = None, limit: int = 10, offset: int = 0,
               recency_boost: bool | None = None) -> dict[str, Any]:
        if search_mode not in MODES:
            raise FilterError(f"search_mode must be one of {', '.join(MODES)}")
        if distance_threshold is not None and search_mode != "semantic":
            raise FilterError("distance_threshold is only supported for semantic search mode")
        any_topics, all_topics = _many("topics", topics)
        any_entities, all_entities = _many("entities", entities)
        kinds, _ = _many("memory_type", memory_type)
        since, until = _range("created_at", created_at)
        event_from, event_to = _range("event_date", event_date)
        session = _eq("session_id", session_id) or "*"
        query = text or ""
        wanted = limit + offset
        post = bool(all_topics or all_entities or event_from is not None or event_to is not None)
        hits = self.memory.recall(
            session, query, k=min(1000, wanted * (4 if post else 1)), alpha=MODES[search_mode],
            threshold=None if distance_threshold is None else 1.0 - distance_threshold,
            recency=1.0 if not query else (0.0 if recency_boost is False else None), roles=MEMORY_TYPES,
            namespace=_eq("namespace", namespace), user=_eq("user_id", user_id), kinds=kinds,
            topics=any_topics, entities=any_entities, since=since, until=until)
        if post:
            hits = [h for h in hits if _keeps(h, all_topics, all_entities, event_from, event_to)]
        page = hits[offset:offset + limit]
        return {"total": len(hits), "memories": [record(h) for h in page],
                "next_offset": offset + limit if len(hits) > offset + limit else None}

    def compact(self, *, namespace: str | None = None, user_id: str | None = None, session_id: str | None = None,
                limit: int = 1000, vector_distance_threshold: float = 0.12, compact_hash_duplicates: bool = True,
                compact_semantic_duplicates: bool = True) -> dict[str, Any]:
        """agent-memory-server's compaction without its LLM merge: among the newest ``limit``
        memories in scope, of each group with the same text (case and spacing aside) or within
        ``vector_distance_threshold`` of each other (cosine distance) in the same namespace, user
        and session, the newest is kept and the others are deleted."""
        if not 0 <= vector_distance_threshold <= 2:
            raise FilterError("vector_distance_threshold is a cosine distance: 0..2")
        session = session_id or "*"
        newest = self.memory.recall(session, "", k=max(1, min(limit, 10_000)), recency=1.0, roles=MEMORY_TYPES,
                                    namespace=namespace, user=user_id)
        scope = {h["id"]: h for h in newest}
        doomed: set[str] = set()

        def group(hit: dict[str, Any]) -> tuple:
            meta = hit.get("meta") or {}
            return meta.get("namespace"), meta.get("user_id"), hit.get("session")

        if compact_hash_duplicates:
            seen: set[tuple] = set()
            for hit in newest:  # newest first: the first of a text is the one kept
                key = (*group(hit), " ".join(hit["content"].lower().split()))
                if key in seen:
                    doomed.add(hit["id"])
                seen.add(key)
        if compact_semantic_duplicates:
            for hit in newest:
                if hit["id"] in doomed:
                    continue
                meta = hit.get("meta") or {}
                near = self.memory.recall(hit.get("session") or session, hit["content"], k=20, recency=0.0,
                                          threshold=1.0 - vector_distance_threshold, roles=MEMORY_TYPES,
                                          namespace=meta.get("namespace"), user=meta.get("user_id"))
                for other in near:
                    older = other["id"] in scope and scope[other["id"]]["created"] <= hit["created"]
                    if other["id"] != hit["id"] and older and group(scope[other["id"]]) == group(hit):
                        doomed.add(other["id"])
        deleted = self.memory.forget(*sorted(doomed))
        return {"status": "ok", "deleted": deleted, "remaining": len(newest) - deleted}

    def delete(self, memory_ids: list[str]) -> dict[str, Any]:
        return {"status": "ok", "deleted": self.memory.forget(*memory_ids)}

    def get(self, memory_id: str) -> dict[str, Any]:
        found = self.memory.get(memory_id)[0]
        if found is None:
            raise FilterError(f"Memory with ID {memory_id} not found")
        return record(found)

    def edit(self, memory_id: str, **changes: Any) -> dict[str, Any]:
        found = self.memory.get(memory_id)[0]
        if found is None:
            raise FilterError(f"Memory with ID {memory_id} not found")
        meta = dict(found["meta"])
        text = changes.pop("text", None) or found["content"]
        meta.update({k: v for k, v in changes.items() if v is not None})
        meta["id"] = memory_id
        self.create([{"text": text, **meta}])
        return self.get(memory_id)

    # -- working memory --------------------------------------------------------------------------

    def _working_key(self, session_id: str, namespace: str | None) -> bytes:
        return WORKING + json.dumps([namespace or "", session_id]).encode()

    def set_working(self, session_id: str, *, memories: list[dict] | None = None, messages: list[dict] | None = None,
                    context: str | None = None, data: dict | None = None, namespace: str | None = None,
                    user_id: str | None = None, ttl_seconds: int = 3600) -> dict[str, Any]:
        ids = self.create([dict(m, namespace=m.get("namespace") or namespace, user_id=m.get("user_id") or user_id)
                           for m in memories or []], session_id=session_id) if memories else []
        stored_memories = [dict(m, id=i) for m, i in zip(memories or [], ids, strict=True)]
        now = iso(int(datetime.now(UTC).timestamp() * 1000))
        doc = {"session_id": session_id, "namespace": namespace, "user_id": user_id, "context": context,
               "data": data or {}, "memories": stored_memories, "ttl_seconds": ttl_seconds, "last_accessed": now,
               "messages": [dict(m, created_at=m.get("created_at") or now) for m in messages or []]}
        key = self._working_key(session_id, namespace)
        if ttl_seconds and ttl_seconds > 0:
            self.redis.set(key, json.dumps(doc), ex=int(ttl_seconds))
        else:
            self.redis.set(key, json.dumps(doc))
        return doc

    def get_working(self, session_id: str, *, namespace: str | None = None,
                    recent_messages_limit: int | None = None) -> dict[str, Any]:
        raw = self.redis.get(self._working_key(session_id, namespace))
        if raw is None:
            return {"session_id": session_id, "namespace": namespace, "messages": [], "memories": [], "context": None,
                    "data": {}}
        doc = json.loads(raw)
        if recent_messages_limit is not None:
            doc["messages"] = doc["messages"][-recent_messages_limit:] if recent_messages_limit > 0 else []
        return doc

    def prompt(self, query: str, *, session_id: Any = None, namespace: Any = None, limit: int = 10,
               include_long_term_search: bool = True, **filters: Any) -> dict[str, Any]:
        """agent-memory-server's memory_prompt: the session's context and messages, the long-term
        memories relevant to ``query`` as a system message, then the query as the user's turn."""
        session = _eq("session_id", session_id)
        if session is None and not include_long_term_search:
            raise FilterError("Either session_id or include_long_term_search=True must be provided")
        messages: list[dict[str, Any]] = []
        if session is not None:
            working = self.get_working(session, namespace=_eq("namespace", namespace))
            if working.get("context"):
                messages.append(_message("system", f"## A summary of the conversation so far:\n{working['context']}"))
            messages += [_message(m.get("role", "user"), m.get("content", "")) for m in working["messages"]]
        if include_long_term_search:
            found = self.search(query, namespace=namespace, limit=limit, **filters)["memories"]
            if found:
                lines = "\n".join(f"- {m['text']}" for m in found)
                messages.append(_message("system", f"## Long term memories related to the user's query\n {lines}"))
        messages.append(_message("user", query))
        return {"messages": messages}


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": {"type": "text", "text": text}}


def _keeps(hit: dict[str, Any], topics: list[str], entities: list[str], lo: int | None, hi: int | None) -> bool:
    meta = hit.get("meta") or {}
    if not set(topics) <= set(meta.get("topics") or []) or not set(entities) <= set(meta.get("entities") or []):
        return False
    if lo is None and hi is None:
        return True
    when = meta.get("event_date")
    if when is None:
        return False
    when = epoch_ms(when)
    return (lo is None or when >= lo) and (hi is None or when <= hi)
