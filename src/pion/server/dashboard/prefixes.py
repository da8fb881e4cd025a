"""The stored prefixes table: one row per registered prefix, sorted and paged on the server.

``GET /api/prefixes?sort=hits&order=desc&page=1&size=50``. A cache may hold 100,000 prefixes
or more, so the page never gets them all: the server reads the rows and sorts them on the event
loop (the only thread that may read the registry), a slice at a time with a yield to the loop
between (``BUILD_CHUNK`` rows read; ``CHUNK`` rows sorted alone, then the runs merged), so no
command waits behind more than one slice,
and answers one page. A worker thread would not help: sorting Python tuples holds the GIL for
the whole sort (measured: 0.5-0.6 s of loop stall for 100,000 rows at load average 10). The
snapshot is kept per viewer for ``SNAPSHOT_TTL`` seconds, or ``KEEP_FACTOR`` times what it cost
when that is longer, so paging and re-sorting within a refresh read nothing again and a large
table cannot take most of the loop's time.

Columns: the space (tenant), namespace, the model's fingerprint in short form (the manifest's
``fingerprint.class`` or ``model_id`` and the first 8 hex digits of ``fingerprint_sha256``),
tokens, codec, bytes held (rows and SSM state: what ``kv-maxmemory`` counts), LOOKUP hits,
the last hit's time and whether it is pinned.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from pion.kvcache.prefix import Prefix, manifest_codecs
from pion.kvcache.space import sides
from pion.server.dashboard.readers import Viewer, space_name

if TYPE_CHECKING:
    from pion.kvcache import KVEngine, KVSpace

COLUMNS = ("space", "ns", "model", "tokens", "codec", "bytes", "hits", "last_hit", "pinned")
#: the column each sort name orders by, and the default order a click gives it
DEFAULT_ORDER = {"space": "asc", "ns": "asc", "model": "asc", "tokens": "desc", "codec": "asc", "bytes": "desc",
                 "hits": "desc", "last_hit": "desc", "pinned": "desc"}
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50
#: rows sorted or merged per slice, and rows read per slice (reading a row costs ~8 µs: the
#: namespace's sessions are looked up for its bytes)
CHUNK = 1000
BUILD_CHUNK = 250
#: a snapshot is reused this long, or KEEP_FACTOR times what it cost to make when that is longer
#: (100,000 prefixes: the table then costs the loop at most about a fifth of its time)
SNAPSHOT_TTL = 1.0
KEEP_FACTOR = 4.0

Row = tuple[str, str, str, int, str, int, int, float, bool]


class QueryError(ValueError):
    """A bad ``sort``/``order``/``page``/``size``: answered 400 with this text."""


@dataclass(frozen=True, slots=True)
class Query:
    sort: str = "hits"
    order: str = "desc"
    page: int = 1
    size: int = DEFAULT_PAGE_SIZE

    @classmethod
    def parse(cls, args: dict[str, str]) -> Query:
        unknown = sorted(set(args) - {"sort", "order", "page", "size"})
        if unknown:
            raise QueryError(f"unknown parameter '{unknown[0]}' (sort, order, page, size)")
        sort = args.get("sort", "hits") or "hits"
        if sort not in COLUMNS:
            raise QueryError(f"sort must be one of {', '.join(COLUMNS)}")
        order = (args.get("order") or DEFAULT_ORDER[sort]).lower()
        if order not in ("asc", "desc"):
            raise QueryError("order must be asc or desc")
        page = _positive(args.get("page", "1"), "page", 1 << 31)
        size = _positive(args.get("size", str(DEFAULT_PAGE_SIZE)), "size", MAX_PAGE_SIZE)
        return cls(sort, order, page, size)


def _positive(text: str, name: str, limit: int) -> int:
    if not text.isdigit() or not 1 <= int(text) <= limit:
        raise QueryError(f"{name} must be an integer in 1..{limit}")
    return int(text)


def model_short(prefix: Prefix) -> str:
    manifest = prefix.manifest
    if not manifest:
        return ""
    fingerprint = manifest.get("fingerprint")
    name = ""
    if isinstance(fingerprint, dict):
        found = fingerprint.get("model_id") or fingerprint.get("class") or ""
        name = str(found).rsplit(".", 1)[-1][:40]
    digest = manifest.get("fingerprint_sha256")
    short = digest[:8] if isinstance(digest, str) else ""
    return " ".join(part for part in (name, short) if part)


def codec_of(prefix: Prefix) -> str:
    """The codec rows are kept in; a mixed schema (the manifest's per-layer codecs) as ``a+b``."""
    codecs = manifest_codecs(prefix.manifest) if prefix.manifest else None
    if codecs:
        names = sorted({name for side in codecs.values() for name in side})
        if names:
            return "+".join(names)
    return prefix.vquant


def tokens_of(space: KVSpace, prefix: Prefix) -> int:
    count = prefix.token_count()
    if count is not None:
        return count
    session = space.vstore.get(sides(prefix.ns)[0])
    first = session.layer(0) if session is not None else None
    return first.tokens if first is not None else 0


def row(name: str, space: KVSpace, prefix: Prefix) -> Row:
    return (name, prefix.ns.decode("utf-8", "replace"), model_short(prefix), tokens_of(space, prefix),
            codec_of(prefix), space.unit_bytes(prefix.ns), prefix.hits, prefix.last_hit,
            prefix.ns in space.evictor.pinned)


async def build_rows(engine: KVEngine, viewer: Viewer) -> list[Row]:
    """Every visible prefix as a row, ``BUILD_CHUNK`` at a time with a yield to the loop between."""
    rows: list[Row] = []
    for raw, space in list(engine.spaces.items()):
        name = space_name(raw)
        if not viewer.sees(name):
            continue
        prefixes = list(space.registry.prefixes.values())
        for start in range(0, len(prefixes), BUILD_CHUNK):
            rows.extend(row(name, space, prefix) for prefix in prefixes[start:start + BUILD_CHUNK])
            if start + BUILD_CHUNK < len(prefixes):
                await asyncio.sleep(0)
    return rows


async def sort_rows(rows: list[Row], key: Callable[[Row], Any], reverse: bool = False,
                    chunk: int = CHUNK) -> list[Row]:
    """``sorted(rows, key=key, reverse=reverse)`` in slices the loop can breathe between: each run
    of ``chunk`` rows is sorted alone, then the runs are merged ``chunk`` rows at a time. Stable
    like ``sorted`` (``heapq.merge`` takes ties from earlier runs first), so rows that tie keep
    the order they came in."""
    runs = []
    for start in range(0, len(rows), chunk):
        runs.append(sorted(rows[start:start + chunk], key=key, reverse=reverse))
        if len(rows) > chunk:
            await asyncio.sleep(0)
    if len(runs) <= 1:
        return runs[0] if runs else []
    merged = heapq.merge(*runs, key=key, reverse=reverse)
    out: list[Row] = []
    while True:
        piece = list(itertools.islice(merged, chunk))
        out.extend(piece)
        if len(piece) < chunk:
            return out
        await asyncio.sleep(0)


async def ordered(rows: list[Row], sort: str, order: str, chunk: int = CHUNK) -> list[Row]:
    """Sorted by ``sort``, ties by space then namespace (always ascending, so pages are stable)."""
    at = COLUMNS.index(sort)
    desc = order == "desc"
    if at == 1:
        return await sort_rows(rows, itemgetter(1, 0), desc, chunk)
    base = await sort_rows(rows, itemgetter(0, 1), False, chunk)  # (space, ns) pairs are unique
    if at == 0:
        return base[::-1] if desc else base
    return await sort_rows(base, itemgetter(at), desc, chunk)


@dataclass(slots=True)
class Snapshot:
    taken: float  # monotonic
    wall: float
    rows: list[Row]
    views: dict[tuple[str, str], list[Row]] = field(default_factory=dict)
    #: seconds of loop time spent building and sorting it: a costly snapshot is kept longer
    cost: float = 0.0

    def fresh(self, now: float) -> bool:
        return now - self.taken <= max(SNAPSHOT_TTL, KEEP_FACTOR * self.cost)


class PrefixTable:
    """The rows snapshot per viewer and the sorted views of it."""

    def __init__(self, engine: Callable[[], KVEngine | None]) -> None:
        self.engine = engine
        self._snapshots: dict[Viewer, Snapshot] = {}
        self._locks: dict[Viewer, asyncio.Lock] = {}
        self.builds = 0

    def prune(self) -> None:
        """Forget the snapshots gone stale (the cron calls it)."""
        now = time.monotonic()
        if any(not s.fresh(now) for s in self._snapshots.values()):
            self._snapshots = {v: s for v, s in self._snapshots.items() if s.fresh(now)}

    async def page(self, viewer: Viewer, query: Query) -> dict[str, Any]:
        snapshot, view = await self._sorted(viewer, query.sort, query.order)
        total = len(snapshot.rows) if snapshot is not None else 0
        pages = max(1, -(-total // query.size))
        start = (query.page - 1) * query.size
        shown = view[start:start + query.size]
        return {"sort": query.sort, "order": query.order, "page": query.page, "size": query.size,
                "total": total, "pages": pages, "columns": list(COLUMNS),
                "as_of": snapshot.wall if snapshot is not None else time.time(),
                "rows": [dict(zip(COLUMNS, r, strict=True)) for r in shown]}

    async def _sorted(self, viewer: Viewer, sort: str, order: str) -> tuple[Snapshot | None, list[Row]]:
        engine = self.engine()
        if engine is None:
            return None, []
        lock = self._locks.setdefault(viewer, asyncio.Lock())
        async with lock:  # two tabs of one viewer share one build
            now = time.monotonic()
            snapshot = self._snapshots.get(viewer)
            if snapshot is None or not snapshot.fresh(now):
                started = time.perf_counter()
                self.builds += 1
                snapshot = Snapshot(time.monotonic(), time.time(), await build_rows(engine, viewer))
                snapshot.cost = time.perf_counter() - started
                self._snapshots = {v: s for v, s in self._snapshots.items() if s.fresh(now)}
                self._snapshots[viewer] = snapshot
            view = snapshot.views.get((sort, order))
            if view is None:
                started = time.perf_counter()
                view = await ordered(snapshot.rows, sort, order)
                snapshot.cost += time.perf_counter() - started
                snapshot.views[(sort, order)] = view
            self._locks = {v: held for v, held in self._locks.items() if v in self._snapshots or held.locked()}
            return snapshot, view
