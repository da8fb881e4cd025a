"""FT.AGGREGATE and FT.CURSOR READ/DEL.

The query part runs as FT.SEARCH's does (KNN in the worker pool when it is large); the pipeline
(``pion.vector.aggregate``) runs on the loop over the matching rows. RESP2 answers
``[total, [k, v, ...], ...]`` (``[[...], cursor]`` with WITHCURSOR); RESP3 answers RediSearch's map
``{attributes, format, results: [{extra_attributes, values}], total_results, warning}``.
"""

from __future__ import annotations

from typing import Any

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server import deferred
from pion.server.commands.search.admin import engine
from pion.server.commands.search.query import _heavy, default_dialect, vector_leg
from pion.server.commands.search.replies import field_value, live_value, query_budget, renew, timeout_warnings
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.hash_value import HashValue
from pion.storage.json_value import JsonValue
from pion.vector import aggregate, cursors, query_profile, search
from pion.vector.expressions import format_value

_CATS = "@search"
KEY = "__key"


def _loader(ctx: Ctx, index, dialect: int):
    def load(row: dict[str, Any], name: str) -> Any:
        key = row.get("\0key")
        if key is None:
            return None
        if name == KEY:
            return key.decode("utf-8", "replace")
        value = live_value(ctx, key)
        if value is None:
            return None
        if name == aggregate.LOAD_ALL:
            if value.__class__ is HashValue:
                for f, v in value.fields.items():
                    row.setdefault(f.decode("utf-8", "replace"), _text(bytes(v)))
            elif value.__class__ is JsonValue:
                row.setdefault("$", value.dumps())
            return None
        raw = field_value(index, value, name, dialect)
        return None if raw is None else _text(raw)
    return load


def _yielded(query) -> set[str]:
    """The properties the query itself adds to rows: the KNN and vector-range distance aliases."""
    out = {query.knn.alias} if query.knn is not None and query.knn.alias else set()
    stack = [query.root]
    while stack:
        node = stack.pop()
        alias = node.attrs.get("yield_distance_as")
        if alias:
            out.add(alias)
        stack.extend(node.children)
    return out


