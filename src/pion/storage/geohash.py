"""Redis's geohash: 52-bit interleaved cells, search areas and the haversine distance.

A port of Redis's geohash.c / geohash_helper.c, operation for operation, so that a position's
sorted-set score, the decoded coordinates, the 9 cells a search visits and every distance come
out bit-identical to Redis's (clients compare GEOADD scores and GEOSEARCH results).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STEP_MAX = 26
LAT_MIN, LAT_MAX = -85.05112878, 85.05112878
LONG_MIN, LONG_MAX = -180.0, 180.0
EARTH_RADIUS = 6372797.560856
MERCATOR_MAX = 20037726.37
_D_R = math.pi / 180.0
_MASK64 = (1 << 64) - 1
_EVEN = 0x5555555555555555
_ODD = 0xAAAAAAAAAAAAAAAA
WGS84 = ((LONG_MIN, LONG_MAX), (LAT_MIN, LAT_MAX))
STANDARD = ((-180.0, 180.0), (-90.0, 90.0))


def _spread(value: int) -> int:
    value &= 0xFFFFFFFF
    value = (value | (value << 16)) & 0x0000FFFF0000FFFF
    value = (value | (value << 8)) & 0x00FF00FF00FF00FF
    value = (value | (value << 4)) & 0x0F0F0F0F0F0F0F0F
    value = (value | (value << 2)) & 0x3333333333333333
    return (value | (value << 1)) & _EVEN


def _squash(value: int) -> int:
    value &= _EVEN
    value = (value | (value >> 1)) & 0x3333333333333333
    value = (value | (value >> 2)) & 0x0F0F0F0F0F0F0F0F
    value = (value | (value >> 4)) & 0x00FF00FF00FF00FF
    value = (value | (value >> 8)) & 0x0000FFFF0000FFFF
    return (value | (value >> 16)) & 0xFFFFFFFF


def encode(lon: float, lat: float, step: int = STEP_MAX, ranges=WGS84) -> int | None:
    """Interleaved cell bits (latitude in the even bits), or None outside the ranges."""
    (lon_min, lon_max), (lat_min, lat_max) = ranges
    if step > 32 or step == 0:
        return None
    if lon > LONG_MAX or lon < LONG_MIN or lat > LAT_MAX or lat < LAT_MIN:
        return None
    if lat < lat_min or lat > lat_max or lon < lon_min or lon > lon_max:
        return None
    lat_offset = (lat - lat_min) / (lat_max - lat_min) * float(1 << step)
    lon_offset = (lon - lon_min) / (lon_max - lon_min) * float(1 << step)
    return _spread(int(lat_offset)) | (_spread(int(lon_offset)) << 1)


def score_of(lon: float, lat: float) -> int:
    """The sorted-set score GEOADD stores: the 26-step cell aligned to 52 bits."""
    bits = encode(lon, lat)
    return 0 if bits is None else bits


@dataclass(slots=True)
class Area:
    lon_min: float
    lon_max: float
    lat_min: float
    lat_max: float


def decode_area(bits: int, step: int, ranges=WGS84) -> Area:
    (lon_min, lon_max), (lat_min, lat_max) = ranges
    lat_cell = _squash(bits)
    lon_cell = _squash(bits >> 1)
    cells = float(1 << step)
    lat_scale = lat_max - lat_min
    lon_scale = lon_max - lon_min
    return Area(
        lon_min + (lon_cell * 1.0 / cells) * lon_scale,
        lon_min + ((lon_cell + 1) * 1.0 / cells) * lon_scale,
        lat_min + (lat_cell * 1.0 / cells) * lat_scale,
        lat_min + ((lat_cell + 1) * 1.0 / cells) * lat_scale,
    )


def decode_score(score: float) -> tuple[float, float]:
    """(longitude, latitude) of the centre of the cell a score names."""
    bits = int(score) & _MASK64 if math.isfinite(score) else 0
    area = decode_area(bits, STEP_MAX)
    lon = min(max((area.lon_min + area.lon_max) / 2, LONG_MIN), LONG_MAX)
    lat = min(max((area.lat_min + area.lat_max) / 2, LAT_MIN), LAT_MAX)
    return lon, lat


def geohash_string(score: float) -> bytes:
    """GEOHASH: re-encode the decoded point in the standard -90..90 grid, 11 base32 chars."""
    lon, lat = decode_score(score)
    bits = encode(lon, lat, STEP_MAX, STANDARD) or 0
    alphabet = b"0123456789bcdefghjkmnpqrstuvwxyz"
    out = bytearray(alphabet[(bits >> (52 - (i + 1) * 5)) & 0x1F] for i in range(10))
    out.append(alphabet[0])
    return bytes(out)


# -- distances ---------------------------------------------------------------------------


def lat_distance(lat1: float, lat2: float) -> float:
    return EARTH_RADIUS * abs(lat2 * _D_R - lat1 * _D_R)


def distance(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    """Haversine great-circle distance in metres, as geohashGetDistance computes it."""
    lon1r = lon1 * _D_R
    lon2r = lon2 * _D_R
    v = math.sin((lon2r - lon1r) / 2)
    if v == 0.0:
        return lat_distance(lat1, lat2)
    lat1r = lat1 * _D_R
    lat2r = lat2 * _D_R
    u = math.sin((lat2r - lat1r) / 2)
    a = u * u + math.cos(lat1r) * math.cos(lat2r) * v * v
    return 2.0 * EARTH_RADIUS * math.asin(math.sqrt(a))


@dataclass(slots=True)
class Shape:
    """A search shape centred at (lon, lat): a radius, or a width x height box (in ``unit``s)."""

    lon: float
    lat: float
    conversion: float  # metres per unit
    radius: float = 0.0
    width: float = 0.0
    height: float = 0.0
    is_box: bool = False

    def contains(self, lon: float, lat: float) -> float | None:
        """Distance in metres from the centre if the point is inside, else None."""
        if not self.is_box:
            dist = distance(self.lon, self.lat, lon, lat)
            return None if dist > self.radius * self.conversion else dist
        if lat_distance(lat, self.lat) > self.height * self.conversion / 2:
            return None
        if distance(lon, lat, self.lon, lat) > self.width * self.conversion / 2:
            return None
        return distance(self.lon, self.lat, lon, lat)


def _estimate_steps(range_meters: float, lat: float) -> int:
    if range_meters == 0:
        return 26
    step = 1
    while range_meters < MERCATOR_MAX:
        range_meters *= 2
        step += 1
    step -= 2
    if lat > 66 or lat < -66:
        step -= 1
        if lat > 80 or lat < -80:
            step -= 1
    return max(1, min(26, step))


def _bounding_box(shape: Shape) -> tuple[float, float, float, float]:
    half_h = shape.conversion * (shape.height / 2 if shape.is_box else shape.radius)
    half_w = shape.conversion * (shape.width / 2 if shape.is_box else shape.radius)
    lat_delta = (half_h / EARTH_RADIUS) / _D_R
    long_delta_top = (half_w / EARTH_RADIUS / math.cos((shape.lat + lat_delta) * _D_R)) / _D_R
    long_delta_bottom = (half_w / EARTH_RADIUS / math.cos((shape.lat - lat_delta) * _D_R)) / _D_R
    delta = long_delta_bottom if shape.lat < 0 else long_delta_top
    return shape.lon - delta, shape.lat - lat_delta, shape.lon + delta, shape.lat + lat_delta


def _move(bits: int, step: int, direction: int, odd: bool) -> int:
    if direction == 0:
        return bits
    shift = 64 - step * 2
    moving = bits & (_ODD if odd else _EVEN)
    fixed = bits & (_EVEN if odd else _ODD)
    zz = (_EVEN if odd else _ODD) >> shift
    if direction > 0:
        moving = (moving + zz + 1) & _MASK64
    else:
        moving = ((moving | zz) - (zz + 1)) & _MASK64
    moving &= (_ODD if odd else _EVEN) >> shift
    return moving | fixed


def _neighbor(bits: int, step: int, dx: int, dy: int) -> int:
    return _move(_move(bits, step, dx, True), step, dy, False)


#: (dx, dy) of the cells Redis visits, in its order: centre, N, S, E, W, NE, NW, SE, SW
_CELLS = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1))


def _centre_cell(shape: Shape, bounds: tuple[float, float, float, float]) -> tuple[int, int]:
    """The cell holding the centre, one step coarser when a neighbour misses the box's edge."""
    min_lon, min_lat, max_lon, max_lat = bounds
    if shape.is_box:
        radius = math.sqrt((shape.width / 2) * (shape.width / 2) + (shape.height / 2) * (shape.height / 2))
    else:
        radius = shape.radius
    steps = _estimate_steps(radius * shape.conversion, shape.lat)
    bits = encode(shape.lon, shape.lat, steps) or 0
    north = decode_area(_neighbor(bits, steps, 0, 1), steps)
    south = decode_area(_neighbor(bits, steps, 0, -1), steps)
    east = decode_area(_neighbor(bits, steps, 1, 0), steps)
    west = decode_area(_neighbor(bits, steps, -1, 0), steps)
    if steps > 1 and (
        north.lat_max < max_lat or south.lat_min > min_lat or east.lon_max < max_lon or west.lon_min > min_lon
    ):
        steps -= 1
        bits = encode(shape.lon, shape.lat, steps) or 0
    return bits, steps


