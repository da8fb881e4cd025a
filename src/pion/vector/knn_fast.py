"""FT.SEARCH's KNN fast path: a plan cache per index, numpy id sets for the prefilter, paged rows.

Why: a KNN query's own work (a graph search or an exact scan of a few rows) costs tens of
microseconds; parsing FT.SEARCH's arguments and the query text, evaluating a TAG or NUMERIC
prefilter into a dict of hits, scoring and sorting them as a general query, and building a row
object per result cost more than the search itself. Clients send the same query text again and
again with a new vector each time (RedisVL, LangChain, the benchmark), so the plan is made once
per distinct argument list, the vector blob left out, and each later query only swaps its blob in.

What takes this path: ``[filter]=>[KNN k @field $param ...]`` where the filter is ``*`` or an
intersection of exact TAG values (``@t:{a | b}``) and NUMERIC ranges, without WITHSCORES,
WITHSORTKEYS, WITHPAYLOADS, SORTBY, INKEYS/INFIELDS, FILTER/GEOFILTER or a vector parameter used
twice. Everything else (and every error) takes the general path in ``search``, which gives the
same answers: the fast path is a plan of that one shape, not another semantics.

The cache (``SearchIndex.knn_plans``) lives on the index object, so FT.DROPINDEX (and FLUSHDB,
and a CREATE of the same name) starts afresh; FT.ALTER clears it (``SearchIndex.add_fields``), and
the key carries FT.CONFIG's DEFAULT_DIALECT and MAXSEARCHRESULTS. It holds at most ``PLAN_CACHE_MAX`` plans (then it
starts over: plans are cheap to make again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pion.vector.index import SearchIndex
from pion.vector.query_parser import KnnClause, Query, parse_query
from pion.vector.search import SearchRequest
from pion.vector.text import fold

PLAN_CACHE_MAX = 1024


@dataclass(eq=False)
class KnnPlan:
    """One cached FT.SEARCH KNN: the parsed request, its KNN clause and its prefilter."""

    req: SearchRequest
    knn: KnnClause
    #: ("tag", field, (values...)) or ("numeric", field, (lo, hi, lo_excl, hi_excl)); empty: no filter
    filters: tuple
    alias: str
    #: index in argv of the vector blob (swapped per query)
    blob_pos: int


def lookup(index: SearchIndex, argv: list, dialect: int, cap: int | None) -> tuple[KnnPlan, bytes] | None:
    """The cached plan for this argument list (its blob aside) under this default dialect and
    MAXSEARCHRESULTS ``cap`` (a plan's LIMIT was checked and cut under the cap it was made with),
    and the query's blob; None: a miss."""
    try:
        pos = index.knn_blob_pos.get((argv[2], len(argv)))
        if pos is None:
            return None
        plan = index.knn_plans.get((dialect, cap, *argv[2:pos], *argv[pos + 1:]))
    except TypeError:  # an unhashable argument (a memoryview): no cache
        return None
    if plan is None:
        return None
    return plan, argv[pos]


def compile_plan(index: SearchIndex, argv: list, req: SearchRequest, dialect: int,
                 cap: int | None) -> tuple[KnnPlan, bytes] | None:
    """Make (and cache) the plan of this request if it has the fast path's shape; None otherwise
    (also for any error: the general path answers it with RediSearch's text)."""
    if (req.withscores or req.withsortkeys or req.withpayloads or req.sortby is not None or req.filters
            or req.geofilters or req.inkeys is not None or req.infields is not None or req.slop is not None
            or req.inorder):
        return None
    try:
        query = parse_query(req.query, req.dialect, req.params)
    except Exception:  # noqa: BLE001 - the general path raises it
        return None
    knn = query.knn
    if knn is None or knn.epsilon is not None:
        return None
    filters = _filters(index, query)
    if filters is None:
        return None
    vec = index.vectors.get(knn.field)
    if vec is None or vec.query_error(knn) is not None or (knn.policy is not None and not filters) or (knn.policy == "ADHOC_BF" and knn.batch_size is not None):
        return None
    names = [name for name, value in req.params.items() if value == knn.blob]
    if len(names) != 1 or req.query.count("$" + names[0]) != 1:
        return None
    places = [i for i in range(3, len(argv)) if argv[i] == knn.blob]
    if len(places) != 1 or places[0] < 4 or argv[places[0] - 1] != names[0].encode():
        return None
    pos = places[0]
    plan = KnnPlan(req=req, knn=knn, filters=filters, alias=knn.alias or f"__{knn.field}_score", blob_pos=pos)
    try:
        if len(index.knn_plans) >= PLAN_CACHE_MAX:
            index.knn_plans.clear()
            index.knn_blob_pos.clear()
        index.knn_plans[(dialect, cap, *argv[2:pos], *argv[pos + 1:])] = plan
        index.knn_blob_pos[(argv[2], len(argv))] = pos
    except TypeError:
        pass
    return plan, argv[pos]


def _filters(index: SearchIndex, query: Query) -> tuple | None:
    root = query.root
    if root.kind in ("all", "none"):
        return ()
    nodes = root.children if root.kind == "and" else [root]
    out = []
    definition = index.definition
    for node in nodes:
        if node.kind not in ("tag", "numeric") or not node.fields or len(node.fields) != 1 or node.children:
            return None
        spec = definition.field(node.fields[0])
        if spec is None or spec.noindex:
            return None
        if node.kind == "tag":
            if spec.type != "TAG" or spec.name not in index.tags:
                return None
            values = []
            for kind, raw in node.value:
                if kind != "exact":
                    return None
                values.append((raw if spec.case_sensitive else fold(raw)).strip())
            out.append(("tag", spec.name, tuple(values)))
        else:
            if spec.type != "NUMERIC" or spec.name not in index.numerics:
                return None
            out.append(("numeric", spec.name, tuple(node.value)))
    return tuple(out)


def allowed_ids(index: SearchIndex, plan: KnnPlan) -> np.ndarray | None:
    """The prefilter as a sorted array of doc ids (None: no filter), from the fields' arrays."""
    if not plan.filters:
        return None
    result: np.ndarray | None = None
    for kind, name, value in plan.filters:
        if kind == "tag":
            tags = index.tags[name]
            if len(value) == 1:
                ids = tags.ids(value[0])
            else:
                ids = np.unique(np.concatenate([tags.ids(v) for v in value]))
        else:
            ids = index.numerics[name].range_ids(*value)
        result = ids if result is None else np.intersect1d(result, ids, assume_unique=True)
        if not len(result):
            break
    return result


def job(index: SearchIndex, plan: KnnPlan, blob: bytes, count: bool = True, extra: int = 0
        ) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """On the loop: count the use, decode the blob (a view, no copy for FLOAT32), capture what the
    search needs; the returned job may run in a worker thread. ``extra``: that many more
    neighbours than K (a search made again past results that are gone, ``page``)."""
    if count:
        index.uses += 1
        index.touched = time.monotonic()
        index.dialects[min(plan.req.dialect, 4) - 1] += 1
    knn = plan.knn
    vec = index.vectors[knn.field]
    query = vec.prepare_query(blob)
    return vec.plan_knn(query, knn.k + extra, allowed_ids(index, plan), knn.ef, knn.policy, knn.batch_size)


def page(index: SearchIndex, plan: KnnPlan, result: tuple[np.ndarray, np.ndarray],
         alive: Callable[[bytes], bool] | None = None) -> tuple[int, list[tuple[int, bytes, float]], int]:
    """(total, the page's (doc id, key, distance), how many results were left out): the K nearest
    of the result, nearest first, ties by doc id, without documents the index removed since the
    search (a job in the worker pool read the index as it was) nor keys ``alive`` says are gone
    (a key that expired while the index is frozen by a query in flight, ``SearchEngine.freeze``,
    is still listed). This runs on the loop; with results left out the caller searches again
    with that many ``extra`` neighbours, so K results come back when K documents exist."""
    ids, dists = result
    docs = index.docs
    found = [(doc, docs[doc], dist) for doc, dist in zip(ids.tolist(), dists.tolist(), strict=True) if doc in docs]
    if alive is not None:
        found = [row for row in found if alive(row[1])]
    left_out = len(ids) - len(found)
    found = found[:plan.knn.k]
    req = plan.req
    if not req.limit:
        return len(found), [], left_out
    return len(found), found[req.offset:req.offset + req.limit], left_out
