"""FT.AGGREGATE: the query's matches become rows that flow through LOAD, GROUPBY/REDUCE, APPLY,
FILTER, SORTBY and LIMIT steps in the order given, as RediSearch's aggregation pipeline does.

A row starts with the KNN distance alias or VECTOR_RANGE yields, ``__score`` (ADDSCORES) and
``__key``; schema fields a step refers to are loaded on demand (``loader``), LOAD lists them
explicitly (``LOAD *``: every field). SORTBY without MAX or a later LIMIT keeps 10 rows, as
RediSearch's sorter does. Numbers print as RediSearch prints them (``expressions.format_value``).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pion.protocol.errors import ReplyError
from pion.storage.budget import UNLIMITED, Budget, QueryTimeout
from pion.vector.expressions import compile_with_properties, format_value, root_description
from pion.vector.search import SearchRequest, _int, parse_params

DEFAULT_SORT_MAX = 10

#: ``LOAD *`` (every field); not a property name, which ``LOAD 1 *`` gives
LOAD_ALL = "\x01*"


@dataclass
class Step:
    kind: str
    args: Any
    #: budget items one row costs in this step (an expression's length: a long APPLY ticks more)
    cost: int = 1
    text: str = ""  # an APPLY's or FILTER's expression as given (FT.PROFILE names the stage after it)


@dataclass
class AggregateRequest:
    query: str
    steps: list[Step] = field(default_factory=list)
    loads: list[str] | None = None  # None: nothing explicit; [LOAD_ALL]: all (``LOAD *``)
    verbatim: bool = False
    addscores: bool = False
    scorer: str = "BM25STD"
    params: dict[str, bytes] = field(default_factory=dict)
    dialect: int = 1
    cursor: bool = False
    cursor_count: int = 1000
    cursor_maxidle: int = 300_000
    timeout_ms: int | None = None
    #: RediSearch's ON_TIMEOUT policy (FT.CONFIG), set by the command
    on_timeout: str = "return"
    #: FT.CONFIG MAXAGGREGATERESULTS (``cap_results``); None: unlimited
    max_rows: int | None = None

    def search_request(self) -> SearchRequest:
        return SearchRequest(query=self.query, verbatim=self.verbatim, scorer=self.scorer, params=self.params,
                             dialect=self.dialect, limit=1 << 31, on_timeout=self.on_timeout)


def _cost(expression: str) -> int:
    """Budget items one evaluation of an expression counts as (about one per operator)."""
    return 1 + len(expression) // 16


def _prop(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    return text[1:] if text.startswith("@") else text


def parse_aggregate(argv: list[bytes], default_dialect: int) -> AggregateRequest:
    from pion.vector import scoring

    req = AggregateRequest(query=argv[2].decode("utf-8", "replace"), dialect=default_dialect)
    i, n = 3, len(argv)

    def need(count: int, what: str) -> None:
        if i + count >= n:
            raise ReplyError(f"Bad arguments for {what}: Expected an argument, but none provided")

    while i < n:
        word = argv[i].upper()
        if word == b"VERBATIM":
            req.verbatim = True
        elif word == b"ADDSCORES":
            req.addscores = True
        elif word == b"SCORER":
            need(1, "SCORER")
            req.scorer = scoring.check(argv[i + 1].decode())
            i += 1
        elif word == b"LOAD":
            need(1, "LOAD")
            if argv[i + 1] == b"*":  # `LOAD *`; `LOAD 1 *` names a property `*`, as in RediSearch
                req.loads = [LOAD_ALL]
                i += 1
            else:
                count = _int(argv[i + 1], "LOAD")
                if i + 2 + count > n:
                    raise ReplyError("Bad arguments for LOAD: Expected an argument, but none provided")
                items = argv[i + 2:i + 2 + count]
                loads = req.loads if req.loads is not None else []
                j = 0
                while j < len(items):
                    name = _prop(items[j])
                    alias = name
                    if j + 2 < len(items) + 1 and j + 1 < len(items) and items[j + 1].upper() == b"AS":
                        alias = items[j + 2].decode() if j + 2 < len(items) else name
                        j += 2
                    loads.append(name if alias == name else f"{name}\0{alias}")
                    j += 1
                req.loads = loads
                i += 1 + count
        elif word == b"GROUPBY":
            need(1, "GROUPBY")
            count = _int(argv[i + 1], "GROUPBY")
            props = [_prop(p) for p in argv[i + 2:i + 2 + count]]
            for raw in argv[i + 2:i + 2 + count]:
                if not raw.startswith(b"@"):
                    raise ReplyError(f"Bad arguments for GROUPBY: Unknown property `{raw.decode()}`. Did you mean `@{raw.decode()}`?")
            i += 2 + count
            reducers = []
            while i < n and argv[i].upper() == b"REDUCE":
                if i + 2 >= n:
                    raise ReplyError("Bad arguments for REDUCE: Expected an argument, but none provided")
                name = argv[i + 1].decode().upper()
                nargs = _int(argv[i + 2], "REDUCE")
                rargs = [a.decode("utf-8", "replace") for a in argv[i + 3:i + 3 + nargs]]
                i += 3 + nargs
                alias = None
                if i + 1 < n and argv[i].upper() == b"AS":
                    alias = argv[i + 1].decode()
                    i += 2
                reducers.append(_make_reducer(name, rargs, alias))
            req.steps.append(Step("group", (props, reducers)))
            continue
        elif word == b"SORTBY":
            need(1, "SORTBY")
            count = _int(argv[i + 1], "SORTBY")
            items = argv[i + 2:i + 2 + count]
            keys: list[tuple[str, bool]] = []
            j = 0
            while j < len(items):
                raw = items[j]
                if not raw.startswith(b"@"):
                    raise ReplyError(f"Bad arguments for SORTBY: Unknown property `{raw.decode()}`. Did you mean `@{raw.decode()}`?")
                asc = True
                if j + 1 < len(items) and items[j + 1].upper() in (b"ASC", b"DESC"):
                    asc = items[j + 1].upper() == b"ASC"
                    j += 1
                keys.append((_prop(raw), asc))
                j += 1
            i += 2 + count
            maximum = None
            if i + 1 < n and argv[i].upper() == b"MAX":
                maximum = _int(argv[i + 1], "MAX")
                i += 2
            req.steps.append(Step("sort", (keys, maximum)))
            continue
        elif word == b"APPLY":
            need(3, "APPLY")
            text = argv[i + 1].decode("utf-8", "replace")
            if argv[i + 2].upper() != b"AS":
                raise ReplyError("Bad arguments for APPLY: AS is required")
            expr, props = compile_with_properties(text)
            req.steps.append(Step("apply", (expr, argv[i + 3].decode(), props), _cost(text), text))
            i += 3
        elif word == b"FILTER":
            need(1, "FILTER")
            text = argv[i + 1].decode("utf-8", "replace")
            req.steps.append(Step("filter", compile_with_properties(text), _cost(text), text))
            i += 1
        elif word == b"LIMIT":
            need(2, "LIMIT")
            req.steps.append(Step("limit", (_int(argv[i + 1], "LIMIT"), _int(argv[i + 2], "LIMIT"))))
            i += 2
        elif word == b"WITHCURSOR":
            req.cursor = True
            while i + 2 < n + 1 and i + 1 < n and argv[i + 1].upper() in (b"COUNT", b"MAXIDLE"):
                if i + 2 >= n:
                    raise ReplyError("Bad arguments for WITHCURSOR: Expected an argument, but none provided")
                value = _int(argv[i + 2], argv[i + 1].decode().upper())
                if argv[i + 1].upper() == b"COUNT":
                    req.cursor_count = max(1, value)
                else:
                    if value < 1:
                        raise ReplyError("Bad arguments for MAXIDLE: Value is outside acceptable bounds")
                    req.cursor_maxidle = value
                i += 2
        elif word == b"PARAMS":
            req.params, i = parse_params(argv, i)
            continue
        elif word == b"DIALECT":
            need(1, "DIALECT")
            req.dialect = _int(argv[i + 1], "DIALECT", 1)
            if req.dialect > 4:
                raise ReplyError("DIALECT requires a non negative integer >=1 and <= 4")
            i += 1
        elif word == b"TIMEOUT":
            need(1, "TIMEOUT")
            req.timeout_ms = _int(argv[i + 1], "TIMEOUT")
            i += 1
        elif word in (b"NOSORT", b"WITHOUTCOUNT", b"WITHCOUNT"):
            pass
        else:
            raise ReplyError(f"Unknown argument `{argv[i].decode('utf-8', 'replace')}`")
        i += 1
    return req


# -- reducers ---------------------------------------------------------------------------------------


@dataclass
class Reducer:
    name: str
    alias: str
    prop: str | None
    reduce: Callable[[list[dict[str, Any]]], Any]


def cap_results(req: AggregateRequest, cap: int | None) -> None:
    """Apply FT.CONFIG MAXAGGREGATERESULTS as RediSearch 2.10 does (compared on Redis Stack): a
    LIMIT that asks for more rows answers ``LIMIT exceeds maximum of N``; a sorter keeps at most N
    rows (its MAX or default 10 too), and a reply without a cursor carries at most N rows. A
    cursor's chunks are not capped (RediSearch's cursor reads take its COUNT instead)."""
    if cap is None:
        return
    for step in req.steps:
        if step.kind == "limit" and step.args[1] > cap:
            raise ReplyError(f"LIMIT exceeds maximum of {cap}")
    req.max_rows = cap


def _num(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _make_reducer(name: str, args: list[str], alias: str | None) -> Reducer:
    def prop_arg(k: int = 0) -> str:
        if len(args) <= k:
            raise ReplyError(f"Bad arguments for {name}: Expected an argument, but none provided")
        return args[k][1:] if args[k].startswith("@") else args[k]

    # RediSearch's name for an unaliased reducer: its name and every argument without `@`, joined with
    # commas, lower-cased (``__generated_aliasquantileprice,0.5``, ``...first_valuename,by,price,desc``)
    default_alias = "__generated_alias" + name.lower() + ",".join(a[1:] if a.startswith("@") else a
                                                                  for a in args).lower()
    if name == "COUNT":
        if args:
            raise ReplyError("Bad arguments for COUNT: Too many arguments")
        return Reducer(name, alias or "__generated_aliascount", None, lambda rows: float(len(rows)))
    prop = prop_arg()

    def values(rows):
        return [r.get(prop) for r in rows if r.get(prop) is not None]

    def numbers(rows):
        return [x for x in (_num(v) for v in values(rows)) if x is not None]

    if name in ("COUNT_DISTINCT", "COUNT_DISTINCTISH"):
        fn = lambda rows: float(len({format_value(v) for v in values(rows)}))  # noqa: E731
    elif name == "SUM":
        fn = lambda rows: float(sum(numbers(rows)))  # noqa: E731
    elif name == "MIN":
        fn = lambda rows: min(numbers(rows)) if numbers(rows) else math.inf  # noqa: E731
    elif name == "MAX":
        fn = lambda rows: max(numbers(rows)) if numbers(rows) else -math.inf  # noqa: E731
    elif name == "AVG":
        fn = lambda rows: (sum(nums) / len(nums)) if (nums := numbers(rows)) else math.nan  # noqa: E731
    elif name == "STDDEV":
        fn = lambda rows: statistics.stdev(nums) if len(nums := numbers(rows)) > 1 else 0.0  # noqa: E731
    elif name == "QUANTILE":
        if len(args) != 2:
            raise ReplyError("Bad arguments for QUANTILE: Expected 2 arguments")
        q = _num(args[1])
        if q is None or not 0 <= q <= 1:
            raise ReplyError("Quantile must be between 0 and 1")
        fn = lambda rows: _quantile(sorted(numbers(rows)), q)  # noqa: E731
    elif name == "TOLIST":
        fn = lambda rows: list(dict.fromkeys(format_value(v) for v in values(rows)))  # noqa: E731
    elif name == "FIRST_VALUE":
        by, asc = None, True
        if len(args) >= 3 and args[1].upper() == "BY":
            by = args[2][1:] if args[2].startswith("@") else args[2]
            if len(args) >= 4:
                asc = args[3].upper() != "DESC"

        def first(rows):
            if by is None:
                vals = values(rows)
                return vals[0] if vals else None
            ranked = [r for r in rows if r.get(by) is not None]
            if not ranked:
                return None
            ranked.sort(key=lambda r: _sort_key(r.get(by)), reverse=not asc)
            return ranked[0].get(prop)
        fn = first
    elif name == "RANDOM_SAMPLE":
        size = int(_num(args[1]) or 1) if len(args) > 1 else 1
        fn = lambda rows: random.sample(vals, min(size, len(vals))) if (vals := values(rows)) else []  # noqa: E731
    else:
        raise ReplyError(f"Reducer not found: {name}" if name else "Reducer not found")
    return Reducer(name, alias or default_alias, prop, fn)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    pos = q * (len(values) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def _sort_key(value: Any) -> tuple:
    number = _num(value)
    if number is not None and not isinstance(value, str) or (isinstance(value, str) and number is not None):
        return (0, number, "")
    return (1, 0.0, str(value))


# -- running ----------------------------------------------------------------------------------------


class _Progress:
    """What a pipeline cut short by its budget answers under ON_TIMEOUT RETURN: the rows the
    interrupted step had produced (the later steps are not run)."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []


