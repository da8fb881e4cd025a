"""Search index administration (RediSearch's FT.* management commands): FT.CREATE, FT.DROPINDEX
(and the old FT.DROP), FT.INFO, FT._LIST, FT.ALTER, FT.ALIASADD/ALIASDEL/ALIASUPDATE,
FT.TAGVALS, and ``install``, which puts the search engine on a server.

The engine (``pion.vector.engine``) is ``server.parts.search``. Index definitions are
durable twice over: FT.CREATE/ALTER/DROPINDEX are logged like any write, and the snapshot carries
the definitions as the ``search`` extension; the documents are re-indexed from the keyspace
after a restart, in the background (FT.INFO ``indexing`` until done).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, SetReply
from pion.server.component import Component
from pion.server.context import Ctx
from pion.server.registry import command
from pion.vector.engine import UNKNOWN_INDEX, SearchEngine
from pion.vector.index import SearchIndex

_CATS = "@search"
#: MODULE LIST entries, with versions that make clients enable their features (RedisVL needs
#: search >= 2.6 and >= 2.8.10 for its newer paths; FT.HYBRID is Redis 8.4)
MODULES = ({b"name": b"search", b"ver": 80400, b"path": b"", b"args": []},
           {b"name": b"ReJSON", b"ver": 80400, b"path": b"", b"args": []})
MB = float(1 << 20)


def engine(ctx: Ctx) -> SearchEngine:
    eng = ctx.server.parts.search
    if eng is None:
        raise ReplyError("ERR the search engine is not enabled on this server")
    return eng


def install(server: Any) -> SearchEngine:
    """Wire the search engine: key and reset hooks, the event-loop scheduler, the startup
    rebuild, the snapshot extension, INFO ``# Search``, memory accounting and MODULE LIST."""
    from pion.storage.keyspace import now_ms

    eng = server.parts.search
    if eng is not None:
        return eng
    eng = server.parts.search = SearchEngine()

    def schedule(fn):
        try:
            asyncio.get_running_loop().call_soon(fn)
        except RuntimeError:  # no loop (a replay outside the server): run at once
            fn()

    def live(db, key):
        when = db.expires.get(key)
        if when is not None and when <= now_ms():
            return None
        return db.data.get(key)

    eng.scheduler = schedule
    eng.values = live
    eng.loading = lambda: bool(server.loading)
    eng.databases = lambda: [db for dbs in server.all_db_lists() for db in dbs]
    server.key_hooks.append(eng.key_changed)
    server.reset_hooks.append(eng.database_reset)
    server.parts.modules.extend(MODULES)
    persistence = server.parts.persistence
    if persistence is not None:  # HNSW graphs are saved beside the snapshot (vector/graph_store.py)
        eng.graph_dir = persistence.directory
    # with the log on, a clean stop writes no snapshot: the graphs are saved at stop instead
    server.add_component(SearchPart(eng, lambda: persistence is not None and bool(server.settings.appendonly)))
    memory = server.parts.memory
    if memory is not None and hasattr(memory, "extra_bytes"):
        memory.extra_bytes.append(eng.memory_bytes)
    tenants = server.parts.tenants
    if tenants is not None:  # a tenant's indexes count against its quota (issue #13, item 6)
        from pion.server.pubsub import TENANT_SHIFT
        from pion.server.security.tenants import owner_of

        tenants.usage_sources.append(
            lambda name: eng.memory_bytes_where(lambda db_id, owner=owner_of(name): db_id >> TENANT_SHIFT == owner))
    if persistence is not None:
        from pion.server.durability.persistence import SnapshotExtension

        persistence.snapshot_extensions.append(
            SnapshotExtension(name="search", dump=eng.dump, load=eng.load, files=eng.graph_files))
    return eng


def percent_indexed(index: SearchIndex) -> float:
    """FT.INFO ``percent_indexed``: the share of the initial scan done (1.0 when not indexing)."""
    return 1.0 if not index.indexing else (index.scan_done / index.scan_total if index.scan_total else 1.0)


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


# -- FT.CREATE / ALTER / DROPINDEX -----------------------------------------------------------------


