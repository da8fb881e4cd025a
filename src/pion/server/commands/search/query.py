"""FT.SEARCH, FT.EXPLAIN and FT.EXPLAINCLI.

FT.SEARCH evaluates the filter part of a query on the event loop; a KNN over an HNSW field or a
large FLAT field runs in the worker pool (``pion.server.deferred``: numpy and usearch release the
GIL), so other clients go on meanwhile; small ones run inline. Inside MULTI, scripts and replay
everything runs inline. Replies are RediSearch's shapes (``search_replies``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pion.protocol.errors import ReplyError
from pion.server import deferred, search_pool
from pion.server.commands.search.admin import engine
from pion.server.commands.search.replies import (
    field_value,
    live_value,
    query_budget,
    renew,
    search_reply,
    timeout_warnings,
)
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.budget import QueryTimeout
from pion.storage.keyspace import now_ms
from pion.vector import highlight, knn_fast, query_exec, search
from pion.vector import text as text_mod
from pion.vector.geoshape import PREDICATES as GEOSHAPE_PREDICATES
from pion.vector.query_parser import Node, parse_query

_CATS = "@search"
#: a KNN over at least this many vectors goes to the worker pool (smaller: inline is cheaper)
DEFER_MIN_VECTORS = 4096
#: a cached KNN plan goes to the worker pool when its search is expected to take this long (the
#: field's running cost): a shorter one costs the loop less inline than the thread hand-off does
DEFER_MIN_SECONDS = 0.001
#: ... or, for an exact scan (a selective prefilter's rows), this long while other clients'
#: queries run meanwhile (``search_pool.should_offload``): then the loop serves them while numpy
#: scans without the GIL; a scan of a few hundred rows stays inline. A graph search below
#: ``DEFER_MIN_SECONDS`` stays inline even then: its Python around usearch (the graph's read
#: lock, the EF setting, the stale-entry checks) takes the GIL back several times per search, and
#: on a loaded 2-core machine that contention cost more than the overlap gave (measured against
#: the loop-only path at load average 9-11: 0.65-1.03x at 8 clients; the scans 1.04-1.41x)
OFFLOAD_MIN_SECONDS = 0.00005


def default_dialect(ctx: Ctx) -> int:
    try:
        return int(engine(ctx).config.get("DEFAULT_DIALECT", "1"))
    except ValueError:
        return 1


def _heavy(index, knn) -> bool:
    vec = index.vectors.get(knn.field) if knn is not None else None
    return vec is not None and (vec.graph is not None or len(vec) >= DEFER_MIN_VECTORS)


def _cpu_timed(job):
    """``job`` (a KNN search) noting the CPU time it took in ``run.cpu`` (seconds): the kernel does
    not stop half-way, so a search that alone worked longer than the query's TIMEOUT is reported
    as RediSearch reports a timeout (RESP3's warning under RETURN, the error under FAIL), with its
    results whole. CPU time, not wall time: a thread waiting for a core on a busy box did no work."""
    def run():
        began = time.thread_time()
        try:
            return job()
        finally:
            run.cpu = time.thread_time() - began
    run.cpu = 0.0
    for name in ("expected_s", "exact"):  # what the worker policy reads (see _knn_fast)
        if hasattr(job, name):
            setattr(run, name, getattr(job, name))
    return run


def _knn_over_budget(run, budget_ms: float, on_timeout: str) -> bool:
    if not budget_ms or budget_ms <= 0 or run.cpu * 1000.0 <= budget_ms:
        return False
    if on_timeout != "return":
        raise QueryTimeout()
    return True


def _sort_loader(ctx: Ctx, index):
    def load(key: bytes, name: str) -> Any:
        value = live_value(ctx, key)
        return None if value is None else field_value(index, value, name, 2)
    return load


@command("FT.SEARCH", -3, "readonly", categories=f"@read {_CATS} @slow", group="search", since="1.0.0")
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
    job = _cpu_timed(plan.job)
    if deferred.can_defer(ctx) and _heavy(index, plan.query.knn):
        def finish(ctx2: Ctx, results: list) -> Any:
            if eng.resolve(ctx2.db.id, name) is not index:
                raise ReplyError("The index was dropped before the query could be executed")
            renew(plan)
            if _knn_over_budget(job, plan.budget.ms, req.on_timeout):
                plan.timed_out = True
            total, rows = search.finish(plan, search.live_knn(plan, results[0], _alive(ctx2)),
                                        _sort_loader(ctx2, index))
            return search_reply(ctx2, index, total, rows, req, plan)
        return deferred.Deferred([job], finish, executor=search_pool.worker())
    result = job()
    if _knn_over_budget(job, plan.budget.ms, req.on_timeout):
        plan.timed_out = True
    total, rows = search.finish(plan, search.live_knn(plan, result, _alive(ctx)), _sort_loader(ctx, index))
    return search_reply(ctx, index, total, rows, req, plan)


def _alive(ctx: Ctx):
    """Whether a result's key still exists, for ``search.live_knn``; None: no key has a TTL (a
    deleted document leaves the index at once, or waits while a query reads it: its key too).
    An expired key is not removed here (the reply's load does that, counting the read)."""
    db = ctx.db
    expires = db.expires
    if not expires:
        return None
    now = now_ms()
    return lambda key: key in db.data and (key not in expires or expires[key] > now or db.loading)


def _knn_fast(ctx: Ctx, eng, name: str, index, plan: knn_fast.KnnPlan, blob: bytes):
    """A cached KNN plan (``vector.knn_fast``): the search in the search worker
    (``server/search_pool.py``) when it is heavy or other clients' queries run meanwhile (then
    the loop serves them while the search uses the second core), the rows checked and the reply
    built on the loop.

    In the pool the query holds the read lock of a sliced query (``pion.server.slices``: the
    handler's Deferred keeps it until it answers), so a write to a key its index covers waits
    and its index is frozen; ``finish`` still indexes what is queued for other indexes (and, when
    the query was not sliced, for this one) and ``_live_page`` drops what is gone regardless."""
    job = _cpu_timed(knn_fast.job(index, plan, blob))
    budget_ms = query_budget(ctx, plan.req).ms
    pool = search_pool.worker()
    expected = getattr(job, "expected_s", 1.0)
    if deferred.can_defer(ctx) and (expected >= DEFER_MIN_SECONDS or (
            pool.should_offload(ctx.client.id) and expected >= OFFLOAD_MIN_SECONDS
            and getattr(job, "exact", False))):
        def finish(ctx2: Ctx, results: list) -> Any:
            if eng.resolve(ctx2.db.id, name) is not index:
                raise ReplyError("The index was dropped before the query could be executed")
            eng.catch_up()  # writes meanwhile (none to this index while it is frozen)
            timed_out = _knn_over_budget(job, budget_ms, plan.req.on_timeout)
            total, found = _live_page(ctx2, index, plan, blob, results[0])
            return _knn_reply(ctx2, index, plan, total, found, timed_out)
        return deferred.Deferred([job], finish, executor=pool)
    result = job()
    timed_out = _knn_over_budget(job, budget_ms, plan.req.on_timeout)
    total, found = _live_page(ctx, index, plan, blob, result)
    return _knn_reply(ctx, index, plan, total, found, timed_out)


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


def _knn_reply(ctx: Ctx, index, plan: knn_fast.KnnPlan, total: int, found: list, timed_out: bool = False) -> Any:
    req = plan.req
    if not req.nocontent:
        alias = plan.alias
        rows = [search.Row(doc, key, 0.0, {alias: dist}) for doc, key, dist in found]
        return search_reply(ctx, index, total, rows, req, timed_out=timed_out)
    db = ctx.db
    expires = db.expires
    if expires:  # an expired key is never answered (the check a field load would make)
        keys = [key for _, key, _ in found if key not in expires or live_value(ctx, key) is not None]
    else:
        keys = [key for _, key, _ in found]
    if ctx.client.proto >= 3:
        return {b"attributes": [], b"format": b"STRING", b"results": [{b"id": key, b"values": []} for key in keys],
                b"total_results": total, b"warning": timeout_warnings(timed_out)}
    return [total, *keys]


# -- FT.EXPLAIN -----------------------------------------------------------------------------------


@dataclass
class ExplainStyle:
    """What FT.EXPLAIN needs beyond the tree: RediSearch prints the query after its expansion
    (each term a UNION of itself, ``+stem(expanded)`` and, where it differs, the stem), without
    the stop-words, and names the TEXT fields of a field restriction on every node under it."""
    language: str | None  # None: no stemming expansion (VERBATIM, EXPANDER SYNONYM, no stemmer)
    stopwords: frozenset[str] | set[str]
    text_fields: set[str]


def explain_lines(node: Node, indent: int = 0, style: ExplainStyle | None = None, fields: list[str] | None = None,
                  expand: bool = True) -> list[str]:
    pad = "  " * indent
    kind = node.kind
    mask = ""
    if fields:
        names = [f for f in fields if style is None or f in style.text_fields]
        mask = "@" + ("|".join(names) if names else "NULL") + ":"
    if kind in ("and", "or"):
        children = node.children
        if style is not None:
            children = [c for c in children if not (c.kind == "term" and c.value in style.stopwords)]
            if not children:
                return [pad + "<empty>"]
            if len(children) == 1:
                return explain_lines(children[0], indent, style, fields, expand)
        head = "INTERSECT {" if kind == "and" else "UNION {"
        lines = [pad + mask + head]
        for child in children:
            lines += explain_lines(child, indent + 1, style, fields, expand)
        return lines + [pad + "}"]
    if kind in ("not", "opt"):
        word = ("NOT" if kind == "not" else "OPTIONAL") + ("{" if style is not None else " {")
        lines = [pad + mask + word]
        lines += explain_lines(node.children[0], indent + 1, style, fields, expand=False)
        return lines + [pad + "}"]
    if kind == "fields":
        if style is not None:
            return explain_lines(node.children[0], indent, style, node.fields, expand)
        inner = explain_lines(node.children[0], indent)
        return [pad + "@" + "|".join(node.fields or ()) + ":" + inner[0].strip()] + inner[1:]
    if kind == "term":
        if style is None:
            return [pad + node.value]
        if node.value in style.stopwords:
            return [pad + "<empty>"]
        root = (text_mod.stem_for_query(node.value, style.language)
                if expand and style.language and not node.attrs.get("exact") else None)
        if root is None:
            return [pad + mask + node.value]
        lines = [pad + mask + "UNION {", pad + "  " + mask + node.value,
                 pad + "  " + mask + text_mod.STEM_PREFIX + root + "(expanded)"]
        if root != node.value:
            lines.append(pad + "  " + mask + root + "(expanded)")
        return lines + [pad + "}"]
    if kind == "phrase":
        head = "EXACT {" if style is not None else "INTERSECT {"
        return [pad + mask + head] + [pad + "  " + mask + w for w in node.value] + [pad + "}"]
    if kind in ("prefix", "suffix", "infix"):
        mark = {"prefix": f"PREFIX{{{node.value}*}}", "suffix": f"SUFFIX{{*{node.value}}}",
                "infix": f"INFIX{{*{node.value}*}}"}[kind]
        return [pad + mask + mark]
    if kind == "fuzzy":
        return [pad + mask + f"FUZZY{{{node.value}}}"]
    if kind == "wildcard":
        return [pad + mask + f"WILDCARD{{{node.value}}}"]
    if kind == "tag":
        lines = [pad + f"TAG:@{node.fields[0]} {{"]  # type: ignore[index]
        lines += [pad + "  " + value for _, value in node.value]
        return lines + [pad + "}"]
    num = _num if style is None else _num_f
    if kind == "numeric":
        lo, hi, lo_ex, hi_ex = node.value
        return [pad + mask + f"NUMERIC {{{num(lo)} <{'' if lo_ex else '='} @{node.fields[0]} <{'' if hi_ex else '='} {num(hi)}}}"]  # type: ignore[index]
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
    if kind == "emptystr":
        return [pad + mask + '""']
    return [pad + "<EMPTY>"]


def _num_f(value: float) -> str:
    """A number as RediSearch's FT.EXPLAIN prints it (``%f``; ``inf``, ``-inf``)."""
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return "%f" % value


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
    definition = index.definition
    language = req.language or definition.language
    expand = not req.verbatim and req.expander == "DEFAULT" and text_mod.stemming_available(language)
    style = ExplainStyle(language=language if expand else None, stopwords=definition.stopword_set,
                         text_fields={f.name for f in definition.fields if f.type == "TEXT"})
    lines = explain_lines(query.root, style=style)
    if query.knn is not None:
        knn = query.knn
        lines = [f"VECTOR {{K={knn.k} nearest vectors to `${'BLOB'}` in vector index associated with field @{knn.field}"
                 + (f", yields distance as `{knn.alias}`" if knn.alias else "") + "}"] + \
                (["  FILTER {"] + ["    " + line for line in lines] + ["  }"] if query.root.kind not in ("all", "none") else [])
    return lines


@command("FT.EXPLAIN", -3, "readonly", categories=f"@read {_CATS} @slow", group="search", since="1.0.0")
def ft_explain(ctx: Ctx, argv: list[bytes]):
    """FT.EXPLAIN index query [DIALECT d]"""
    return ("\n".join(_explain(ctx, argv)) + "\n").encode()


@command("FT.EXPLAINCLI", -3, "readonly", categories=f"@read {_CATS} @slow", group="search", since="1.0.0")
def ft_explaincli(ctx: Ctx, argv: list[bytes]):
    """FT.EXPLAINCLI index query [DIALECT d]"""
    return [line.encode() for line in _explain(ctx, argv)] + [b""]