def check_properties(req: AggregateRequest, schema_names: set[str], produced: set[str]) -> None:
    """SORTBY or a REDUCE of a property no step provides is RediSearch's error, not rows without it: the
    properties known at each step are the schema's, LOAD's, the query's own (``produced``: a KNN
    distance), APPLY's aliases, and after a GROUPBY only its properties and reducers."""
    if req.loads == [LOAD_ALL]:
        return
    known = set(schema_names) | produced | {"__key", "__score"}
    for item in req.loads or ():
        name, _, alias = item.partition("\0")
        known.add(alias or name)
    for step in req.steps:
        if step.kind == "apply":
            known.add(step.args[1])
        elif step.kind == "group":
            props, reducers = step.args
            for reducer in reducers:
                if reducer.prop and reducer.prop not in known and not reducer.prop.startswith("$"):
                    raise ReplyError(f"Property `{reducer.prop}` not present in document or pipeline")
            known = set(props) | {r.alias for r in reducers}
        elif step.kind == "sort":
            for name, _ in step.args[0]:
                if name not in known and not name.startswith("$"):
                    raise ReplyError(f"Property `{name}` not loaded nor in schema")


def run_pipeline(req: AggregateRequest, rows: list[dict[str, Any]], load: Callable[[dict[str, Any], str], Any],
                 schema_names: set[str], budget: Budget = UNLIMITED,
                 counts: dict[str, int] | None = None, profile: Any = None) -> tuple[list[dict[str, Any]], bool]:
    """Apply the steps to the rows (each row carries ``__key``); ``load(row, name)`` fills a field.
    ``counts["groups"]`` gets the number of rows the last GROUPBY made (FT.AGGREGATE's total then).

    Every row a step touches ticks ``budget``. Past it: ``QueryTimeout`` under ON_TIMEOUT FAIL;
    under RETURN the rows the interrupted step had produced so far. Returns (rows, timed_out)."""
    progress = _Progress()
    try:
        return _run(req, rows, load, schema_names, budget.tick, progress, counts, profile), False
    except QueryTimeout:
        if req.on_timeout != "return":
            raise
        return progress.rows, True


