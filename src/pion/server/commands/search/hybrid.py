"""FT.HYBRID (Redis 8.4's clause form): a text leg and a vector leg, fused, then post-processed.

The text leg is FT.SEARCH's evaluation ranked by score; the vector leg is a KNN or a range query
(with the VSIM FILTER as its prefilter), in the worker pool when large. ``pion.vector.hybrid``
fuses the legs; the post-processing clauses run as FT.AGGREGATE's pipeline. Each result carries
``__key`` and ``__score`` (the fused score) plus the YIELD_SCORE_AS aliases; with a LOAD clause
the result holds what it loads (``@__key``, ``@__score`` included only when named), the aliases
and what APPLY adds, as Redis 8.4 answers.
RESP2: ``[total_results, N, results, [[k, v, ...], ...], warnings, [], execution_time, "ms"]``;
RESP3: the same keys as a map, results as maps, ``execution_time`` a double. A leg cut short by
TIMEOUT under ON_TIMEOUT RETURN warns ``Timeout limit was reached (SEARCH)`` or ``(VSIM)``.

WITHCURSOR [COUNT n] [MAXIDLE ms] answers two cursors instead of the fused rows, one per leg
(``SEARCH``: the text leg's ranking, up to WINDOW rows; ``VSIM``: the vector leg's), each row
``__key`` and the leg's ``__score``; FT.CURSOR READ reads them, as FT.AGGREGATE's cursors.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pion.protocol.errors import ReplyError
from pion.server import deferred
from pion.server.commands.search.admin import engine
from pion.server.commands.search.aggregate import _loader
from pion.server.commands.search.query import DEFER_MIN_VECTORS, default_dialect
from pion.server.commands.search.replies import query_budget
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.budget import TIMEOUT_TEXT, UNLIMITED, Budget, QueryTimeout
from pion.vector import aggregate, hybrid, search
from pion.vector import cursors as cursor_limits

_CATS = "@search"


def _legs(index, req: hybrid.HybridRequest, budget: Budget):
    """The text ranking now and the vector leg as a job (thread-safe). Both legs' evaluation on
    the loop ticks ``budget``; under ON_TIMEOUT RETURN a leg cut short ranks what it had."""
    on_timeout = req.post.on_timeout
    text_req = search.SearchRequest(query=req.query, scorer=req.scorer, params=req.params,
                                    dialect=req.dialect, limit=1 << 31, withscores=True, on_timeout=on_timeout)
    text_plan = search.plan(index, text_req, budget=budget)
    if text_plan.query.knn is not None:
        raise ReplyError("Vector queries are not allowed in the SEARCH part of FT.HYBRID (use VSIM)")
    _, text_rows = search.finish(text_plan, None)
    text_ranked = [(row.doc_id, row.score) for row in sorted(text_rows, key=lambda r: (-r.score, r.doc_id))]
    vec = index.vectors.get(req.vector_field)
    if vec is None:
        raise ReplyError(f"Unknown field `{req.vector_field}`" if index.definition.field(req.vector_field) is None
                         else f"Field `{req.vector_field}` is not a VECTOR field")
    allowed = None
    if req.vfilter is not None and req.vfilter.strip() not in ("", "*"):
        filter_plan = search.plan(index, search.SearchRequest(query=req.vfilter, params=req.params, dialect=req.dialect,
                                                              on_timeout=on_timeout), budget=budget)
        if filter_plan.query.knn is not None:
            raise ReplyError("Vector queries are not allowed in the VSIM FILTER")
        allowed = np.fromiter(sorted(filter_plan.hits), dtype=np.int64)
    query = vec.prepare_query(req.blob())
    if req.method == "RANGE":
        radius = req.radius if req.epsilon is None else req.radius
        job = vec.plan_range(query, float(radius), allowed)
    else:
        job = vec.plan_knn(query, req.k, allowed, req.ef, req.policy)
    job = _timed(job)
    legs_timed_out = []
    if text_plan.timed_out:
        legs_timed_out.append("SEARCH")
    if allowed is not None and filter_plan.timed_out:
        legs_timed_out.append("VSIM")
    return text_ranked, job, vec, legs_timed_out


def _timed(job):
    """The vector leg's job, answering its result and the CPU time it took (seconds): its own work,
    not the time its thread waited for a core on a busy machine."""
    def run():
        began = time.thread_time()
        result = job()
        return result, time.thread_time() - began
    return run


def _leg_warnings(legs: list[str], post_timed_out: bool) -> list[bytes]:
    """Redis 8.4 names the leg a timeout cut short; the post-processing's own is RediSearch's text."""
    out = [f"{TIMEOUT_TEXT} ({leg})".encode() for leg in legs]
    if post_timed_out:
        out.append(TIMEOUT_TEXT.encode())
    return out


def _leg_cursors(ctx: Ctx, index, req: hybrid.HybridRequest, text_ranked, vector_ranked) -> Any:
    cursors = engine(ctx).cursors
    post = req.post
    ids: dict[bytes, int] = {}
    for name, ranked in ((b"SEARCH", text_ranked[:req.window]),
                         (b"VSIM", [(doc, vscore) for doc, _d, vscore in vector_ranked])):
        rows = [{"\0key": index.docs[doc], "__key": index.docs[doc].decode("utf-8", "replace"), "__score": score}
                for doc, score in ranked]
        ids[name] = cursors.open(index, rows, post.cursor_count,
                                  cursor_limits.max_idle(engine(ctx).config, post.cursor_maxidle), len(rows)).cid
    if ctx.client.proto >= 3:
        return ids
    return [b"SEARCH", ids[b"SEARCH"], b"VSIM", ids[b"VSIM"]]


def _finish(ctx: Ctx, index, req: hybrid.HybridRequest, text_ranked, vec, vector_result, started: float,
            budget: Budget, legs_timed_out: list[str], leg_deadline: Budget) -> Any:
    (ids, dists), vector_seconds = vector_result
    legs_timed_out = list(legs_timed_out)
    if "VSIM" not in legs_timed_out and leg_deadline.limited and vector_seconds * 1000.0 > leg_deadline.ms:
        # the vector leg alone worked longer than the query's TIMEOUT (the kernel does not stop
        # half-way: its results are whole, the warning says the limit was passed)
        if req.post.on_timeout != "return":
            raise QueryTimeout()
        legs_timed_out.append("VSIM")
    vector_ranked = [(doc, float(d), hybrid.normalized_vector_score(vec.metric, float(d)))
                     for doc, d in zip(ids.tolist(), dists.tolist(), strict=True) if doc in index.docs]
    if req.post.cursor:
        return _leg_cursors(ctx, index, req, text_ranked, vector_ranked)
    fused = hybrid.fuse(req, text_ranked, vector_ranked)
    rows: list[dict[str, Any]] = []
    for doc, combined, text_score, _distance, vector_score in fused:
        budget.breathe()  # may give the loop a turn (server/slices.py); the pipeline checks the deadline
        key = index.docs[doc]
        row: dict[str, Any] = {"\0key": key, "__key": key.decode("utf-8", "replace")}
        if req.combined_alias:
            row[req.combined_alias] = combined
        else:
            row["__score"] = combined
        if req.text_alias and text_score is not None:
            row[req.text_alias] = text_score
        if req.vector_alias and vector_score is not None:
            row[req.vector_alias] = vector_score
        rows.append(row)
    names = {spec.name for spec in index.definition.fields}
    post = req.post
    # after a leg's timeout (RETURN) the post-processing still shapes what the legs had: at most
    # the two windows' rows, so it runs without the spent deadline
    rows, post_timed_out = aggregate.run_pipeline(post, rows, _loader(ctx, index, 2), names,
                                                  UNLIMITED if legs_timed_out else budget)
    if post.loads is not None:  # a LOAD clause: the implicit __key and __score only where it names them
        named = {item.partition("\0")[0] for item in post.loads if not item.partition("\0")[2]}
        hidden = [k for k in ("__key", "__score") if k not in named]
        for row in rows:
            for k in hidden:
                row.pop(k, None)
    total = len(rows)
    offset, count = req.limit
    rows = rows[offset:offset + count]
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    resp3 = ctx.client.proto >= 3
    results: list[Any] = []
    for row in rows:
        pairs = [(k.encode(), aggregate.render_value(v)) for k, v in row.items() if not k.startswith("\0")]
        if resp3:
            results.append(dict(pairs))
        else:
            flat: list[Any] = []
            for k, v in pairs:
                flat += [k, v]
            results.append(flat)
    warnings = _leg_warnings(legs_timed_out, post_timed_out)
    if resp3:
        return {b"total_results": total, b"results": results, b"warnings": warnings,
                b"execution_time": elapsed_ms}
    return [b"total_results", total, b"results", results, b"warnings", warnings, b"execution_time",
            ("%.3f" % elapsed_ms).encode()]


@command("FT.HYBRID", -5, "readonly", categories="@search @read", group="search", since="8.4.0")
def ft_hybrid(ctx: Ctx, argv: list[bytes]):
    """FT.HYBRID index SEARCH query [SCORER s] VSIM @field vector [KNN n K k ...|RANGE n RADIUS r ...]
    [FILTER expr] [COMBINE RRF|LINEAR n ...] [LOAD ...] [SORTBY ...] [LIMIT o n] PARAMS n name value ..."""
    started = time.perf_counter()
    eng = engine(ctx)
    name = argv[1].decode("utf-8", "replace")
    index = eng.get(ctx.db, name, search_error=True)
    req = hybrid.parse_hybrid(argv, default_dialect(ctx))
    budget = query_budget(ctx, req.post)
    text_ranked, job, vec, legs_timed_out = _legs(index, req, budget)
    if deferred.can_defer(ctx) and (vec.graph is not None or len(vec) >= DEFER_MIN_VECTORS):
        def finish(ctx2: Ctx, results: list) -> Any:
            if eng.resolve(ctx2.db.id, name) is not index:
                raise ReplyError("The index was dropped before the query could be executed")
            return _finish(ctx2, index, req, text_ranked, vec, results[0], started, Budget(budget.ms),
                           legs_timed_out, budget)
        return deferred.Deferred([job], finish)
    return _finish(ctx, index, req, text_ranked, vec, job(), started, budget, legs_timed_out, budget)
