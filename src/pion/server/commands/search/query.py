"""FT.SEARCH, FT.EXPLAIN and FT.EXPLAINCLI.

FT.SEARCH evaluates the filter part of a query on the event loop; a KNN over an HNSW field or a
large FLAT field runs in the worker pool (``pion.server.deferred``: numpy and usearch release the
GIL), so other clients go on meanwhile; small ones run inline. Inside MULTI, scripts and replay
everything runs inline. Replies are RediSearch's shapes (``search_replies``).
"""

from __future__ import annotations

import time
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
from pion.vector import explain, highlight, knn_fast, query_exec, query_profile, search
from pion.vector.query_parser import parse_query

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


@command("FT.SEARCH", -3, "readonly", categories="@search @read", group="search", since="1.0.0")
def ft_search(ctx: Ctx, argv: list[bytes]):
    """FT.SEARCH index query [NOCONTENT] [VERBATIM] [WITHSCORES] [FILTER ...] [RETURN ...] [SORTBY ...]
    [LIMIT offset num] [PARAMS n name value ...] [DIALECT d] ..."""
    eng = engine(ctx)
    name = argv[1].decode("utf-8", "replace")
    index = eng.get(ctx.db, name, search_error=True)
    dialect = default_dialect(ctx)
    cap = search.max_results(eng.config)
    fast = knn_fast.lookup(index, argv, dialect, cap)
    if fast is not None:
        return _knn_fast(ctx, eng, name, index, *fast)
    req = search.parse_search(argv, dialect)
    search.cap_results(req, cap)
    if req.summary is not None:
        highlight.check(index, req.summary, req.returns)
    if b"=>" in argv[2] and req.summary is None:
        fast = knn_fast.compile_plan(index, argv, req, dialect, cap)
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


def profiled_search(ctx: Ctx, argv: list[bytes], profile: query_profile.Profiler) -> Any:
    """FT.SEARCH for FT.PROFILE, inline: the general planner with ``profile`` recording the tree and
    the stages (the cached KNN plan of ``knn_fast`` is not used: its search is one call, with no
    tree to record)."""
    index = engine(ctx).get(ctx.db, argv[1].decode("utf-8", "replace"), search_error=True)
    req = search.parse_search(argv, default_dialect(ctx))
    search.cap_results(req, search.max_results(engine(ctx).config))
    if req.summary is not None:
        highlight.check(index, req.summary, req.returns)
    started = query_profile.clock()
    plan = search.plan(index, req, budget=query_budget(ctx, req), profile=profile)
    knn_result = vector_leg(plan, profile)
    count = len(plan.hits) if knn_result is None else len(knn_result[0])
    index_ms = (query_profile.clock() - started) * 1000.0 - profile.parse_ms - profile.pipeline_ms
    profile.stages.append(query_profile.Stage("Index", count, index_ms))
    total, rows = search.finish(plan, knn_result, _sort_loader(ctx, index))
    started = query_profile.clock()
    reply = search_reply(ctx, index, total, rows, req, plan)
    if not req.nocontent:
        loading = (query_profile.clock() - started) * 1000.0 - profile.highlight_ms
        profile.stages.append(query_profile.Stage("Loader", profile.loaded, loading))
    if req.summary is not None:
        profile.stages.append(query_profile.Stage("Highlighter", profile.loaded, profile.highlight_ms))
    profile.timed_out = plan.timed_out
    return reply


def vector_leg(plan, profile: query_profile.Profiler):
    """Run a plan's KNN search (if it has one) timed, as the VECTOR iterator at the root of the
    profile's tree, the filter's tree (if one was evaluated) its child."""
    if plan.job is None or plan.timed_out:
        return None
    filtered = plan.query.root.kind not in ("all", "none")
    child = profile.root() if filtered else None
    started = query_profile.clock()
    result = plan.job()
    elapsed = (query_profile.clock() - started) * 1000.0
    found = sum(1 for doc in result[0].tolist() if doc in plan.index.docs)
    profile.replace_root(query_profile.Record("VECTOR", found, elapsed, children=[child] if child else [],
                                              single=True))
    return result


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


def _explain(ctx: Ctx, argv: list[bytes]) -> list[str]:
    eng = engine(ctx)
    index = eng.get(ctx.db, argv[1].decode("utf-8", "replace"), search_error=True)
    req = search.parse_search(argv, default_dialect(ctx))  # FT.SEARCH's options are accepted
    query = parse_query(req.query, req.dialect, req.params)
    query_exec.check_phonetic(query.root, index.definition)
    return explain.explain(query, explain.ExplainContext(index, req.verbatim, req.language, req.expander))


@command("FT.EXPLAIN", -3, "readonly", categories="@search", group="search", since="1.0.0")
def ft_explain(ctx: Ctx, argv: list[bytes]):
    """FT.EXPLAIN index query [DIALECT d]"""
    return ("\n".join(_explain(ctx, argv)) + "\n").encode()


@command("FT.EXPLAINCLI", -3, "readonly", categories="@search", group="search", since="1.0.0")
def ft_explaincli(ctx: Ctx, argv: list[bytes]):
    """FT.EXPLAINCLI index query [DIALECT d]"""
    return [line.encode() for line in _explain(ctx, argv)] + [b""]