def _run(req: AggregateRequest, rows: list[dict[str, Any]], load: Callable[[dict[str, Any], str], Any],
         schema_names: set[str], tick: Callable[..., None], progress: _Progress,
         counts: dict[str, int] | None = None, profile: Any = None) -> list[dict[str, Any]]:
    """``profile`` (FT.PROFILE's ``query_profile.Profiler``) gets a result processor a step."""
    clock = time.perf_counter() if profile is not None else 0.0
    if req.loads:
        progress.rows = done = []
        for row in rows:
            tick()
            if req.loads == [LOAD_ALL]:
                load(row, LOAD_ALL)
            else:
                for item in req.loads:
                    name, _, alias = item.partition("\0")
                    if name not in row or alias:
                        value = load(row, name)
                        if value is not None:
                            row[alias or name] = value
            done.append(row)
        if profile is not None:
            clock = profile.stage("Loader", len(rows), clock)
    steps = req.steps
    for n_step, step in enumerate(steps):
        kind = step.kind
        if kind == "apply":
            expr, alias, props = step.args
            _ensure(rows, props, load, schema_names, tick, progress)
            progress.rows = done = []
            cost = step.cost
            for row in rows:
                tick(cost)
                row[alias] = expr(row)
                done.append(row)
        elif kind == "filter":
            expr, props = step.args
            _ensure(rows, props, load, schema_names, tick, progress)
            progress.rows = kept = []
            cost = step.cost
            for row in rows:
                tick(cost)
                if _truthy(expr(row)):
                    kept.append(row)
            rows = kept
        elif kind == "group":
            props, reducers = step.args
            _ensure(rows, props + [r.prop for r in reducers if r.prop], load, schema_names, tick, progress)
            progress.rows = []  # groups are answered whole or not at all
            groups: dict[tuple, list[dict[str, Any]]] = {}
            for row in rows:
                tick()
                key = tuple(_group_key(row.get(p)) for p in props)
                groups.setdefault(key, []).append(row)
            out = []
            for members in groups.values():
                tick(len(members))
                new = {p: members[0].get(p) for p in props}
                for reducer in reducers:
                    new[reducer.alias] = reducer.reduce(members)
                out.append(new)
            rows = out
            if counts is not None:
                counts["groups"] = len(rows)
        elif kind == "sort":
            keys, maximum = step.args
            _ensure(rows, [k for k, _ in keys], load, schema_names, tick, progress)
            tick(len(rows))
            for name, asc in reversed(keys):
                present = [r for r in rows if r.get(name) is not None]
                missing = [r for r in rows if r.get(name) is None]
                present.sort(key=lambda r, n=name: _sort_key(r.get(n)), reverse=not asc)
                rows = present + missing
            later_limit = any(s.kind == "limit" for s in steps[n_step + 1:])
            if maximum is not None:
                rows = rows[:maximum]
            elif not later_limit:
                rows = rows[:DEFAULT_SORT_MAX]
            if req.max_rows is not None:
                rows = rows[:req.max_rows]
        elif kind == "limit":
            offset, count = step.args
            rows = rows[offset:offset + count]
        progress.rows = rows
        if profile is not None:
            if kind == "limit" and n_step and steps[n_step - 1].kind == "sort":
                clock = profile.extend_stage(len(rows), clock)  # RediSearch's sorter takes the LIMIT after it
            else:
                clock = profile.stage(_stage_name(step), len(rows), clock)
    return rows


