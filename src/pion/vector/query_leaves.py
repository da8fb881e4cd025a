"""The leaves of a query tree that filter without text positions: TAG, NUMERIC, GEO, GEOSHAPE,
the empty value (``''`` on INDEXEMPTY fields), ``ismissing`` and a VECTOR_RANGE.

Split from ``query_exec`` (which walks the tree and owns the text terms, phrases and scoring)
because each of these reads one field's own index and returns its documents with score 0, so they
share nothing with the positional code. ``query_exec`` dispatches to them; ``query_profile``
reuses ``field_spec`` and ``tag_matches`` to describe a TAG node as RediSearch's profile does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.protocol.errors import ReplyError
from pion.vector import geoshape, text
from pion.vector.query_parser import Node

if TYPE_CHECKING:
    from pion.vector.query_exec import ExecContext

Hits = dict[int, float]
EMPTY_NOT_INDEXED = "Use `INDEXEMPTY` in field creation in order to index and query for empty strings"


def field_spec(ctx: ExecContext, node: Node, kind: str):
    name = node.fields[0]  # type: ignore[index]
    spec = ctx.index.definition.field(name)
    if spec is None:
        raise ReplyError(f"Unknown field at offset 0 near {name}")
    if spec.type != kind:
        raise ReplyError(f"Field `{name}` is not a {kind.lower()} field" if kind != "TAG" else
                         f"Field {name} is not a TAG field")
    return spec


def tag(node: Node, ctx: ExecContext) -> Hits:
    spec = field_spec(ctx, node, "TAG")
    tags = ctx.index.tags[spec.name]
    out: set[int] = set()
    for kind, raw in node.value:
        value = raw if spec.case_sensitive else text.fold(raw)
        if kind == "exact":
            value = value.strip()
            if not value and spec.name not in ctx.index.empty:
                raise ReplyError(EMPTY_NOT_INDEXED)
            out |= tags.values.get(value, set())
            continue
        for tag, docs in tags.values.items():
            ctx.budget.tick()
            if tag_matches(kind, value, tag):
                out |= docs
    return dict.fromkeys(out, 0.0)


def tag_matches(kind: str, value: str, tag: str) -> bool:
    if kind == "prefix":
        return tag.startswith(value)
    if kind == "suffix":
        return tag.endswith(value)
    if kind == "infix":
        return value in tag
    return text.wildcard_match(value, tag)


def numeric(node: Node, ctx: ExecContext) -> Hits:
    spec = field_spec(ctx, node, "NUMERIC")
    lo, hi, lo_ex, hi_ex = node.value
    return dict.fromkeys(ctx.index.numerics[spec.name].range(lo, hi, lo_ex, hi_ex), 0.0)


def geo(node: Node, ctx: ExecContext) -> Hits:
    spec = field_spec(ctx, node, "GEO")
    lon, lat, radius = node.value
    return dict.fromkeys(ctx.index.geos[spec.name].within(lon, lat, radius), 0.0)


def geoshape_leaf(node: Node, ctx: ExecContext) -> Hits:
    """``@f:[WITHIN $shape]``: a field that is not GEOSHAPE matches nothing, as in RediSearch."""
    predicate, wkt = node.value
    try:
        shape = geoshape.parse_wkt(wkt)
    except geoshape.GeometryError as exc:
        raise ReplyError(f"Error querying geoshape index: {exc}") from None
    field_index = ctx.index.geoshapes.get(node.fields[0])  # type: ignore[index]
    if field_index is None:
        return {}
    ctx.budget.tick(len(field_index.shapes) >> 4)
    return dict.fromkeys(field_index.query(predicate, shape), 0.0)


def empty_text(ctx: ExecContext, fields: list[str] | None) -> Hits:
    """``''``: the documents whose value of a TEXT field is empty, among the fields that index
    empty values (``INDEXEMPTY``). As RediSearch: with no ``@field`` every such field counts (and
    none means no match); a field restriction naming TEXT fields none of which indexes empty
    values is an error; one naming no TEXT field matches nothing."""
    definition = ctx.index.definition
    if fields is None:
        names = [spec.name for spec in definition.fields if spec.type == "TEXT"]
    else:
        names = [name for name in fields if (spec := definition.field(name)) is not None and spec.type == "TEXT"]
        if names and not any(name in ctx.index.empty for name in names):
            raise ReplyError(EMPTY_NOT_INDEXED)
    out: set[int] = set()
    for name in names:
        out |= ctx.index.empty.get(name, set())
    return dict.fromkeys(out, 0.0)


def missing(node: Node, ctx: ExecContext) -> Hits:
    name = node.fields[0]  # type: ignore[index]
    if ctx.index.definition.field(name) is None:
        raise ReplyError(f"Unknown field at offset 0 near {name}")
    if name not in ctx.index.missing:
        raise ReplyError("'ismissing' requires field to be defined with 'INDEXMISSING'")
    return dict.fromkeys(ctx.index.missing[name], 0.0)


def vector_range(node: Node, ctx: ExecContext) -> Hits:
    spec = field_spec(ctx, node, "VECTOR")
    radius, blob = node.value
    vec = ctx.index.vectors[spec.name]
    query = vec.prepare_query(blob)
    docs, dists = vec.plan_range(query, radius, None)()
    alias = node.attrs.get("yield_distance_as")
    if alias:
        for doc, dist in zip(docs.tolist(), dists.tolist(), strict=True):
            ctx.extras.setdefault(doc, {})[alias] = dist
    return dict.fromkeys(docs.tolist(), 0.0)
