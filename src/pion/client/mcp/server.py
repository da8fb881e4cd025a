"""``pion mcp``'s tools: the official memory server's knowledge graph, agent-memory-server's long-term
and working memory, the semantic cache and plain keys, all on one Pion connection.

The MCP server is a client of Pion (``pion://`` URL, password, tenant, TLS as ``PionClient``): it
keeps no state of its own, so any number of them, on stdio or streamable HTTP, share one Pion,
and each tenant's memories stay in that tenant's keyspace. Tools run the (blocking) redis-py calls
in worker threads, so one slow call never stalls the others. Graph tools answer the JSON text the
official server answers (``JSON.stringify(result, null, 2)``); the other tools answer structured
results.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
from typing_extensions import TypedDict

from pion.client.agent_memory import PionMemory, connect
from pion.client.errors import PionError
from pion.client.mcp import sdk
from pion.client.mcp.graph import GraphError, KnowledgeGraph
from pion.client.mcp.longterm import FilterError, LongTermMemory
from pion.client.semantic_cache import PionSemanticCache

try:
    from mcp.types import CallToolResult  # the SDK's (1.x and 2.x): the graph tools answer their own content
except ImportError:
    raise ImportError(sdk.EXTRA_HINT) from None

INSTRUCTIONS = ("Pion memory: a knowledge graph (entities, relations, observations) whose search_nodes finds "
                "by meaning, long-term memories searchable by meaning, working memory per session, a semantic "
                "cache of answers, and plain keys. Check memory before answering questions about the user.")
SEARCH_QUERY_MAX_LENGTH = 2048  # the official server's bound on search_nodes' query


class Entity(TypedDict):
    name: str
    entityType: str
    observations: list[str]


#: "from" is a Python keyword: the functional form keeps the official field name
Relation = TypedDict("Relation", {"from": str, "to": str, "relationType": str})


class ObservationAddition(TypedDict):
    entityName: str
    contents: list[str]


class ObservationDeletion(TypedDict):
    entityName: str
    observations: list[str]


class Backend:
    """What the tools call: one redis-py connection pool and the stores built on it."""

    def __init__(self, url: str, username: str | None = None, password: str | None = None) -> None:
        self.redis = connect(url, username=username, password=password)
        self.memory = PionMemory(self.redis)
        self.graph = KnowledgeGraph(self.memory)
        self.longterm = LongTermMemory(self.memory)
        self.cache = PionSemanticCache(url, client=self.redis)

    def ping(self) -> None:
        self.redis.ping()


async def _run(fn, *args: Any, **kwargs: Any) -> Any:
    """Call a store method in a worker thread; a Pion or filter error becomes the tool's error."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    except (PionError, GraphError, FilterError, ValueError) as exc:
        raise sdk.tool_error(str(exc)) from exc


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _graph_reply(value: Any, structured: dict[str, Any], *notes: str) -> Any:
    """The official server's answer: ``JSON.stringify(value, null, 2)`` as text (then any notes)
    and the same data as structured content."""
    return sdk.tool_result([_json(value), *notes], structured)


def _message_reply(message: str) -> Any:
    return sdk.tool_result([message], {"success": True, "message": message})


def _skipped_notice(skipped: list[str]) -> str:
    one = len(skipped) == 1
    return (f"Skipped {len(skipped)} {'entity that already exists' if one else 'entities that already exist'}: "
            f"{', '.join(skipped)}. {'Its' if one else 'Their'} observations were not added; "
            "use add_observations for existing entities.")


