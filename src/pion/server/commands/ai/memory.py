"""AI.MEMORY ADD/ADDMANY/RECALL/CONTEXT/GET/FORGET/FORGET_SESSION/STATS: agent memory
(``pion.semantic.memory``), and ``install``, which recreates the Pion-owned indexes after a restart.

Memories are hashes of the client's database (``__pion:mem:<id>``), logged as HSET/DEL, so they
survive ``kill -9`` like any acknowledged write, count against the tenant's quota, and belong to
the database (and tenant) that wrote them. ADD answers ``+OK`` as the reference does (``WITHID``:
the id); ADDMANY answers the ids.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.semantic import cache, memory
from pion.semantic.owned import DimensionMismatch, field_text
from pion.server.args import parse_float, parse_int, parse_nonneg_int
from pion.server.commands.ai.embed import embedder_of, live_value, parse_options, run_writes, text_of, with_vectors
from pion.server.commands.search.admin import engine as search_engine
from pion.server.component import Component
from pion.server.context import Ctx
from pion.server.registry import command

_CATS = "@pion @slow"
_EMBEDS = "noscript no_multi"
MAX_SESSION_BYTES = 512
MAX_ROLE_BYTES = 64
COUNTERS = ("adds", "dedups", "recalls", "hybrid_recalls", "forgets")
_RECALL_OPTIONS = {b"K": 1, b"HYBRID": 1, b"THRESHOLD": 1, b"RECENCY": 1, b"HALFLIFE": 1, b"OFFSET": 1,
                   b"ROLE": 1, b"NAMESPACE": 1, b"USER": 1, b"KIND": 1, b"TOPICS": 1, b"ENTITIES": 1,
                   b"SINCE": 1, b"UNTIL": 1}


def install(server: Any) -> None:
    """After recovery: every database whose marker says it had a semantic cache or agent memory
    gets its index again (the log carries the documents, not the index definitions)."""

    server.add_component(OwnedIndexes(server))
    if server.parts.agent_memory is None:
        server.parts.agent_memory = dict.fromkeys(COUNTERS, 0)


def _count(ctx: Ctx, name: str, amount: int = 1) -> None:
    counts = ctx.server.parts.agent_memory
    if counts is None:
        counts = ctx.server.parts.agent_memory = dict.fromkeys(COUNTERS, 0)
    counts[name] += amount


def _name(raw: bytes, what: str, limit: int, star_ok: bool = False) -> str:
    text = text_of(raw, what)
    if not text or len(raw) > limit:
        raise ReplyError(f"ERR the {what} must be 1 to {limit} bytes")
    if text == memory.ALL_SESSIONS and not star_ok:
        raise ReplyError(f"ERR '{memory.ALL_SESSIONS}' is not a {what} name (RECALL uses it for every session)")
    return text


def _item(session: bytes, role: bytes, content: bytes, meta: bytes | None) -> memory.NewMemory:
    try:
        parsed = memory.parse_meta(meta)
    except ValueError as exc:
        raise ReplyError(f"ERR {exc}") from None
    return memory.NewMemory(_name(session, "session", MAX_SESSION_BYTES), _name(role, "role", MAX_ROLE_BYTES),
                            text_of(content, "content"), parsed)


def _index(ctx: Ctx, dim: int):
    try:
        return memory.OWNED.ensure(search_engine(ctx), ctx.db, dim, embedder_of(ctx).name)
    except DimensionMismatch as exc:
        raise ReplyError(f"ERR {exc}") from None


def _store(ctx: Ctx, items: list[memory.NewMemory], vectors: np.ndarray, dedup: float | None) -> list[str]:
    """Write the new memories (or refresh their duplicates); the ids, in order."""
    index, writes = _index(ctx, vectors.shape[1])
    now = int(time.time() * 1000)
    ids: list[str] = []
    batch: dict[str, str] = {}
    for item, vector in zip(items, vectors, strict=True):
        digest = memory.content_hash(item.session, item.role, item.meta.namespace, item.content, item.meta.user)
        dup = None if item.memory_id else memory.find_duplicate(index, item, vector, dedup)
        if item.memory_id is None and (dup is not None or digest in batch):  # a given id is never deduplicated
            memory_id = batch.get(digest) or field_text(getattr(live_value(ctx, index.docs[dup]), "fields", {}), b"id")
            writes.append([b"HSET", memory.PREFIX + memory_id.encode(), b"updated", str(now).encode()])
            _count(ctx, "dedups")
        else:
            memory_id = item.memory_id or memory.new_id(now)
            key = memory.PREFIX + memory_id.encode()
            writes += [[b"DEL", key], [b"HSET", key, *memory.memory_fields(item, memory_id, vector, now)]]
            _count(ctx, "adds")
        batch[digest] = memory_id
        ids.append(memory_id)
    run_writes(ctx, writes)
    return ids


@command("AI.MEMORY|ADD", -5, f"write denyoom {_EMBEDS}", categories=f"@write {_CATS}", group="pion", since="0.1.0")
def memory_add(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY ADD session role content [META json] [ID id] [DEDUP sim] [WITHID]: remember one turn or
    fact (+OK, or its id with WITHID; a duplicate refreshes the stored one and answers its id)."""
    opts = parse_options(argv, 5, {b"META": 1, b"ID": 1, b"DEDUP": 1, b"WITHID": 0})
    item = _item(argv[2], argv[3], argv[4], opts.get(b"META"))
    if b"ID" in opts:
        item.memory_id = text_of(opts[b"ID"], "id")
        if not memory.ID_PATTERN.match(item.memory_id):
            raise ReplyError("ERR a memory id is 1 to 128 of A-Z a-z 0-9 _ . : -")
    dedup = None
    if b"DEDUP" in opts:
        dedup = parse_float(opts[b"DEDUP"], "ERR DEDUP must be a similarity between -1 and 1")
        if not -1 <= dedup <= 1:
            raise ReplyError("ERR DEDUP must be a similarity between -1 and 1")

    def finish(ctx2: Ctx, vectors: np.ndarray):
        ids = _store(ctx2, [item], vectors, dedup)
        return ids[0].encode() if b"WITHID" in opts else OK

    return with_vectors(ctx, [item.content], finish)


