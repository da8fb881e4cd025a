"""The stored prefixes table: one row per registered prefix, sorted and paged on the server.

``GET /api/prefixes?sort=hits&order=desc&page=1&size=50``. A cache may hold 100,000 prefixes
or more, so the page never gets them all: the server builds the rows (on the event loop, in
chunks of ``CHUNK`` with a yield between, so commands keep being served), sorts them in a
worker thread (the rows are a snapshot of plain values the loop no longer touches) and answers
one page. The snapshot is kept ``SNAPSHOT_TTL`` seconds per viewer, so paging and re-sorting
within a refresh build nothing again.

Columns: the space (tenant), namespace, the model's fingerprint in short form (the manifest's
``fingerprint.class`` or ``model_id`` and the first 8 hex digits of ``fingerprint_sha256``),
tokens, codec, bytes held (rows and SSM state: what ``kv-maxmemory`` counts), LOOKUP hits,
the last hit's time and whether it is pinned.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
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
CHUNK = 2000
SNAPSHOT_TTL = 1.0

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
    """Every visible prefix as a row, ``CHUNK`` at a time with a yield to the loop between."""
    rows: list[Row] = []
    for raw, space in list(engine.spaces.items()):
        name = space_name(raw)
        if not viewer.sees(name):
            continue
        prefixes = list(space.registry.prefixes.values())
        for start in range(0, len(prefixes), CHUNK):
            rows.extend(row(name, space, prefix) for prefix in prefixes[start:start + CHUNK])
            if start + CHUNK < len(prefixes):
                await asyncio.sleep(0)
    return rows


def ordered(rows: list[Row], sort: str, order: str) -> list[Row]:
    """Sorted by ``sort``, ties by space then namespace (always ascending, so pages are stable)."""
    at = COLUMNS.index(sort)
    if at <= 1:
        result = sorted(rows, key=lambda r: (r[0], r[1]) if at == 0 else (r[1], r[0]))
        return result[::-1] if order == "desc" else result
    # ties ascending whatever the order: sort by the tie-break first, then stably by the column
    result = sorted(rows, key=lambda r: (r[0], r[1]))
    result.sort(key=lambda r: r[at], reverse=order == "desc")
    return result


class PrefixTable:
    """The rows snapshot per viewer and the sorted views of it."""

    def __init__(self, engine: Callable[[], KVEngine | None]) -> None:
        self.engine = engine
        self._snapshots: dict[Viewer, tuple[float, list[Row], dict[tuple[str, str], list[Row]]]] = {}

    async def page(self, viewer: Viewer, query: Query) -> dict[str, Any]:
        rows_sorted, total = await self._sorted(viewer, query.sort, query.order)
        pages = max(1, -(-total // query.size))
        start = (query.page - 1) * query.size
        shown = rows_sorted[start:start + query.size]
        return {"sort": query.sort, "order": query.order, "page": query.page, "size": query.size,
                "total": total, "pages": pages, "columns": list(COLUMNS),
                "rows": [dict(zip(COLUMNS, r, strict=True)) for r in shown]}

    async def _sorted(self, viewer: Viewer, sort: str, order: str) -> tuple[list[Row], int]:
        engine = self.engine()
        if engine is None:
            return [], 0
        now = time.monotonic()
        snapshot = self._snapshots.get(viewer)
        if snapshot is None or now - snapshot[0] > SNAPSHOT_TTL:
            rows = await build_rows(engine, viewer)
            snapshot = (time.monotonic(), rows, {})
            self._snapshots = {v: s for v, s in self._snapshots.items() if now - s[0] <= SNAPSHOT_TTL}
            self._snapshots[viewer] = snapshot
        views = snapshot[2]
        view = views.get((sort, order))
        if view is None:
            rows = snapshot[1]
            view = await asyncio.to_thread(ordered, rows, sort, order) if len(rows) > CHUNK else ordered(rows, sort, order)
            views[(sort, order)] = view
        return view, len(snapshot[1])
