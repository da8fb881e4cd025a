"""Shared reply building for the FT.* commands: loading a result's fields from the keyspace and
RediSearch's FT.SEARCH shapes in RESP2 (flat array) and RESP3 (the ``results`` map).

Field values come from the stored document at reply time, as RediSearch loads them: every hash
field (or ``$`` for JSON) unless RETURN names some; a RETURN name may be an attribute, a hash field
or a JSONPath. JSON values are answered as RediSearch does in DIALECT 1-2 (a string as its text,
anything else as JSON) and as a JSON array of every match in DIALECT 3+.
"""

from __future__ import annotations

import math
import time
from typing import Any

from pion.protocol.resp import format_double
from pion.server.context import Ctx
from pion.storage.budget import TIMEOUT_TEXT, UNLIMITED, Budget, QueryTimeout, timeout_ms
from pion.storage.hash_value import HashValue
from pion.storage.json_path import JsonPathError, Path
from pion.storage.json_value import JsonValue, dumps
from pion.vector import highlight, score_explain
from pion.vector.expressions import format_value
from pion.vector.index import SearchIndex


def live_value(ctx: Ctx, key: bytes) -> Any:
    """The key's value, or None once deleted or expired (an expired key is removed, as on access)."""
    return ctx.db.peek(key)


def engine_of(ctx: Ctx):
    from pion.server.commands.search.admin import engine

    return engine(ctx)


def number_text(value: float) -> bytes:
    if value == int(value) and abs(value) < 1e17:
        return str(int(value)).encode()
    return format_double(value)


def _json_field(root: Any, identifier: str, dialect: int) -> bytes | None:
    try:
        found = Path(identifier).compile().values(root)
    except JsonPathError:
        return None
    if not found:
        return None
    if dialect >= 3:
        return dumps(found).encode()
    first = found[0]
    if isinstance(first, str):
        return first.encode()
    return dumps(first).encode()


def field_value(index: SearchIndex, value: Any, name: str, dialect: int) -> bytes | None:
    """A RETURN/LOAD name's value: attribute first, then a raw hash field or JSONPath."""
    spec = index.definition.field(name)
    identifier = spec.identifier if spec is not None else name
    if value.__class__ is HashValue:
        raw = value.fields.get(identifier.encode())
        return bytes(raw) if raw is not None else None
    if value.__class__ is JsonValue:
        if spec is None and not (name.startswith("$") or name.startswith(".")):
            return None
        return _json_field(value.root, identifier, dialect)
    return None


def row_fields(index: SearchIndex, value: Any, extras: dict[str, Any], returns: list[tuple[str, str]] | None,
               dialect: int, sortby: str | None = None) -> list[tuple[bytes, Any]]:
    """A result's fields. As RediSearch builds the row, the SORTBY property comes first: before the
    hash's fields or the JSON's ``$`` (where RETURN is not given), before the other RETURN names."""
    out: list[tuple[bytes, Any]] = []
    if returns is None:
        skip = None
        if sortby is not None:
            if sortby in extras:
                out.append((sortby.encode(), _extra_text(extras[sortby])))
            else:
                found = field_value(index, value, sortby, dialect)
                if found is not None:
                    out.append((sortby.encode(), found))
                    spec = index.definition.field(sortby)
                    skip = (spec.identifier if spec is not None else sortby).encode()
        if value.__class__ is HashValue:
            out.extend((bytes(f), bytes(v)) for f, v in value.fields.items() if f != skip)
        elif value.__class__ is JsonValue:
            out.append((b"$", value.dumps().encode()))
        for name, extra in extras.items():
            if name != sortby:
                out.append((name.encode(), _extra_text(extra)))
        return out
    if sortby is not None and any(name == sortby for name, _ in returns[1:]):
        returns = sorted(returns, key=lambda item: item[0] != sortby)  # stable: the rest keep their order
    for name, alias in returns:
        if name in extras:
            out.append((alias.encode(), _extra_text(extras[name])))
            continue
        found = field_value(index, value, name, dialect)
        if found is not None:
            out.append((alias.encode(), found))
    return out


def _summarized(index: SearchIndex, plan, row, fields: list, is_json: bool) -> list:
    """HIGHLIGHT / SUMMARIZE on a result's fields: its text re-tokenised against the terms the
    query matched in this document (``vector.highlight``)."""
    req = plan.req
    terms = highlight.matched_terms(plan.query.root, plan.ctx, row.doc_id)
    fields = highlight.apply(index, req.summary, req.fields_order, terms, fields, is_json, req.language, req.sortby,
                             frozenset(name.encode() for name in row.extras))
    return highlight.order_fields(fields, req.summary, req.fields_order, req.returns is not None, req.sortby)


