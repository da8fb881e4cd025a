"""FT.SEARCH, FT.EXPLAIN and FT.EXPLAINCLI.

FT.SEARCH evaluates the filter part of a query on the event loop; a KNN over an HNSW field or a
large FLAT field runs in the worker pool (``pion.server.deferred``: numpy and usearch release the
GIL), so other clients go on meanwhile; small ones run inline. Inside MULTI, scripts and replay
everything runs inline. Replies are RediSearch's shapes (``search_replies``).
"""

from __future__ import annotations

from typing import Any

from pion.protocol.errors import ReplyError
from pion.server import deferred
from pion.server.commands.search.admin import engine
from pion.server.commands.search.replies import field_value, live_value, query_budget, renew, search_reply
from pion.server.context import Ctx
from pion.server.registry import command
from pion.vector import highlight, knn_fast, query_exec, search
from pion.vector.geoshape import PREDICATES as GEOSHAPE_PREDICATES
from pion.vector.query_parser import Node, parse_query

_CATS = "@search"
#: a KNN over at least this many vectors goes to the worker pool (smaller: inline is cheaper)
DEFER_MIN_VECTORS = 4096
#: a cached KNN plan goes to the worker pool when its search is expected to take this long (the
#: field's running cost): a shorter one costs the loop less inline than the thread hand-off does
DEFER_MIN_SECONDS = 0.001


def default_dialect(ctx: Ctx) -> int:
    try:
        return int(engine(ctx).config.get("DEFAULT_DIALECT", "1"))
    except ValueError:
        return 1


def _heavy(index, knn) -> bool:
    vec = index.vectors.get(knn.field) if knn is not None else None
    return vec is not None and (vec.graph is not None or len(vec) >= DEFER_MIN_VECTORS)


def _sort_loader(ctx: Ctx, index):
    def load(key: bytes, name: str) -> Any:
        value = live_value(ctx, key)
        return None if value is None else field_value(index, value, name, 2)
    return load


@command("FT.SEARCH", -3, "readonly", categories="@search @read", group="search", since="1.0.0")
def ft_search(ctx: Ctx, argv: list[bytes]):
    """FT.SEARCH index query [NOCONTENT] [VERBATIM] [WITHSCORES] [FILTER ...] [RETURN ...] [SORTBY ...]
    [LIMIT offset num] [PARAMS n name value ...] [DIALECT d] ..."""
    eng = engine(ctx)
    name = argv[1].decode("utf-8", "replace")
    index = eng.get(ctx.db, name, search_error=True)
    dialect = default_dialect(ctx)
    fast = knn_fast.lookup(index, argv, dialect)
    if fast is not None:
        return _knn_fast(ctx, eng, name, index, *fast)
    req = search.parse_search(argv, dialect)
    if req.summary is not None:
        highlight.check(index, req.summary, req.returns)
    if b"=>" in argv[2] and req.summary is None:
        fast = knn_fast.compile_plan(index, argv, req, dialect)
        if fast is not None:
            return _knn_fast(ctx, eng, name, index, *fast)
    plan = search.plan(index, req, budget=query_budget(ctx, req))
    if plan.job is None or plan.timed_out:
        total, rows = search.finish(plan, None, _sort_loader(ctx, index))
        return search_reply(ctx, index, total, rows, req, plan)
    if deferred.can_defer(ctx) and _heavy(index, plan.query.knn):
        def finish(ctx2: Ctx, results: list) -> Any:
            if eng.resolve(ctx2.db.id, name) is not index:
                raise ReplyError("The index was dropped before the query could be executed")
            renew(plan)
            total, rows = search.finish(plan, results[0], _sort_loader(ctx2, index))
            return search_reply(ctx2, index, total, rows, req, plan)
        return deferred.Deferred([plan.job], finish)
    total, rows = search.finish(plan, plan.job(), _sort_loader(ctx, index))
    return search_reply(ctx, index, total, rows, req, plan)


def _knn_fast(ctx: Ctx, eng, name: str, index, plan: knn_fast.KnnPlan, blob: bytes):
    """A cached KNN plan (``vector.knn_fast``): the search in the worker pool when it is heavy,
    the rows checked and the reply built on the loop.

    In the pool the query holds the read lock of a sliced query (``pion.server.slices``: the
    handler's Deferred keeps it until it answers), so a write to a key its index covers waits
    and its index is frozen; ``finish`` still indexes what is queued for other indexes (and, when
    the query was not sliced, for this one) and ``_live_page`` drops what is gone regardless."""
    job = knn_fast.job(index, plan, blob)
    if deferred.can_defer(ctx) and getattr(job, "expected_s", 1.0) >= DEFER_MIN_SECONDS:
        def finish(ctx2: Ctx, results: list) -> Any:
            if eng.resolve(ctx2.db.id, name) is not index:
                raise ReplyError("The index was dropped before the query could be executed")
            eng.catch_up()  # writes meanwhile (none to this index while it is frozen)
            total, found = _live_page(ctx2, index, plan, blob, results[0])
            return _knn_reply(ctx2, index, plan, total, found)
        return deferred.Deferred([job], finish)
    total, found = _live_page(ctx, index, plan, blob, job())
    return _knn_reply(ctx, index, plan, total, found)


def _live_page(ctx: Ctx, index, plan: knn_fast.KnnPlan, blob: bytes, result) -> tuple[int, list]:
    """The page of live results: a result whose document was removed from the index meanwhile,
    or whose key expired (lazy expiry goes on under a query's read lock while the index stays
    frozen, so the index still lists it), is left out and the search made again inline (atomic,
    on the loop) with that many more neighbours, until K live ones or the documents run out."""
    db = ctx.db
    alive = (lambda key: db.peek(key) is not None) if db.expires else None
    total, found, left_out = knn_fast.page(index, plan, result, alive)
    extra = 0
    while left_out > extra and len(result[0]) >= plan.knn.k + extra:
        extra = left_out
        result = knn_fast.job(index, plan, blob, count=False, extra=extra)()
        total, found, left_out = knn_fast.page(index, plan, result, alive)
    return total, found