@command("FT.CREATE", -2, "write denyoom", categories="@search", group="search", since="1.0.0")
def ft_create(ctx: Ctx, argv: list[bytes]):
    """FT.CREATE index [ON HASH|JSON] [PREFIX n prefix ...] ... SCHEMA field type [options] ..."""
    eng = engine(ctx)
    eng.catch_up()
    if len(argv) < 3:
        raise ReplyError(errors.wrong_arity("ft.create"))
    index = eng.create(ctx.db, argv)
    ctx.dirty()
    if index.definition.temporary:
        ctx.no_propagate()  # as in RediSearch, a TEMPORARY index is not persisted
    return OK


@command("FT.ALTER", -5, "write denyoom", categories="@search", group="search", since="1.0.0")
def ft_alter(ctx: Ctx, argv: list[bytes]):
    """FT.ALTER index [SKIPINITIALSCAN] SCHEMA ADD field type [options] ..."""
    eng = engine(ctx)
    eng.alter(ctx.db, _name(argv[1]), argv)
    ctx.dirty()
    return OK


def _drop(ctx: Ctx, argv: list[bytes], name: str):
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity(name))
    dd = len(argv) == 3
    if dd and argv[2].upper() not in (b"DD", b"KEEPDOCS"):
        raise ReplyError(f"Unknown argument `{_name(argv[2])}`")
    if name == "ft.drop":  # the old command deletes documents unless KEEPDOCS
        dd = not (len(argv) == 3 and argv[2].upper() == b"KEEPDOCS")
    elif dd:
        dd = argv[2].upper() == b"DD"
    eng = engine(ctx)
    index = eng.get(ctx.db, _name(argv[1]))
    keys = list(index.key_to_doc) if dd else []
    eng.drop(ctx.db, index.name)
    ctx.dirty()
    effects = [[b"FT.DROPINDEX", index.name.encode()]]
    deleted = [key for key in keys if ctx.db.delete(key)]
    if deleted:
        ctx.dirty(len(deleted))
        effects.append([b"DEL", *deleted])
    ctx.rewrite(*effects)  # replay deletes exactly these keys (the index is rebuilt only later)
    return OK


@command("FT.DROPINDEX", -2, "write", categories="@search @write @slow @dangerous", group="search", since="2.0.0")
def ft_dropindex(ctx: Ctx, argv: list[bytes]):
    """FT.DROPINDEX index [DD]"""
    return _drop(ctx, argv, "ft.dropindex")


@command("FT.DROP", -2, "write", categories="@search @write @slow @dangerous @admin", group="search", since="1.0.0")
def ft_drop(ctx: Ctx, argv: list[bytes]):
    """FT.DROP index [KEEPDOCS] (deprecated: FT.DROPINDEX)"""
    return _drop(ctx, argv, "ft.drop")


@command("FT._LIST", 1, "readonly", categories="@search @slow @admin", group="search", since="2.0.0")
def ft_list(ctx: Ctx, argv: list[bytes]):
    """FT._LIST"""
    return SetReply(name.encode() for name in engine(ctx).list_names(ctx.db))


# -- aliases -------------------------------------------------------------------------------------


@command("FT.ALIASADD", 3, "write denyoom", categories="@search", group="search", since="1.0.0")
def ft_aliasadd(ctx: Ctx, argv: list[bytes]):
    """FT.ALIASADD alias index"""
    engine(ctx).alias_add(ctx.db, _name(argv[1]), _name(argv[2]))
    ctx.dirty()
    return OK


@command("FT.ALIASUPDATE", 3, "write denyoom", categories="@search", group="search", since="1.0.0")
def ft_aliasupdate(ctx: Ctx, argv: list[bytes]):
    """FT.ALIASUPDATE alias index"""
    engine(ctx).alias_add(ctx.db, _name(argv[1]), _name(argv[2]), update=True)
    ctx.dirty()
    return OK


@command("FT.ALIASDEL", 2, "write", categories="@search", group="search", since="1.0.0")
def ft_aliasdel(ctx: Ctx, argv: list[bytes]):
    """FT.ALIASDEL alias"""
    engine(ctx).alias_del(ctx.db, _name(argv[1]))
    ctx.dirty()
    return OK


# -- FT.TAGVALS ----------------------------------------------------------------------------------


@command("FT.TAGVALS", 3, "readonly", categories="@search @read @admin @dangerous", group="search", since="1.0.0")
def ft_tagvals(ctx: Ctx, argv: list[bytes]):
    """FT.TAGVALS index field"""
    index = engine(ctx).get(ctx.db, _name(argv[1]))
    name = _name(argv[2])
    spec = index.definition.field(name)
    if spec is None:
        raise ReplyError(f"No such field `{name}`")
    if spec.type != "TAG":
        raise ReplyError(f"`{name}` is not a TAG field")
    return SetReply(tag.encode() for tag in sorted(index.tags[name].values))