def _extra_text(value: Any) -> bytes:
    if isinstance(value, float):
        return format_value(value).encode()  # RediSearch's num_to_str: an integer, else %.12g
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def score_text(score: float) -> bytes:
    """A WITHSCORES score as RediSearch replies it on Redis 7.2+/8 (``RedisModule_ReplyWithDouble``
    through ``fpconv_dtoa``): the shortest text that reads back as the same double, an integer
    without a fraction."""
    if math.isfinite(score):
        if score == int(score) and abs(score) < 1e17:
            return str(int(score)).encode()
        return repr(score).encode()
    return format_double(score)


def sortkey_text(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return b"#" + number_text(float(value))
    return b"$" + str(value).encode()


def _payload(index: SearchIndex, value: Any) -> bytes | None:
    field = index.definition.payload_field
    if field is None or value.__class__ is not HashValue:
        return None
    raw = value.fields.get(field.encode())
    return bytes(raw) if raw is not None else None


def query_budget(ctx: Ctx, req) -> Budget:
    """The query's time budget: its TIMEOUT argument, else FT.CONFIG's TIMEOUT (0: none), and
    FT.CONFIG's ON_TIMEOUT policy copied onto the request. Log replay has none."""
    config = engine_of(ctx).config
    req.on_timeout = config.get("ON_TIMEOUT", "return").lower()
    req.min_prefix = int(config.get("MINPREFIX", "2"))  # FT.CONFIG's expansion limits, read per query
    req.max_expansions = int(config.get("MAXEXPANSIONS", "200"))
    if ctx.replaying:
        return UNLIMITED
    ms = getattr(req, "timeout_ms", None)
    if ms is None:
        ms = timeout_ms(config)
    return Budget(ms)


def renew(plan) -> None:
    """After the KNN ran in the worker pool: the loop's part gets a budget of its own (time
    in the pool holds no other client, the budget bounds what holds the loop)."""
    plan.ctx.budget = Budget(plan.ctx.budget.ms)


def timeout_warnings(timed_out: bool) -> list[bytes]:
    """RediSearch's warning for a query cut short under ON_TIMEOUT RETURN."""
    return [TIMEOUT_TEXT.encode()] if timed_out else []


def search_reply(ctx: Ctx, index: SearchIndex, total: int, rows: list, req, plan=None, timed_out: bool = False) -> Any:
    """FT.SEARCH's reply for rows of ``vector.search.Row``; loading them ticks the plan's budget
    (past it: the error, or under RETURN the rows loaded so far and the warning)."""
    resp3 = ctx.client.proto >= 3
    entries = []
    budget = plan.budget if plan is not None else UNLIMITED
    if plan is not None and plan.timed_out:  # cut short before (RETURN): its rows load under a budget of their own
        budget = Budget(budget.ms)
    for row in rows:
        try:
            budget.tick(8)
        except QueryTimeout as exc:
            plan.cut_short(exc)
            break
        value = live_value(ctx, row.key)
        fields = None
        if not req.nocontent:
            if value is None:
                continue
            fields = row_fields(index, value, row.extras, req.returns, req.dialect, req.sortby)
            summary = getattr(req, "summary", None)
            if summary is not None and plan is not None:
                profile = plan.ctx.profile
                started = time.perf_counter() if profile is not None else 0.0
                fields = _summarized(index, plan, row, fields, value.__class__ is JsonValue)
                if profile is not None:  # FT.PROFILE's Highlighter
                    profile.highlight_ms += (time.perf_counter() - started) * 1000.0
        elif value is None:
            continue
        entries.append((row, fields, _payload(index, value) if req.withpayloads else None))
    if plan is not None and plan.ctx.profile is not None:
        plan.ctx.profile.loaded = len(entries)
    if resp3:
        results = []
        for row, fields, payload in entries:
            item: dict[bytes, Any] = {b"id": row.key}
            if req.withscores:
                item[b"score"] = float(row.score)
                if req.explainscore and plan is not None:
                    item[b"score"] = [float(row.score), score_explain.explain(plan, row.doc_id, row.score)]
            if req.withpayloads:
                item[b"payload"] = payload
            if req.withsortkeys:
                item[b"sortkey"] = sortkey_text(row.sort_value)
            if fields is not None:
                item[b"extra_attributes"] = {name: val for name, val in fields}
            item[b"values"] = []
            results.append(item)
        return {b"attributes": [], b"format": b"STRING", b"results": results,
                b"total_results": total, b"warning": timeout_warnings(timed_out or (plan is not None and plan.timed_out))}
    out: list[Any] = [total]
    for row, fields, payload in entries:
        out.append(row.key)
        if req.withscores:
            if req.explainscore and plan is not None:
                out.append([score_text(row.score), score_explain.explain(plan, row.doc_id, row.score)])
            else:
                out.append(score_text(row.score))
        if req.withpayloads:
            out.append(payload)
        if req.withsortkeys:
            out.append(sortkey_text(row.sort_value))
        if fields is not None:
            flat: list[Any] = []
            for name, val in fields:
                flat.append(name)
                flat.append(val)
            out.append(flat)
    return out