def _knn_reply(ctx: Ctx, index, plan: knn_fast.KnnPlan, total: int, found: list) -> Any:
    req = plan.req
    if not req.nocontent:
        alias = plan.alias
        rows = [search.Row(doc, key, 0.0, {alias: dist}) for doc, key, dist in found]
        return search_reply(ctx, index, total, rows, req)
    db = ctx.db
    expires = db.expires
    if expires:  # an expired key is never answered (the check a field load would make)
        keys = [key for _, key, _ in found if key not in expires or live_value(ctx, key) is not None]
    else:
        keys = [key for _, key, _ in found]
    if ctx.client.proto >= 3:
        return {b"attributes": [], b"format": b"STRING", b"results": [{b"id": key, b"values": []} for key in keys],
                b"total_results": total, b"warning": []}
    return [total, *keys]


# -- FT.EXPLAIN -----------------------------------------------------------------------------------


def explain_lines(node: Node, indent: int = 0) -> list[str]:
    pad = "  " * indent
    kind = node.kind
    if kind in ("and", "or"):
        head = "INTERSECT {" if kind == "and" else "UNION {"
        lines = [pad + head]
        for child in node.children:
            lines += explain_lines(child, indent + 1)
        return lines + [pad + "}"]
    if kind in ("not", "opt"):
        lines = [pad + ("NOT {" if kind == "not" else "OPTIONAL {")]
        lines += explain_lines(node.children[0], indent + 1)
        return lines + [pad + "}"]
    if kind == "fields":
        inner = explain_lines(node.children[0], indent)
        return [pad + "@" + "|".join(node.fields or ()) + ":" + inner[0].strip()] + inner[1:]
    if kind == "term":
        return [pad + node.value]
    if kind == "phrase":
        return [pad + "INTERSECT {"] + [pad + "  " + w for w in node.value] + [pad + "}"]
    if kind in ("prefix", "suffix", "infix"):
        mark = {"prefix": f"PREFIX{{{node.value}*}}", "suffix": f"SUFFIX{{*{node.value}}}",
                "infix": f"INFIX{{*{node.value}*}}"}[kind]
        return [pad + mark]
    if kind == "fuzzy":
        return [pad + f"FUZZY{{{node.value}}}"]
    if kind == "wildcard":
        return [pad + f"WILDCARD{{{node.value}}}"]
    if kind == "tag":
        lines = [pad + f"TAG:@{node.fields[0]} {{"]  # type: ignore[index]
        lines += [pad + "  " + value for _, value in node.value]
        return lines + [pad + "}"]
    if kind == "numeric":
        lo, hi, lo_ex, hi_ex = node.value
        return [pad + f"NUMERIC {{{_num(lo)} <{'' if lo_ex else '='} @{node.fields[0]} <{'' if hi_ex else '='} {_num(hi)}}}"]  # type: ignore[index]
    if kind == "geo":
        lon, lat, radius = node.value
        return [pad + f"GEO @{node.fields[0]}:{{{_num(lon)},{_num(lat)} --> {_num(radius)} m}}"]  # type: ignore[index]
    if kind == "geoshape":
        return [pad + f"GEOSHAPE{{{GEOSHAPE_PREDICATES[node.value[0]]} {node.value[1]}}}"]
    if kind == "vrange":
        return [pad + f"VECTOR {{@{node.fields[0]} VECTOR_RANGE {_num(node.value[0])}}}"]  # type: ignore[index]
    if kind == "missing":
        return [pad + f"ISMISSING{{{node.fields[0]}}}"]  # type: ignore[index]
    if kind == "all":
        return [pad + "<WILDCARD>"]
    return [pad + "<EMPTY>"]


def _num(value: float) -> str:
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return str(int(value)) if value == int(value) else repr(value)


def _explain(ctx: Ctx, argv: list[bytes]) -> list[str]:
    eng = engine(ctx)
    index = eng.get(ctx.db, argv[1].decode("utf-8", "replace"), search_error=True)
    req = search.parse_search(argv, default_dialect(ctx))  # FT.SEARCH's options are accepted
    query = parse_query(req.query, req.dialect, req.params)
    query_exec.check_phonetic(query.root, index.definition)
    lines = explain_lines(query.root)
    if query.knn is not None:
        knn = query.knn
        lines = [f"VECTOR {{K={knn.k} nearest vectors to `${'BLOB'}` in vector index associated with field @{knn.field}"
                 + (f", yields distance as `{knn.alias}`" if knn.alias else "") + "}"] + \
                (["  FILTER {"] + ["    " + line for line in lines] + ["  }"] if query.root.kind not in ("all", "none") else [])
    return lines


@command("FT.EXPLAIN", -3, "readonly", categories="@search", group="search", since="1.0.0")
def ft_explain(ctx: Ctx, argv: list[bytes]):
    """FT.EXPLAIN index query [DIALECT d]"""
    return ("\n".join(_explain(ctx, argv)) + "\n").encode()


@command("FT.EXPLAINCLI", -3, "readonly", categories="@search", group="search", since="1.0.0")
def ft_explaincli(ctx: Ctx, argv: list[bytes]):
    """FT.EXPLAINCLI index query [DIALECT d]"""
    return [line.encode() for line in _explain(ctx, argv)] + [b""]
