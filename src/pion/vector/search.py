"""FT.SEARCH: its arguments, the query plan and the ordered, paged result rows.

``parse_search`` reads the arguments (RediSearch's names and defaults: LIMIT 0 10, DIALECT from
FT.CONFIG, SCORER BM25STD). ``plan`` evaluates the filter part on the event loop and returns a
``SearchPlan`` whose optional ``job`` (the KNN) may run in a worker thread; ``finish`` orders and
pages the matches on the loop. Loading field values and encoding the reply is the server's part
(it owns the keyspace and the protocol); ``load_fields`` here tells it what to load.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.protocol.errors import ReplyError
from pion.storage.budget import UNLIMITED, Budget, QueryTimeout
from pion.vector import highlight, query_exec, scoring
from pion.vector.fields import UNITS
from pion.vector.index import SearchIndex
from pion.vector.query_parser import KnnClause, Node, Query, parse_query


@dataclass
class SearchRequest:
    query: str
    nocontent: bool = False
    verbatim: bool = False
    explainscore: bool = False  # WITHSCORES EXPLAINSCORE: each score with its explanation (``score_explain``)
    nostopwords: bool = False
    withscores: bool = False
    withsortkeys: bool = False
    filters: list[tuple[str, float, float, bool, bool]] = field(default_factory=list)
    geofilters: list[tuple[str, float, float, float]] = field(default_factory=list)
    inkeys: list[bytes] | None = None
    infields: list[str] | None = None
    returns: list[tuple[str, str]] | None = None  # (identifier or attribute, output name)
    slop: int | None = None
    inorder: bool = False
    language: str | None = None
    scorer: str = scoring.DEFAULT
    sortby: str | None = None
    sort_asc: bool = True
    offset: int = 0
    limit: int = 10
    #: LIMIT was given (the default page of 10 is cut to MAXSEARCHRESULTS, never refused)
    limit_given: bool = False
    params: dict[str, bytes] = field(default_factory=dict)
    dialect: int = 1
    timeout_ms: int | None = None
    #: RediSearch's ON_TIMEOUT policy (FT.CONFIG): "return" answers what the query has so far
    on_timeout: str = "return"
    withcount: bool = True
    expander: str = "DEFAULT"
    withpayloads: bool = False
    #: HIGHLIGHT / SUMMARIZE (``vector.highlight``); ``fields_order``: RETURN's and FIELDS' names as given
    summary: highlight.Summary | None = None
    fields_order: list[str] = field(default_factory=list)


@dataclass
class Row:
    doc_id: int
    key: bytes
    score: float
    extras: dict[str, Any]
    sort_value: Any = None


def _int(raw: bytes, what: str, minimum: int | None = 0) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ReplyError(f"Bad arguments for {what}: Could not convert argument to expected type") from None
    if minimum is not None and value < minimum:
        raise ReplyError(f"Bad arguments for {what}: Value is outside acceptable bounds")
    return value


def _float(raw: bytes, what: str) -> float:
    text = raw.decode("utf-8", "replace").lower()
    try:
        return float(text.lstrip("("))
    except ValueError:
        raise ReplyError(f"Bad arguments for {what}: Could not convert argument to expected type") from None


def parse_params(argv: list[bytes], i: int) -> tuple[dict[str, bytes], int]:
    count = _int(argv[i + 1] if i + 1 < len(argv) else b"", "PARAMS")
    if count % 2 or count == 0:
        raise ReplyError("Parameters must be specified in PARAM VALUE pairs")
    if i + 2 + count > len(argv):
        raise ReplyError("Bad arguments for PARAMS: Expected an argument, but none provided")
    params: dict[str, bytes] = {}
    for j in range(i + 2, i + 2 + count, 2):
        name = argv[j].decode("utf-8", "replace")
        if name in params:
            raise ReplyError(f"Duplicate parameter `{name}`")
        params[name] = bytes(argv[j + 1])
    return params, i + 2 + count


#: FT.CONFIG MAXSEARCHRESULTS's default
DEFAULT_MAX_RESULTS = 1_000_000


def max_results(config: dict[str, str], option: str = "MAXSEARCHRESULTS") -> int | None:
    """FT.CONFIG's MAXSEARCHRESULTS (or MAXAGGREGATERESULTS) as a number; None: unlimited."""
    value = config.get(option, str(DEFAULT_MAX_RESULTS) if option == "MAXSEARCHRESULTS" else "unlimited")
    return None if value == "unlimited" else int(value)