def register_graph_tools(server: Any, backend: Backend) -> None:
    """The official memory server's nine tools: same names, argument schemas, texts and
    structured results (modelcontextprotocol/servers src/memory)."""
    graph = backend.graph

    @server.tool()
    async def create_entities(entities: list[Entity]) -> CallToolResult:
        """Create multiple new entities in the knowledge graph"""
        created = await _run(graph.create_entities, [dict(e) for e in entities])
        made = [e["name"] for e in created]
        skipped = []
        for entity in entities:
            if entity["name"] in made:
                made.remove(entity["name"])
            else:
                skipped.append(entity["name"])
        notes = [_skipped_notice(skipped)] if skipped else []
        return _graph_reply(created, {"entities": created, "skipped": skipped}, *notes)

    @server.tool()
    async def create_relations(relations: list[Relation]) -> CallToolResult:
        """Create multiple new relations between entities in the knowledge graph. Relations should be in active voice"""
        created = await _run(graph.create_relations, [dict(r) for r in relations])
        return _graph_reply(created, {"relations": created})

    @server.tool()
    async def add_observations(observations: list[ObservationAddition]) -> CallToolResult:
        """Add new observations to existing entities in the knowledge graph"""
        added = await _run(graph.add_observations, [dict(o) for o in observations])
        return _graph_reply(added, {"results": added})

    @server.tool()
    async def delete_entities(entityNames: list[str]) -> CallToolResult:  # noqa: N803 - the official argument name
        """Delete multiple entities and their associated relations from the knowledge graph"""
        deleted, missing = await _run(graph.delete_entities, entityNames)
        if not missing:
            return _message_reply("Entities deleted successfully")
        return _message_reply(f"Deleted {len(deleted)} of {len(entityNames)} entities. Not found: {', '.join(missing)}")

    @server.tool()
    async def delete_observations(deletions: list[ObservationDeletion]) -> CallToolResult:
        """Delete specific observations from entities in the knowledge graph"""
        count, missing = await _run(graph.delete_observations, [dict(d) for d in deletions])
        requested = sum(len(d["observations"]) for d in deletions)
        if count == requested:
            return _message_reply("Observations deleted successfully")
        tail = f" Entities not found: {', '.join(missing)}" if missing else ""
        return _message_reply(f"Deleted {count} of {requested} observations.{tail}")

    @server.tool()
    async def delete_relations(relations: list[Relation]) -> CallToolResult:
        """Delete multiple relations from the knowledge graph"""
        count = await _run(graph.delete_relations, [dict(r) for r in relations])
        if count == len(relations):
            return _message_reply("Relations deleted successfully")
        return _message_reply(f"Deleted {count} of {len(relations)} relations. The rest matched nothing.")

    @server.tool()
    async def read_graph() -> CallToolResult:
        """Read the entire knowledge graph"""
        found = await _run(graph.read_graph)
        return _graph_reply(found, found)

    @server.tool()
    async def search_nodes(query: str, limit: int = 10) -> CallToolResult:
        """Search for nodes in the knowledge graph based on a query: entities whose names, types and
        observations mean the closest to it (not only substring matches), best first"""
        if len(query) > SEARCH_QUERY_MAX_LENGTH:
            raise sdk.tool_error(f"query is longer than {SEARCH_QUERY_MAX_LENGTH} characters")
        found = await _run(graph.search_nodes, query, limit)
        return _graph_reply(found, found)

    @server.tool()
    async def open_nodes(names: list[str]) -> CallToolResult:
        """Open specific nodes in the knowledge graph by their names"""
        found = await _run(graph.open_nodes, names)
        return _graph_reply(found, found)