def _stage_name(step: Step) -> str:
    """RediSearch's name of the result processor a step is."""
    if step.kind in ("apply", "filter"):
        return ("Projector - " if step.kind == "apply" else "Filter - ") + root_description(step.text)
    return {"group": "Grouper", "sort": "Sorter", "limit": "Pager/Limiter"}[step.kind]


def _group_key(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, float):
        return format_value(value)
    return value


def _truthy(value: Any) -> bool:
    if value is None:
        return False
    number = _num(value)
    if number is not None:
        return number != 0 and not math.isnan(number)
    return bool(value)


def _ensure(rows: list[dict[str, Any]], props: list[str], load, schema_names: set[str],
            tick: Callable[..., None], progress: _Progress) -> None:
    """Load schema fields a step refers to that the rows do not carry yet (implicit LOAD)."""
    wanted = [p for p in props if p in schema_names]
    if not wanted:
        return
    progress.rows = done = []
    for row in rows:
        tick()
        for name in wanted:
            if name not in row:
                value = load(row, name)
                if value is not None:
                    row[name] = value
        done.append(row)


def render_value(value: Any) -> Any:
    if isinstance(value, list):
        return [render_value(v) for v in value]
    if value is None:
        return None
    return format_value(value).encode() if not isinstance(value, bytes) else value