def cap_results(req: SearchRequest, cap: int | None) -> None:
    """Apply MAXSEARCHRESULTS as RediSearch 2.10 does (compared on Redis Stack): a LIMIT that asks
    for rows (num > 0) may ask for at most ``cap`` (``LIMIT exceeds maximum of N``) from an
    offset of at most ``cap`` (``OFFSET exceeds maximum of N``); ``LIMIT x 0`` only counts, at
    any offset. The page then ends where ``cap`` rows would: ``LIMIT 2 2`` under 3 gives one
    row, and the default page of 10 gives ``cap`` rows when ``cap`` is smaller."""
    if cap is None:
        return
    if req.limit and req.limit_given:
        if req.limit > cap:
            raise ReplyError(f"LIMIT exceeds maximum of {cap}")
        if req.offset > cap:
            raise ReplyError(f"OFFSET exceeds maximum of {cap}")
    req.limit = max(0, min(req.offset + req.limit, cap) - req.offset)


def parse_search(argv: list[bytes], default_dialect: int) -> SearchRequest:
    """FT.SEARCH index query [options]: argv[2] is the query."""
    req = SearchRequest(query=argv[2].decode("utf-8", "replace"), dialect=default_dialect)
    i = 3
    n = len(argv)

    def need(count: int, what: str) -> None:
        if i + count >= n:
            raise ReplyError(f"Bad arguments for {what}: Expected an argument, but none provided")

    while i < n:
        word = argv[i].upper()
        if word == b"NOCONTENT":
            req.nocontent = True
        elif word == b"VERBATIM":
            req.verbatim = True
        elif word == b"NOSTOPWORDS":
            req.nostopwords = True
        elif word == b"WITHSCORES":
            req.withscores = True
        elif word == b"WITHSORTKEYS":
            req.withsortkeys = True
        elif word == b"INORDER":
            req.inorder = True
        elif word in (b"WITHCOUNT",):
            req.withcount = True
        elif word == b"WITHOUTCOUNT":
            req.withcount = False
        elif word == b"FILTER":
            need(3, "FILTER")
            lo_raw, hi_raw = argv[i + 2], argv[i + 3]
            req.filters.append((argv[i + 1].decode(), _float(lo_raw, "FILTER"), _float(hi_raw, "FILTER"),
                                lo_raw.startswith(b"("), hi_raw.startswith(b"(")))
            i += 3
        elif word == b"GEOFILTER":
            need(5, "GEOFILTER")
            unit = argv[i + 5].decode().lower()
            if unit not in UNITS:
                raise ReplyError(f"Invalid GeoFilter unit: {unit}")
            req.geofilters.append((argv[i + 1].decode(), _float(argv[i + 2], "GEOFILTER"),
                                   _float(argv[i + 3], "GEOFILTER"), _float(argv[i + 4], "GEOFILTER") * UNITS[unit]))
            i += 5
        elif word == b"INKEYS":
            need(1, "INKEYS")
            count = _int(argv[i + 1], "INKEYS")
            req.inkeys = [bytes(k) for k in argv[i + 2:i + 2 + count]]
            i += 1 + count
        elif word == b"INFIELDS":
            need(1, "INFIELDS")
            count = _int(argv[i + 1], "INFIELDS")
            req.infields = [f.decode() for f in argv[i + 2:i + 2 + count]]
            i += 1 + count
        elif word == b"RETURN":
            need(1, "RETURN")
            count = _int(argv[i + 1], "RETURN")
            if i + 2 + count > n:
                raise ReplyError("Bad arguments for RETURN: Expected an argument, but none provided")
            items = argv[i + 2:i + 2 + count]
            req.returns = _parse_return(items)
            highlight.mention([alias for _, alias in req.returns], req.fields_order)
            i += 1 + count
        elif word == b"SUMMARIZE" or word == b"HIGHLIGHT":
            if req.summary is None:
                req.summary = highlight.Summary()
            i = highlight.parse(argv, i, req.summary, req.fields_order)
            continue
        elif word == b"SLOP":
            need(1, "SLOP")
            req.slop = _int(argv[i + 1], "SLOP", None)
            i += 1
        elif word == b"TIMEOUT":
            need(1, "TIMEOUT")
            req.timeout_ms = _int(argv[i + 1], "TIMEOUT")
            i += 1
        elif word == b"LANGUAGE":
            need(1, "LANGUAGE")
            req.language = argv[i + 1].decode().lower()
            i += 1
        elif word == b"EXPANDER":
            need(1, "EXPANDER")
            expander = argv[i + 1].decode().upper()
            if expander not in ("DEFAULT", "SYNONYM"):
                raise ReplyError(f"Unknown query expander `{argv[i + 1].decode()}` (Pion has DEFAULT and SYNONYM)")
            req.expander = expander
            i += 1
        elif word == b"SCORER":
            need(1, "SCORER")
            req.scorer = scoring.check(argv[i + 1].decode())
            i += 1
        elif word == b"WITHPAYLOADS":
            req.withpayloads = True
        elif word == b"EXPLAINSCORE":
            req.explainscore = True
        elif word == b"PAYLOAD":
            raise ReplyError(f"{word.decode()} is not supported by Pion")
        elif word == b"SORTBY":
            need(1, "SORTBY")
            req.sortby = argv[i + 1].decode().lstrip("@")
            i += 1
            if i + 1 < n and argv[i + 1].upper() in (b"ASC", b"DESC"):
                req.sort_asc = argv[i + 1].upper() == b"ASC"
                i += 1
            if i + 1 < n and argv[i + 1].upper() == b"WITHCOUNT":
                i += 1
        elif word == b"LIMIT":
            need(2, "LIMIT")
            req.offset = _int(argv[i + 1], "LIMIT")
            req.limit = _int(argv[i + 2], "LIMIT")
            req.limit_given = True
            i += 2
        elif word == b"PARAMS":
            req.params, i = parse_params(argv, i)
            continue
        elif word == b"DIALECT":
            need(1, "DIALECT")
            req.dialect = _int(argv[i + 1], "DIALECT", 1)
            if not 1 <= req.dialect <= 4:
                raise ReplyError("DIALECT requires a non negative integer >=1 and <= 4")
            i += 1
        else:
            raise ReplyError(f"Unknown argument `{argv[i].decode('utf-8', 'replace')}`")
        i += 1
    if req.explainscore and not req.withscores:
        raise ReplyError("EXPLAINSCORE must be accompanied with WITHSCORES")
    return req