def register_memory_tools(server: Any, backend: Backend) -> None:
    longterm = backend.longterm

    @server.tool()
    async def get_current_datetime() -> dict[str, Any]:
        """Get the current datetime in UTC for grounding relative time expressions (iso_utc, unix_ts)."""
        now = datetime.now(UTC).replace(microsecond=0)
        return {"iso_utc": now.isoformat().replace("+00:00", "Z"), "unix_ts": int(now.timestamp())}

    @server.tool()
    async def create_long_term_memories(memories: list[dict[str, Any]]) -> dict[str, Any]:
        """Create long-term memories that can be searched later. Each memory: text (required), and
        optionally id, memory_type (semantic | episodic), event_date (ISO 8601), user_id,
        session_id, namespace, topics, entities. Resolve pronouns and relative dates first."""
        ids = await _run(longterm.create, memories)
        return {"status": "ok", "ids": ids}

    @server.tool()
    async def search_long_term_memory(text: str | None = None, search_mode: str = "semantic",
                                      session_id: dict[str, Any] | None = None,
                                      namespace: dict[str, Any] | None = None, topics: dict[str, Any] | None = None,
                                      entities: dict[str, Any] | None = None,
                                      created_at: dict[str, Any] | None = None, user_id: dict[str, Any] | None = None,
                                      memory_type: dict[str, Any] | None = None,
                                      event_date: dict[str, Any] | None = None,
                                      distance_threshold: float | None = None, limit: int = 10, offset: int = 0,
                                      recency_boost: bool | None = None) -> dict[str, Any]:
        """Search long-term memories by meaning (semantic), words (keyword) or both (hybrid). Filters:
        session_id/namespace/user_id {"eq": v}; topics/entities/memory_type {"any": [..]} or
        {"all": [..]} or {"eq": v}; created_at/event_date {"gt"|"gte"|"lt"|"lte"|"eq": ISO 8601,
        "between": [a, b]}. distance_threshold is a cosine distance (0..2). An empty text lists the
        newest memories."""
        return await _run(longterm.search, text, search_mode=search_mode, session_id=session_id,
                          namespace=namespace, topics=topics, entities=entities, created_at=created_at,
                          user_id=user_id, memory_type=memory_type, event_date=event_date,
                          distance_threshold=distance_threshold, limit=limit, offset=offset,
                          recency_boost=recency_boost)

    @server.tool()
    async def memory_prompt(query: str, session_id: dict[str, Any] | None = None,
                            namespace: dict[str, Any] | None = None, user_id: dict[str, Any] | None = None,
                            topics: dict[str, Any] | None = None, limit: int = 10,
                            include_long_term_search: bool = True) -> dict[str, Any]:
        """Hydrate a query with the session's working memory and the long-term memories relevant to it:
        messages ready for the model (system context, history, memories, then the user's query)."""
        return await _run(longterm.prompt, query, session_id=session_id, namespace=namespace, user_id=user_id,
                          topics=topics, limit=limit, include_long_term_search=include_long_term_search)

    @server.tool()
    async def set_working_memory(session_id: str, memories: list[dict[str, Any]] | None = None,
                                 messages: list[dict[str, Any]] | None = None, context: str | None = None,
                                 data: dict[str, Any] | None = None, namespace: str | None = None,
                                 user_id: str | None = None, ttl_seconds: int = 3600) -> dict[str, Any]:
        """Set working memory for a session (replaces it): messages [{role, content}], a context
        summary, JSON data; structured memories are promoted to long-term memory."""
        return await _run(longterm.set_working, session_id, memories=memories, messages=messages, context=context,
                          data=data, namespace=namespace, user_id=user_id, ttl_seconds=ttl_seconds)

    @server.tool()
    async def get_working_memory(session_id: str, namespace: str | None = None,
                                 recent_messages_limit: int | None = None) -> dict[str, Any]:
        """Get working memory for a session (empty when there is none)."""
        return await _run(longterm.get_working, session_id, namespace=namespace,
                          recent_messages_limit=recent_messages_limit)

    @server.tool()
    async def get_long_term_memory(memory_id: str) -> dict[str, Any]:
        """Get a long-term memory by its ID."""
        return await _run(longterm.get, memory_id)

    @server.tool()
    async def edit_long_term_memory(memory_id: str, text: str | None = None, topics: list[str] | None = None,
                                    entities: list[str] | None = None, memory_type: str | None = None,
                                    namespace: str | None = None, user_id: str | None = None,
                                    session_id: str | None = None, event_date: str | None = None) -> dict[str, Any]:
        """Edit an existing long-term memory by its ID (only the fields given change)."""
        return await _run(longterm.edit, memory_id, text=text, topics=topics, entities=entities,
                          memory_type=memory_type, namespace=namespace, user_id=user_id, session_id=session_id,
                          event_date=event_date)

    @server.tool()
    async def compact_long_term_memories(namespace: str | None = None, user_id: str | None = None,
                                         session_id: str | None = None, limit: int = 1000,
                                         vector_distance_threshold: float = 0.12, compact_hash_duplicates: bool = True,
                                         compact_semantic_duplicates: bool = True) -> dict[str, Any]:
        """Compact long-term memories: of memories with the same text, or within
        vector_distance_threshold (cosine distance) of each other, in the same namespace, user and
        session, keep the newest and delete the rest (no LLM merge)."""
        return await _run(longterm.compact, namespace=namespace, user_id=user_id, session_id=session_id, limit=limit,
                          vector_distance_threshold=vector_distance_threshold,
                          compact_hash_duplicates=compact_hash_duplicates,
                          compact_semantic_duplicates=compact_semantic_duplicates)

    @server.tool()
    async def delete_long_term_memories(memory_ids: list[str]) -> dict[str, Any]:
        """Delete long-term memories by their IDs."""
        return await _run(longterm.delete, memory_ids)