def _text(raw: bytes) -> str | bytes:
    """A loaded value as text for the pipeline's functions; bytes that are not UTF-8 (a vector blob)
    stay bytes, so the reply carries them intact as FT.SEARCH does."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _rows(plan, knn_result, addscores: bool) -> tuple[int, list[dict[str, Any]]]:
    total, page = search.finish(plan, knn_result)
    out = []
    for row in page:
        item: dict[str, Any] = {"\0key": row.key}
        item.update(row.extras)
        if addscores:
            item["__score"] = float(row.score)
        out.append(item)
    return total, out


def _render_rows(ctx: Ctx, rows: list[dict[str, Any]]) -> list[Any]:
    resp3 = ctx.client.proto >= 3
    out = []
    for row in rows:
        pairs = [(k.encode(), aggregate.render_value(v)) for k, v in row.items() if not k.startswith("\0")]
        if resp3:
            out.append({b"extra_attributes": dict(pairs), b"values": []})
        else:
            flat: list[Any] = []
            for k, v in pairs:
                flat += [k, v]
            out.append(flat)
    return out


def _reply(ctx: Ctx, total: int, rows: list[dict[str, Any]], cursor_id: int | None, timed_out: bool = False) -> Any:
    """RESP2 ``[total, row, ...]`` (a timeout under RETURN shows nowhere in RESP2, as in
    RediSearch); RESP3 the map, whose ``warning`` says ``Timeout limit was reached``."""
    rendered = _render_rows(ctx, rows)
    if ctx.client.proto >= 3:
        body: Any = {b"attributes": [], b"format": b"STRING", b"results": rendered,
                     b"total_results": total, b"warning": timeout_warnings(timed_out)}
    else:
        body = [total, *rendered]
    return [body, cursor_id] if cursor_id is not None else body


def _complete(ctx: Ctx, index, req, plan, knn_result, profile=None) -> Any:
    # total_results as RediSearch counts it for a pipeline that reads every row: the documents the query
    # matched, or after a GROUPBY the groups it made, before any later FILTER and LIMIT
    total, rows = _rows(plan, knn_result, req.addscores)
    names = {spec.name for spec in index.definition.fields}
    timed_out = plan.timed_out
    counts: dict[str, int] = {}
    if not timed_out:
        rows, timed_out = aggregate.run_pipeline(req, rows, _loader(ctx, index, req.dialect), names, plan.budget,
                                                 counts, profile)
    total = counts.get("groups", total)
    if req.cursor:
        eng = engine(ctx)
        cursor = eng.cursors.open(index, rows, req.cursor_count, cursors.max_idle(eng.config, req.cursor_maxidle), total)
        chunk, cid = eng.cursors.take(cursor)
        return _reply(ctx, total, chunk, cid, timed_out)
    if req.max_rows is not None:
        rows = rows[:req.max_rows]
    return _reply(ctx, total, rows, None, timed_out)



@command("FT.AGGREGATE", -3, "readonly", categories="@search @read", group="search", since="1.1.0")
def ft_aggregate(ctx: Ctx, argv: list[bytes]):
    """FT.AGGREGATE index query [LOAD ...] [GROUPBY ... REDUCE ...] [APPLY ...] [SORTBY ...] [FILTER ...]
    [LIMIT ...] [WITHCURSOR ...] [PARAMS ...] [DIALECT d]"""
    eng = engine(ctx)
    name = argv[1].decode("utf-8", "replace")
    index = eng.get(ctx.db, name, search_error=True)
    req = aggregate.parse_aggregate(argv, default_dialect(ctx))
    aggregate.cap_results(req, search.max_results(eng.config, "MAXAGGREGATERESULTS"))
    budget = query_budget(ctx, req)
    plan = search.plan(index, req.search_request(), budget=budget)
    aggregate.check_properties(req, {spec.name for spec in index.definition.fields}, _yielded(plan.query))
    if plan.job is None or plan.timed_out:
        return _complete(ctx, index, req, plan, None)
    if deferred.can_defer(ctx) and _heavy(index, plan.query.knn):
        def finish(ctx2: Ctx, results: list) -> Any:
            if eng.resolve(ctx2.db.id, name) is not index:
                raise ReplyError("The index was dropped before the query could be executed")
            renew(plan)
            return _complete(ctx2, index, req, plan, results[0])
        return deferred.Deferred([plan.job], finish)
    return _complete(ctx, index, req, plan, plan.job())


def profiled_aggregate(ctx: Ctx, argv: list[bytes], profile) -> Any:
    """FT.AGGREGATE for FT.PROFILE, inline: ``profile`` records the iterator tree, the Index stage
    and one result processor per pipeline step (LOAD, APPLY, FILTER, GROUPBY, SORTBY, LIMIT)."""
    index = engine(ctx).get(ctx.db, argv[1].decode("utf-8", "replace"), search_error=True)
    req = aggregate.parse_aggregate(argv, default_dialect(ctx))
    aggregate.cap_results(req, search.max_results(engine(ctx).config, "MAXAGGREGATERESULTS"))
    if req.cursor:
        raise ReplyError("FT.PROFILE does not support cursor")
    profile.search_stages = False
    started = query_profile.clock()
    plan = search.plan(index, req.search_request(), budget=query_budget(ctx, req), profile=profile)
    aggregate.check_properties(req, {spec.name for spec in index.definition.fields}, _yielded(plan.query))
    knn_result = vector_leg(plan, profile)
    count = len(plan.hits) if knn_result is None else len(knn_result[0])
    index_ms = (query_profile.clock() - started) * 1000.0 - profile.parse_ms - profile.pipeline_ms
    profile.stages.append(query_profile.Stage("Index", count, index_ms))
    reply = _complete(ctx, index, req, plan, knn_result, profile)
    profile.timed_out = plan.timed_out
    return reply


@command("FT.CURSOR", -2, "readonly", categories="@search @read", group="search", since="1.1.0")
def ft_cursor(ctx: Ctx, argv: list[bytes]):
    """FT.CURSOR READ index cursor_id [COUNT n] | DEL index cursor_id"""
    sub = argv[1].upper()
    if sub not in (b"READ", b"DEL", b"GC"):
        raise ReplyError(f"Unknown subcommand `{argv[1].decode('utf-8', 'replace')}`")
    if sub == b"GC":
        engine(ctx).cursors.expire()
        return 0
    if len(argv) < 4:
        raise ReplyError("ERR wrong number of arguments for 'ft.cursor' command")
    eng = engine(ctx)
    index = eng.get(ctx.db, argv[2].decode("utf-8", "replace"), error="Cursor not found")
    try:
        cid = int(argv[3])
    except ValueError:
        raise ReplyError("Bad cursor ID") from None
    if sub == b"DEL":
        if not eng.cursors.delete(cid, index):
            raise ReplyError("Cursor does not exist")
        return OK
    count = None
    if len(argv) >= 6 and argv[4].upper() == b"COUNT":
        try:
            count = max(1, int(argv[5]))
        except ValueError:
            raise ReplyError("Bad arguments for COUNT") from None
    cursor = eng.cursors.get(cid, index)
    if cursor is None:
        raise ReplyError("Cursor not found")
    chunk, next_id = eng.cursors.take(cursor, count)
    return _reply(ctx, cursor.total, chunk, next_id)


def number(value: float) -> bytes:
    return format_value(value).encode()