def search_cells(shape: Shape) -> list[tuple[int, int]]:
    """The (bits, step) cells, in Redis's order, to scan for ``shape``; useless ones dropped."""
    bounds = _bounding_box(shape)
    min_lon, min_lat, max_lon, max_lat = bounds
    bits, steps = _centre_cell(shape, bounds)
    area = decode_area(bits, steps)
    dropped: set[tuple[int, int]] = set()
    if steps >= 2:
        if area.lat_min < min_lat:
            dropped |= {(0, -1), (-1, -1), (1, -1)}
        if area.lat_max > max_lat:
            dropped |= {(0, 1), (1, 1), (-1, 1)}
        if area.lon_min < min_lon:
            dropped |= {(-1, 0), (-1, -1), (-1, 1)}
        if area.lon_max > max_lon:
            dropped |= {(1, 0), (1, -1), (1, 1)}
    cells = []
    last: tuple[int, int] | None = None  # Redis never compares with the centre cell
    for index, (dx, dy) in enumerate(_CELLS):
        if (dx, dy) in dropped:
            continue
        cell = (_neighbor(bits, steps, dx, dy), steps)
        if last is not None and cell == last:
            continue  # huge radii: adjacent neighbours can be the same cell
        cells.append(cell)
        last = cell if index else None
    return cells


def cell_score_range(bits: int, step: int) -> tuple[int, int]:
    """Scores [low, high) of every 52-bit position inside a cell."""
    shift = 52 - step * 2
    return bits << shift, (bits + 1) << shift