def register_cache_and_key_tools(server: Any, backend: Backend) -> None:
    cache, redis = backend.cache, backend.redis

    @server.tool()
    async def semantic_cache_get(query: str, threshold: float | None = None,
                                 tags: list[str] | None = None) -> dict[str, Any]:
        """Look up a cached answer for a question with the same meaning: a hit when the cosine
        similarity is at least threshold (the server's default when omitted)."""
        hit = await _run(cache.lookup, query, threshold=threshold, tags=tags)
        if hit is None:
            return {"hit": False}
        return {"hit": True, "response": hit.response, "similarity": hit.similarity}

    @server.tool()
    async def semantic_cache_set(query: str, response: str, ttl_seconds: int | None = None,
                                 tags: list[str] | None = None) -> dict[str, Any]:
        """Cache an answer under the meaning of its question (ttl_seconds: expire it)."""
        await _run(cache.set, query, response, ttl=ttl_seconds, tags=tags)
        return {"status": "ok"}

    def text(value: Any) -> str | None:
        return None if value is None else value.decode("utf-8", "replace")

    @server.tool()
    async def kv_get(key: str) -> str | None:
        """Get the string value of a key (null when missing)."""
        return text(await _run(redis.get, key))

    @server.tool()
    async def kv_mget(keys: list[str]) -> list[str | None]:
        """Get the values of several keys."""
        return [text(v) for v in await _run(redis.mget, keys)]

    @server.tool()
    async def kv_set(key: str, value: str, ttl_seconds: int | None = None) -> dict[str, Any]:
        """Set a key to a string value (ttl_seconds: expire it)."""
        await _run(redis.set, key, value, ex=ttl_seconds)
        return {"status": "ok"}

    @server.tool()
    async def kv_delete(keys: list[str]) -> dict[str, Any]:
        """Delete keys; the number deleted."""
        return {"deleted": await _run(redis.delete, *keys) if keys else 0}

    @server.tool()
    async def kv_incr(key: str, amount: int = 1) -> dict[str, Any]:
        """Add an integer to a key's value; the new value."""
        return {"value": await _run(redis.incrby, key, amount)}


def build(url: str, *, username: str | None = None, password: str | None = None, host: str = "127.0.0.1",
          port: int = 8000, path: str = "/mcp") -> Any:
    """The MCP server with every tool, connected to the Pion at ``url``."""
    backend = Backend(url, username, password)
    backend.ping()
    server = sdk.make_server("pion-memory", INSTRUCTIONS, host=host, port=port, path=path)
    register_graph_tools(server, backend)
    register_memory_tools(server, backend)
    register_cache_and_key_tools(server, backend)
    return server