# -- FT.INFO -------------------------------------------------------------------------------------


def _attribute(index: SearchIndex, spec, resp3: bool) -> Any:
    pairs: list[tuple[bytes, Any]] = [(b"identifier", spec.identifier.encode()), (b"attribute", spec.name.encode()),
                                      (b"type", spec.type.encode())]
    if spec.type == "TEXT":
        pairs.append((b"WEIGHT", float(spec.weight)))
    if spec.type == "TAG":
        pairs.append((b"SEPARATOR", spec.separator.encode()))
    if spec.type == "GEOSHAPE":
        pairs.append((b"coord_system", spec.coord_system.encode()))
    if spec.type == "VECTOR":
        params = spec.vector
        pairs += [(b"algorithm", params.algorithm.encode()), (b"data_type", params.data_type.encode()),
                  (b"dim", params.dim), (b"distance_metric", params.metric.encode())]
        if params.algorithm == "HNSW":
            pairs += [(b"M", params.m), (b"ef_construction", params.ef_construction),
                      (b"ef_runtime", params.ef_runtime), (b"epsilon", float(params.epsilon))]
        elif params.algorithm == "SVS-VAMANA":
            pairs += _svs_attributes(params)
    flags = [flag.encode() for flag in spec.flags()]
    if resp3:
        out = dict(pairs)
        out[b"flags"] = flags
        return out
    flat: list[Any] = []
    for key, value in pairs:
        flat += [key, value]
    return flat + flags


def _svs_attributes(params) -> list[tuple[bytes, Any]]:
    """An SVS-VAMANA field's FT.INFO keys, RediSearch 8.4's (``info_command.c``): no
    search_window_size or epsilon; ``compression`` is what runs, ``NO_COMPRESSION`` or, off
    Intel's LVQ build, ``GlobalSQ8`` for every kind (``vector/svs_graph``); ``training_threshold``
    when compressed (``reduced_dim`` only on an LVQ build, so never here)."""
    pairs: list[tuple[bytes, Any]] = [(b"graph_max_degree", params.graph_max_degree),
                                      (b"construction_window_size", params.construction_window_size),
                                      (b"compression", b"GlobalSQ8" if params.compression else b"NO_COMPRESSION")]
    if params.compression is not None:
        pairs.append((b"training_threshold", params.training_threshold))
    return pairs


def _errors_map(count: int, last: str, last_key: bytes, with_status: bool) -> dict[bytes, Any]:
    out = {b"indexing failures": count, b"last indexing error": last.encode(), b"last indexing error key": last_key}
    if with_status:
        out[b"background indexing status"] = b"OK"
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