def _parse_return(items: list[bytes]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    j = 0
    while j < len(items):
        name = items[j].decode("utf-8", "replace")
        alias = name
        if j + 1 < len(items) and items[j + 1].upper() == b"AS":
            if j + 2 >= len(items):
                raise ReplyError("RETURN: AS requires a name")
            alias = items[j + 2].decode("utf-8", "replace")
            j += 2
        out.append((name, alias))
        j += 1
    return out


@dataclass
class SearchPlan:
    index: SearchIndex
    req: SearchRequest
    query: Query
    hits: dict[int, float]
    ctx: query_exec.ExecContext
    job: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
    started: float = 0.0
    #: the budget ran out and ON_TIMEOUT RETURN kept what there was (the reply's warning)
    timed_out: bool = False
    #: the KNN's prefilter as sorted doc ids (None: none), kept to search again (``knn_job``)
    knn_allowed: np.ndarray | None = None

    @property
    def budget(self) -> Budget:
        return self.ctx.budget

    def cut_short(self, exc: QueryTimeout) -> None:
        """The budget ran out: under FAIL re-raise (the error reply), under RETURN note it."""
        if self.req.on_timeout != "return":
            raise exc
        self.timed_out = True


def plan(index: SearchIndex, req: SearchRequest, heavy: Callable[[int], bool] | None = None,
         budget: Budget = UNLIMITED, profile: Any = None) -> SearchPlan:
    """Parse and evaluate the filter part; the KNN part becomes ``job`` (thread-safe).

    The evaluation ticks ``budget``: past it the query fails (``QueryTimeout``), or under
    ON_TIMEOUT RETURN it matches nothing more than it had (nothing, for a set evaluation cut
    in the middle) and the plan is marked ``timed_out``."""
    started = time.perf_counter()
    query = parse_query(req.query, req.dialect, req.params)
    if profile is not None:  # FT.PROFILE (``query_profile.Profiler``)
        parsed = time.perf_counter()
        profile.parse_ms = (parsed - started) * 1000.0
    index.uses += 1
    index.touched = time.monotonic()
    index.dialects[min(req.dialect, 4) - 1] += 1
    ctx = query_exec.ExecContext(index=index, scorer=req.scorer, verbatim=req.verbatim, infields=req.infields,
                                 slop=req.slop, inorder=req.inorder, stopwords_off=req.nostopwords,
                                 language=req.language, expander=req.expander, budget=budget,
                                 min_prefix=getattr(req, "min_prefix", 2),
                                 max_expansions=getattr(req, "max_expansions", 200), profile=profile)
    if req.infields:
        for name in req.infields:
            if index.definition.field(name) is None:
                raise ReplyError(f"Unknown field `{name}` in INFIELDS")
    root = query.root
    knn = query.knn
    if knn is not None and root.kind == "none":
        root = Node("all")
    result = SearchPlan(index=index, req=req, query=query, hits={}, ctx=ctx, started=started)
    if profile is not None:
        profile.pipeline_ms = (time.perf_counter() - parsed) * 1000.0
    try:
        hits = query_exec.evaluate(root, ctx) if not (knn is not None and root.kind == "all") else None
        if hits is not None:
            hits = _legacy_filters(index, req, hits)
        elif req.filters or req.geofilters or req.inkeys is not None:
            hits = _legacy_filters(index, req, dict.fromkeys(index.docs, 0.0))
    except QueryTimeout as exc:
        result.cut_short(exc)
        return result  # RETURN: nothing gathered yet, the KNN leg is not run either
    result.hits = hits if hits is not None else {}
    if knn is not None:
        result.knn_allowed = None if hits is None else np.fromiter(sorted(hits), dtype=np.int64)
        result.job = _knn_job(index, knn, result.knn_allowed)
        if hits is None:
            result.hits = {}
    return result


def _legacy_filters(index: SearchIndex, req: SearchRequest, hits: dict[int, float]) -> dict[int, float]:
    for name, lo, hi, lo_ex, hi_ex in req.filters:
        numeric = index.numerics.get(name)
        if numeric is None:
            raise ReplyError(f"Unknown Field '{name}'")
        allowed = numeric.range(lo, hi, lo_ex, hi_ex)
        hits = {d: s for d, s in hits.items() if d in allowed}
    for name, lon, lat, radius in req.geofilters:
        geo = index.geos.get(name)
        if geo is None:
            raise ReplyError(f"Unknown Field '{name}'")
        allowed = geo.within(lon, lat, radius)
        hits = {d: s for d, s in hits.items() if d in allowed}
    if req.inkeys is not None:
        wanted = {index.key_to_doc.get(k) for k in req.inkeys}
        hits = {d: s for d, s in hits.items() if d in wanted}
    return hits


def knn_job(plan_: SearchPlan, extra: int) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """The plan's KNN again with ``extra`` more neighbours than K: its search was answered by
    documents that are gone since (a key expired while the index was frozen by the query), so
    the caller asks past them for K live ones (``live_knn``)."""
    knn = plan_.query.knn
    assert knn is not None
    return _knn_job(plan_.index, knn, plan_.knn_allowed, knn.k + extra)


def live_knn(plan_: SearchPlan, result: tuple[np.ndarray, np.ndarray], alive: Callable[[bytes], bool] | None,
             ) -> tuple[np.ndarray, np.ndarray]:
    """The K nearest of ``result`` that are still documents of the index and whose keys ``alive``
    says exist, searching again inline with as many more neighbours as were left out, until K
    live ones or the documents run out (what ``knn_fast.page`` does for the fast path)."""
    knn = plan_.query.knn
    assert knn is not None
    docs = plan_.index.docs
    extra = 0
    while True:
        ids, dists = result
        keep = [i for i, doc in enumerate(ids.tolist())
                if doc in docs and (alive is None or alive(docs[doc]))]
        left_out = len(ids) - len(keep)
        if not left_out:
            return result
        if left_out <= extra or len(ids) < knn.k + extra:
            break
        extra = left_out
        result = knn_job(plan_, extra)()
    keep = keep[:knn.k]
    return ids[keep], dists[keep]


def _knn_job(index: SearchIndex, knn: KnnClause, allowed: np.ndarray | None, k: int | None = None):
    vec = index.vectors.get(knn.field)
    if vec is None:
        spec = index.definition.field(knn.field)
        if spec is None:
            raise ReplyError(f"Unknown field at offset 0 near {knn.field}")
        raise ReplyError(f"Expected a VECTOR field at offset 0 near {knn.field}")
    if knn.policy == "ADHOC_BF" and knn.batch_size is not None:
        raise ReplyError("'batch size' is irrelevant for the selected policy")
    if knn.policy is not None and allowed is None:
        raise ReplyError("hybrid query attributes were sent for a non-hybrid query")
    error = vec.query_error(knn)
    if error is not None:
        raise ReplyError(error)
    query = vec.prepare_query(knn.blob)
    return vec.plan_knn(query, knn.k if k is None else k, allowed, knn.ef, knn.policy, knn.batch_size)


def knn_alias(plan_: SearchPlan) -> str | None:
    knn = plan_.query.knn
    if knn is None:
        return None
    return knn.alias or f"__{knn.field}_score"


def finish(plan_: SearchPlan, knn_result: tuple[np.ndarray, np.ndarray] | None,
           sort_loader: Callable[[bytes, str], Any] | None = None) -> tuple[int, list[Row]]:
    """Order and page the matches: (total, rows of the requested page)."""
    index, req = plan_.index, plan_.req
    extras = plan_.ctx.extras
    docs = index.docs
    alias = knn_alias(plan_)
    profile = plan_.ctx.profile if plan_.ctx.profile is not None and plan_.ctx.profile.search_stages else None
    clock = time.perf_counter() if profile is not None else 0.0
    if knn_result is not None:
        ids, dists = knn_result
        hits: dict[int, float] = {}
        for doc, dist in zip(ids.tolist(), dists.tolist(), strict=True):
            if doc in docs:
                hits[doc] = plan_.hits.get(doc, 0.0)
                extras.setdefault(doc, {})[alias] = float(dist)
        if profile is not None:
            clock = profile.stage("Metrics Applier", len(hits), clock)
    else:
        hits = plan_.hits
    if req.sortby is not None and index.definition.field(req.sortby) is None and req.sortby != alias \
            and not any(req.sortby in e for e in extras.values()) and hits:
        raise ReplyError(f"Property `{req.sortby}` not loaded nor in schema")
    scored: dict[int, float] = {}
    try:
        _scores(plan_, hits, scored)
    except QueryTimeout as exc:
        plan_.cut_short(exc)  # RETURN: the documents scored so far
    scoring.normalise(req.scorer, scored)
    total = len(scored)
    if profile is not None and (req.sortby is None or req.withscores):  # RediSearch's Scorer, when it has one
        clock = profile.stage("Scorer", total, clock)
    rows = [Row(doc, docs[doc], score, extras.get(doc, {})) for doc, score in scored.items()]
    if req.sortby is not None:
        try:
            _sort_rows(index, rows, req.sortby, req.sort_asc, sort_loader, plan_.budget)
        except QueryTimeout as exc:
            plan_.cut_short(exc)  # RETURN: the rows as they were found, unsorted
    elif knn_result is not None:
        rows.sort(key=lambda r: (r.extras.get(alias, math.inf), r.doc_id))
    elif plan_.query.root.kind == "all" and not req.withscores:
        rows.sort(key=lambda r: r.doc_id)
    else:
        rows.sort(key=lambda r: (-r.score, r.doc_id))
    page = rows[req.offset:req.offset + req.limit] if req.limit else []
    if profile is not None:
        clock = profile.stage("Sorter", min(len(rows), req.offset + req.limit), clock)
        if req.offset:
            profile.stage("Pager/Limiter", len(page), clock)
    return total, page


def _scores(plan_: SearchPlan, hits: dict[int, float], out: dict[int, float]) -> dict[int, float]:
    index, req = plan_.index, plan_.req
    docs = index.docs
    text = index.text
    scorer = req.scorer
    wildcard = plan_.query.root.kind == "all" or plan_.query.root.kind == "none"
    avg = index.avg_doc_len
    scores = index.doc_scores
    tick = plan_.budget.tick
    slops = plan_.ctx.slops
    for doc, raw in hits.items():
        tick()
        if doc not in docs:
            continue
        doc_len = text.doc_len.get(doc, 0)
        max_freq = text.max_freq.get(doc, 0)
        doc_score = scores.get(doc, 1.0)
        if wildcard:
            out[doc] = scoring.wildcard_score(scorer, doc_score, doc_len, avg, max_freq)
        else:
            out[doc] = scoring.finish(scorer, raw, doc_score, max_freq, doc_len) / slops.get(doc, 1)
    return out


def _sort_rows(index: SearchIndex, rows: list[Row], name: str, asc: bool, loader,
               budget: Budget = UNLIMITED) -> None:
    spec = index.definition.field(name)
    numeric = index.numerics.get(name)

    def value(row: Row) -> Any:
        if name in row.extras:
            return row.extras[name]
        stored = index.sortable(name, row.doc_id)
        if stored is not None:
            return stored
        if numeric is not None:
            values = numeric.values_of(row.doc_id)
            return values[0] if values else None
        if loader is not None:
            raw = loader(row.key, spec.identifier if spec is not None else name)
            if raw is None:
                return None
            return _sortable(raw)
        return None

    tick = budget.tick
    for row in rows:
        tick()
        row.sort_value = value(row)
    present = [r for r in rows if r.sort_value is not None]
    missing = [r for r in rows if r.sort_value is None]
    numbers = all(isinstance(r.sort_value, (int, float)) for r in present)

    def key(r: Row):
        v = r.sort_value
        if numbers:
            return (float(v), r.doc_id)
        return (str(v), r.doc_id)

    present.sort(key=key, reverse=not asc)
    if not asc:  # ties stay in document order
        present.sort(key=lambda r: key(r)[0], reverse=True)
    rows[:] = present + missing


def _sortable(raw: Any) -> Any:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            return raw.lower()
    return raw
