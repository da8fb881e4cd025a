"""GEOSHAPE fields: RediSearch's polygons and points, written as WKT, queried by a spatial predicate.

``FT.CREATE ... SCHEMA geom GEOSHAPE [FLAT|SPHERICAL]`` (SPHERICAL by default) indexes a WKT
``POINT(x y)`` or ``POLYGON((x y, ...), (hole...))`` per document; a query
``@geom:[WITHIN|CONTAINS|INTERSECTS|DISJOINT $shape] PARAMS 2 shape "POLYGON(...)" DIALECT 2``
keeps the documents whose shape stands in that relation to the query's (the document is the
subject: ``WITHIN`` finds shapes inside the query's, ``CONTAINS`` shapes that contain it).

Why shapely: the predicates are OGC's (the relations of boost.geometry that RediSearch uses), and
shapely evaluates them in GEOS, vectorised over all of a field's shapes at once in C, so a query
costs one array call, not a Python loop over documents. It is part of the ``search`` extra and
imported only when a GEOSHAPE field is used; without it the field answers a clear error.

The reader follows RediSearch's (boost's ``read_wkt``), measured against Redis Stack 7.4: only
POINT and POLYGON (anything else is ``unknown geometry type``); the type name in capitals and at
the very start; a ring need not repeat its first point (it is closed); a polygon's orientation is
corrected; an invalid polygon (self-intersecting, a hole outside its shell) is refused. A point
is never WITHIN or CONTAINS another point (RediSearch gives neither, only INTERSECTS).

SPHERICAL shapes are compared in the longitude/latitude plane: an edge is a straight line in
degrees, not a great-circle arc, and a shape across the antimeridian is not unwrapped
(docs/compat-differences.md).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

#: the predicates, with the number FT.EXPLAIN prints for each (RediSearch's enum)
PREDICATES = {"CONTAINS": 1, "WITHIN": 2, "DISJOINT": 3, "INTERSECTS": 4}
COORD_SYSTEMS = ("SPHERICAL", "FLAT")

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_PAIR = re.compile(rf"\s*({_NUM})\s+({_NUM})\s*")
_HEAD = re.compile(r"(POINT|POLYGON)\s*\(")


class GeometryError(ValueError):
    """A WKT text RediSearch's reader refuses; the message is its reason."""


def shapely_module():
    try:
        import shapely
    except ImportError as exc:  # the search extra is not installed
        raise GeometryError("GEOSHAPE needs shapely: pip install 'pion[search]'") from exc
    return shapely


def _pairs(body: str) -> list[tuple[float, float]]:
    points = []
    for part in body.split(","):
        m = _PAIR.fullmatch(part)
        if m is None:
            raise GeometryError("unknown geometry type")
        x, y = float(m.group(1)), float(m.group(2))
        if not (math.isfinite(x) and math.isfinite(y)):
            raise GeometryError("unknown geometry type")
        points.append((x, y))
    return points


def parse_wkt(text: str) -> Any:
    """The shapely geometry of a WKT POINT or POLYGON, read as RediSearch reads it."""
    shapely = shapely_module()
    m = _HEAD.match(text)
    if m is None:
        raise GeometryError("unknown geometry type")
    close = _closing(text, m.end() - 1)
    rest = text[close + 1:]
    if rest.strip():
        raise GeometryError(f"Too many tokens at '{rest.split()[0]}' in '{text}'")
    body = text[m.end():close]
    if m.group(1) == "POINT":
        if "(" in body:
            raise GeometryError("unknown geometry type")
        points = _pairs(body)
        if len(points) != 1:
            raise GeometryError("unknown geometry type")
        return shapely.Point(points[0])
    rings = _rings(body + ")")
    try:
        polygon = shapely.Polygon(rings[0], rings[1:])
    except (ValueError, TypeError, shapely.errors.GEOSException) as exc:
        raise GeometryError("invalid geometry") from exc
    if not polygon.is_valid:
        reason = shapely.is_valid_reason(polygon)
        raise GeometryError(f"invalid geometry: {reason}")
    return shapely.geometry.polygon.orient(polygon)