@command("FT.INFO", -2, "readonly", categories="@search", group="search", since="1.0.0")
def ft_info(ctx: Ctx, argv: list[bytes]):
    """FT.INFO index"""
    eng = engine(ctx)
    index = eng.get(ctx.db, _name(argv[1]), error=UNKNOWN_INDEX)
    resp3 = ctx.client.proto >= 3
    definition = index.definition
    options = [opt.encode() for opt in ("NOFREQS", "NOFIELDS", "NOOFFSETS", "NOHL") if opt in definition.options]
    index_def: dict[bytes, Any] = {b"key_type": definition.key_type.encode(),
                                   b"prefixes": [bytes(p) for p in definition.prefixes]}
    if definition.filter:
        index_def[b"filter"] = definition.filter.encode()
    if definition.language != "english":
        index_def[b"default_language"] = definition.language.encode()
    if definition.language_field:
        index_def[b"language_field"] = definition.language_field.encode()
    index_def[b"default_score"] = float(definition.score)
    if definition.score_field:
        index_def[b"score_field"] = definition.score_field.encode()
    if definition.payload_field:
        index_def[b"payload_field"] = definition.payload_field.encode()
    index_def[b"indexes_all"] = b"false"
    docs = len(index)
    records = index.text.records
    inverted = index.text.memory_bytes()
    vector_bytes = index.vector_bytes()
    total_bytes = index.memory_bytes()
    percent = percent_indexed(index)
    # a map in RESP3 and a flat [key, value, ...] array in RESP2, as RediSearch answers (langchain-redis's
    # RedisChatMessageHistory reads it with list.index("prefixes") and so fails on RESP3, on Redis Stack alike)
    flat_def: list[Any] = []
    for key, value in index_def.items():
        flat_def += [key, value]
    reply: dict[bytes, Any] = {
        b"index_name": index.name.encode(),
        b"index_options": options,
        b"index_definition": index_def if resp3 else flat_def,
        b"attributes": [_attribute(index, spec, resp3) for spec in definition.fields],
        b"num_docs": docs,
        b"max_doc_id": index.next_doc - 1,
        b"num_terms": len(index.text.postings),
        b"num_records": records,
        b"inverted_sz_mb": inverted / MB,
        b"vector_index_sz_mb": vector_bytes / MB,
        b"total_inverted_index_blocks": len(index.text.postings),
        b"offset_vectors_sz_mb": 0.0,
        b"doc_table_size_mb": docs * 200 / MB,
        b"sortable_values_size_mb": 0.0,
        b"key_table_size_mb": sum(len(k) for k in index.key_to_doc) / MB,
        b"tag_overhead_sz_mb": sum(t.memory_bytes() for t in index.tags.values()) / MB,
        b"text_overhead_sz_mb": inverted / MB,
        b"total_index_memory_sz_mb": total_bytes / MB,
        b"geoshapes_sz_mb": sum(g.memory_bytes() for g in index.geoshapes.values()) / MB,
        b"records_per_doc_avg": _ratio(records, docs),
        b"bytes_per_record_avg": _ratio(inverted, records),
        b"offsets_per_term_avg": _ratio(0, records) if records else math.nan,
        b"offset_bits_per_record_avg": math.nan,
        b"hash_indexing_failures": index.failures,
        b"total_indexing_time": index.indexing_time * 1000.0,
        b"indexing": int(index.indexing),
        b"percent_indexed": float(percent),
        b"number_of_uses": index.uses,
        b"number_of_admin_ops": index.admin_ops,
        b"cleaning": 0,
        b"gc_stats": {b"bytes_collected": 0, b"total_ms_run": 0, b"total_cycles": 0, b"average_cycle_time_ms": math.nan,
                      b"last_run_time_ms": 0, b"gc_numeric_trees_missed": 0, b"gc_blocks_denied": 0},
        b"cursor_stats": eng_cursor_stats(ctx, index),
    }
    if definition.stopwords is not None:
        reply[b"stopwords_list"] = [w.encode() for w in sorted(definition.stopwords)]
    reply[b"dialect_stats"] = {f"dialect_{i + 1}".encode(): n for i, n in enumerate(index.dialects)}
    reply[b"Index Errors"] = _errors_map(index.failures, index.last_failure, index.last_failure_key, True)
    reply[b"field statistics"] = [
        {b"identifier": spec.identifier.encode(), b"attribute": spec.name.encode(),
         b"Index Errors": _errors_map(*index.field_failures.get(spec.name, (0, "N/A", b"N/A")), False)}
        for spec in definition.fields
    ]
    return reply


def eng_cursor_stats(ctx: Ctx, index: SearchIndex) -> dict[bytes, Any]:
    cursors = engine(ctx).cursors
    total = cursors.count(index)
    every = cursors.count(None)
    return {b"global_idle": every, b"global_total": every, b"index_capacity": 128, b"index_total": total}


class SearchPart(Component):
    """The search engine: indexes rebuilt from the loaded keyspace at start, closed at stop,
    temporary indexes expired in the cron, INFO ``# Search`` (before ``# Pion``)."""

    name = "search"
    info_name = "search"

    def __init__(self, eng: SearchEngine, save_at_stop: Callable[[], bool] = lambda: False) -> None:
        self.eng = eng
        self.save_at_stop = save_at_stop

    async def start(self) -> None:
        self.eng.start()

    async def stop(self) -> None:
        if self.save_at_stop() and self.eng.graph_dir is not None:
            try:  # the next start loads these graphs instead of rebuilding them
                job = self.eng.graph_files()
                if job is not None:
                    await asyncio.get_running_loop().run_in_executor(None, job, self.eng.graph_dir)
            except Exception:  # noqa: BLE001 - a graph not saved is rebuilt at the next start
                import logging

                logging.getLogger("pion.search").exception("HNSW graphs not saved at shutdown")
        self.eng.stop()

    def cron(self) -> None:
        self.eng.expire_temporary()

    def info_section(self) -> dict[str, Any]:
        return self.eng.info()