@command("AI.MEMORY|ADDMANY", -6, f"write denyoom {_EMBEDS}", categories=f"@write {_CATS}", group="pion",
         since="0.1.0")
def memory_addmany(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY ADDMANY session role content meta [session role content meta ...]: remember many at
    once (embedded as one batch; meta may be an empty string); the ids, in order."""
    rest = argv[2:]
    if len(rest) % 4:
        raise ReplyError(errors.wrong_arity("ai.memory|addmany"))
    if len(rest) // 4 > 4096:
        raise ReplyError("ERR AI.MEMORY ADDMANY takes at most 4096 memories at a time")
    items = [_item(*rest[i:i + 4]) for i in range(0, len(rest), 4)]
    for item in items:
        given = item.meta.raw.get("id")
        if given is not None:
            if not memory.ID_PATTERN.match(str(given)):
                raise ReplyError("ERR a memory id is 1 to 128 of A-Z a-z 0-9 _ . : -")
            item.memory_id = str(given)
    return with_vectors(ctx, [i.content for i in items],
                        lambda ctx2, vectors: [i.encode() for i in _store(ctx2, items, vectors, None)])


def _recall_query(argv: list[bytes]) -> memory.RecallQuery:
    query = memory.RecallQuery(_name(argv[2], "session", MAX_SESSION_BYTES, star_ok=True), text_of(argv[3], "query"))
    opts = parse_options(argv, 4, _RECALL_OPTIONS)

    def number(name: bytes, lo: float, hi: float) -> float:
        value = parse_float(opts[name], f"ERR {name.decode()} must be a number")
        if not lo <= value <= hi:
            raise ReplyError(f"ERR {name.decode()} must be between {lo:g} and {hi:g}")
        return value

    if b"K" in opts:
        query.k = parse_nonneg_int(opts[b"K"], "ERR K must be a positive integer")
        if not 1 <= query.k <= 1000:
            raise ReplyError("ERR K must be between 1 and 1000")
    if b"OFFSET" in opts:
        query.offset = min(parse_nonneg_int(opts[b"OFFSET"], "ERR OFFSET must be a non-negative integer"), 100_000)
    for name, attr, lo, hi in ((b"HYBRID", "alpha", 0, 1), (b"THRESHOLD", "threshold", -1, 1),
                               (b"RECENCY", "recency", 0, 1), (b"HALFLIFE", "halflife", 0, 1e12)):
        if name in opts:
            setattr(query, attr, number(name, lo, hi))
    for name, attr in ((b"ROLE", "roles"), (b"KIND", "kinds"), (b"TOPICS", "topics"), (b"ENTITIES", "entities")):
        if name in opts:
            setattr(query, attr, cache.parse_tags(opts[name]))
    for name, attr in ((b"NAMESPACE", "namespace"), (b"USER", "user")):
        if name in opts:
            setattr(query, attr, text_of(opts[name], name.decode().lower()))
    for name, attr in ((b"SINCE", "since"), (b"UNTIL", "until")):
        if name in opts:
            setattr(query, attr, parse_int(opts[name], f"ERR {name.decode()} must be epoch milliseconds"))
    return query


def _memory_index(ctx: Ctx):
    """This database's memory index (reads never create it)."""
    return memory.OWNED.current(search_engine(ctx), ctx.db)


@command("AI.MEMORY|RECALL", -4, f"readonly {_EMBEDS}", categories=f"@read {_CATS}", group="pion", since="0.1.0")
def memory_recall(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY RECALL session|* query [K k] [HYBRID alpha] [THRESHOLD sim] [RECENCY w] [HALFLIFE s]
    [OFFSET n] [ROLE r,...] [NAMESPACE ns] [USER u] [KIND t,...] [TOPICS t,...] [ENTITIES e,...]
    [SINCE ms] [UNTIL ms]: the k best memories (maps: id session role content score similarity
    created updated meta), best first; empty when none."""
    query = _recall_query(argv)

    def finish(ctx2: Ctx, vectors: np.ndarray):
        index = _memory_index(ctx2)
        _count(ctx2, "hybrid_recalls" if query.alpha > 0 else "recalls")
        if index is None:
            return []
        if memory.OWNED.width(index) != vectors.shape[1]:
            _index(ctx2, vectors.shape[1])  # raises the mismatch error
        return memory.recall(index, query, vectors[0], lambda key: live_value(ctx2, key))

    return with_vectors(ctx, [query.text], finish)


@command("AI.MEMORY|CONTEXT", 4, "readonly", categories=f"@read {_CATS}", group="pion", since="0.1.0")
def memory_context(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY CONTEXT session n: the newest n entries of the session as "role: content", newest first."""
    session = _name(argv[2], "session", MAX_SESSION_BYTES)
    count = parse_nonneg_int(argv[3], "ERR n must be a non-negative integer")
    index = _memory_index(ctx)
    if index is None or not count:
        return []
    out = []
    for doc in memory.session_docs(index, session)[:count]:
        fields = getattr(live_value(ctx, index.docs[doc]), "fields", None)
        if fields is not None:
            out.append(bytes(fields.get(b"role", b"")) + b": " + bytes(fields.get(b"content", b"")))
    return out


@command("AI.MEMORY|GET", -3, "readonly", categories=f"@read {_CATS}", group="pion", since="0.1.0")
def memory_get(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY GET id [id ...]: each memory as a map (nil for an unknown id)."""
    out = []
    for raw in argv[2:]:
        fields = getattr(live_value(ctx, memory.PREFIX + bytes(raw)), "fields", None)
        out.append(None if fields is None else memory.reply_map(fields))
    return out


@command("AI.MEMORY|FORGET", -3, "write", categories=f"@write {_CATS}", group="pion", since="0.1.0")
def memory_forget(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY FORGET id [id ...]: delete memories by id; the number deleted."""
    keys = [memory.PREFIX + bytes(raw) for raw in dict.fromkeys(bytes(a) for a in argv[2:])]
    return _delete(ctx, [key for key in keys if live_value(ctx, key) is not None])


def _delete(ctx: Ctx, keys: list[bytes]) -> int:
    if keys:
        run_writes(ctx, [[b"DEL", *keys]])
        _count(ctx, "forgets", len(keys))
    return len(keys)


@command("AI.MEMORY|FORGET_SESSION", 3, "write", categories=f"@write {_CATS}", group="pion", since="0.1.0")
def memory_forget_session(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY FORGET_SESSION session: delete every memory of the session; the number deleted."""
    session = _name(argv[2], "session", MAX_SESSION_BYTES)
    index = _memory_index(ctx)
    return _delete(ctx, [index.docs[d] for d in memory.session_docs(index, session)] if index is not None else [])


@command("AI.MEMORY|STATS", 2, "readonly fast", categories=f"@read {_CATS}", group="pion", since="0.1.0")
def memory_stats(ctx: Ctx, argv: list[bytes]):
    """AI.MEMORY STATS: this database's memories and sessions, the vectors' width and model, and the
    server's counters (adds, dedups, recalls, hybrid_recalls, forgets)."""
    index = _memory_index(ctx)
    meta = getattr(live_value(ctx, memory.OWNED.meta_key), "fields", None) or {}
    counts = ctx.server.parts.agent_memory or dict.fromkeys(COUNTERS, 0)
    out: dict[bytes, Any] = {
        b"memories": len(index.docs) if index is not None else 0,
        b"sessions": len(index.tags["s"].values) if index is not None else 0,
        b"dim": memory.OWNED.width(index) if index is not None else 0,
        b"model": bytes(meta.get(b"model", b"")),
        b"index": memory.INDEX_NAME.encode(),
    }
    out.update({name.encode(): counts[name] for name in COUNTERS})
    return out



class OwnedIndexes(Component):
    """At start, after recovery and search's rebuild: the semantic cache's and agent memory's
    indexes again, in every database whose marker says it had one."""

    name = "ai-indexes"

    def __init__(self, server: Any) -> None:
        self.server = server

    async def start(self) -> None:
        srv = self.server
        eng = srv.parts.search
        if eng is None:
            return
        for dbs in srv.all_db_lists():
            for db in dbs:
                for owned in (cache.OWNED, memory.OWNED):
                    owned.recreate(eng, db, eng.values)