def _closing(text: str, start: int) -> int:
    """The index of the parenthesis closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise GeometryError("unknown geometry type")


def _rings(rest: str) -> list[list[tuple[float, float]]]:
    """``(x y, ...), (x y, ...))``: the rings of a polygon (the outer parenthesis already read)."""
    if not rest.endswith(")"):
        raise GeometryError("unknown geometry type")
    inner = rest[:-1].strip()
    rings = []
    pos = 0
    while True:
        if pos >= len(inner) or inner[pos] != "(":
            raise GeometryError("unknown geometry type")
        close = inner.find(")", pos)
        if close < 0 or "(" in inner[pos + 1:close]:
            raise GeometryError("unknown geometry type")
        ring = _pairs(inner[pos + 1:close])
        if len(ring) > 1 and ring[0] == ring[-1]:
            ring.pop()
        if len(set(ring)) < 3:
            raise GeometryError("invalid geometry: Too few points")
        rings.append(ring)
        pos = close + 1
        while pos < len(inner) and inner[pos].isspace():
            pos += 1
        if pos == len(inner):
            return rings
        if inner[pos] != ",":
            raise GeometryError("unknown geometry type")
        pos += 1
        while pos < len(inner) and inner[pos].isspace():
            pos += 1


class GeoShapeIndex:
    """One GEOSHAPE field's shapes by document id; a query tests all of them in one vectorised call."""

    def __init__(self, coord_system: str = "SPHERICAL") -> None:
        self.coord_system = coord_system
        self.shapes: dict[int, Any] = {}
        self.sizes = 0
        self._ids: np.ndarray | None = None
        self._geoms: np.ndarray | None = None
        self._points: np.ndarray | None = None

    def add(self, doc_id: int, shape: Any) -> None:
        self.shapes[doc_id] = shape
        self.sizes += _shape_bytes(shape)
        self._ids = None

    def remove(self, doc_id: int) -> None:
        shape = self.shapes.pop(doc_id, None)
        if shape is not None:
            self.sizes -= _shape_bytes(shape)
            self._ids = None

    def memory_bytes(self) -> int:
        return self.sizes

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._ids is None:
            shapely = shapely_module()
            ids = np.fromiter(self.shapes, dtype=np.int64, count=len(self.shapes))
            geoms = np.empty(len(ids), dtype=object)
            geoms[:] = list(self.shapes.values())
            self._geoms = geoms
            self._points = shapely.get_type_id(geoms) == 0 if len(geoms) else np.zeros(0, dtype=bool)
            self._ids = ids
        return self._ids, self._geoms, self._points  # type: ignore[return-value]

    def query(self, predicate: str, shape: Any) -> list[int]:
        """The ids of the documents whose shape is ``predicate`` (WITHIN ...) of ``shape``."""
        shapely = shapely_module()
        ids, geoms, points = self._arrays()
        if not len(ids):
            return []
        if predicate == "WITHIN":
            mask = shapely.within(geoms, shape)
        elif predicate == "CONTAINS":
            mask = shapely.contains(geoms, shape)
        elif predicate == "INTERSECTS":
            mask = shapely.intersects(geoms, shape)
        else:
            mask = shapely.disjoint(geoms, shape)
        if predicate in ("WITHIN", "CONTAINS") and shapely.get_type_id(shape) == 0:
            mask &= ~points  # a point is neither within nor containing a point (RediSearch)
        return ids[mask].tolist()


def _shape_bytes(shape: Any) -> int:
    """An estimate of what one shape holds: its coordinates and the object around them."""
    if hasattr(shape, "exterior"):
        return 96 + 16 * (len(shape.exterior.coords) + sum(len(ring.coords) for ring in shape.interiors))
    return 96 + 16 * len(shape.coords)
