"""Geo commands on top of sorted sets: GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH(STORE) and the
GEORADIUS* forms.

A position is a member whose score is Redis's 52-bit geohash (``pion.storage.geohash``), so
GEOADD scores equal Redis's and ZRANGE & co. work on geo sets. ``_search`` ports Redis's
georadiusGeneric: the same option parsing and error texts, the same 9 cells visited in the
same order (so unsorted results come back in Redis's order), the same distance arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY, HumanDouble
from pion.server.args import parse_int
from pion.server.commands.core.zparse import parse_double
from pion.server.commands.core.zset_ranges import store_result
from pion.server.commands.core.zsets import zadd_apply
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage import geohash
from pion.storage.geohash import Shape
from pion.storage.zset_value import ScoreRange, ZSetValue

_UNITS = {b"m": 1.0, b"km": 1000.0, b"ft": 0.3048, b"mi": 1609.34}
COORDS, MEMBER, NOSTORE, SEARCH, SEARCHSTORE = 1, 2, 4, 8, 16


def human_double(value: float) -> HumanDouble:
    """Redis's LD_STR_HUMAN: 17 decimals, trailing zeros (and a bare dot) dropped."""
    text = "%.17f" % value
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return HumanDouble(b"0" if text == "-0" else text.encode())


def _lonlat(raw_lon: bytes, raw_lat: bytes) -> tuple[float, float]:
    lon, lat = parse_double(raw_lon), parse_double(raw_lat)
    if not (geohash.LONG_MIN <= lon <= geohash.LONG_MAX and geohash.LAT_MIN <= lat <= geohash.LAT_MAX):
        raise ReplyError("ERR invalid longitude,latitude pair %f,%f" % (lon, lat))
    return lon, lat


def _unit(raw: bytes) -> float:
    conversion = _UNITS.get(raw.lower())
    if conversion is None:
        raise ReplyError("ERR unsupported unit provided. please use M, KM, FT, MI")
    return conversion


def _position(zset: ZSetValue | None, member: bytes) -> tuple[float, float] | None:
    score = None if zset is None else zset.scores.get(member)
    return None if score is None else geohash.decode_score(score)


@command("GEOADD", -5, "write denyoom", keys=(1, 1, 1), categories="@write @geo @slow", group="geo", since="3.2.0")
def geoadd(ctx: Ctx, argv: list[bytes]):
    """GEOADD key [NX | XX] [CH] longitude latitude member [longitude latitude member ...]"""
    flags: set[bytes] = set()
    pos = 2
    while pos < len(argv) and argv[pos].lower() in (b"nx", b"xx", b"ch"):
        flags.add(argv[pos].lower())
        pos += 1
    if (len(argv) - pos) % 3 or {b"nx", b"xx"} <= flags or pos == len(argv):
        raise ReplyError(errors.SYNTAX)
    pairs = []
    for at in range(pos, len(argv), 3):
        lon, lat = _lonlat(argv[at], argv[at + 1])
        pairs.append((float(geohash.score_of(lon, lat)), argv[at + 2]))
    return zadd_apply(ctx, argv[1], flags, pairs)


@command("GEODIST", -4, "readonly", keys=(1, 1, 1), categories="@read @geo @slow", group="geo", since="3.2.0")
def geodist(ctx: Ctx, argv: list[bytes]):
    """GEODIST key member1 member2 [M | KM | FT | MI]"""
    if len(argv) > 5:
        raise ReplyError(errors.SYNTAX)
    to_meters = _unit(argv[4]) if len(argv) == 5 else 1.0
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    first, second = _position(zset, argv[2]), _position(zset, argv[3])
    if first is None or second is None:
        return None
    return b"%.4f" % (geohash.distance(*first, *second) / to_meters)


@command("GEOHASH", -2, "readonly", keys=(1, 1, 1), categories="@read @geo @slow", group="geo", since="3.2.0")
def geohash_(ctx: Ctx, argv: list[bytes]):
    """GEOHASH key [member [member ...]]"""
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    scores = {} if zset is None else zset.scores
    out = []
    for member in argv[2:]:
        score = scores.get(member)
        out.append(None if score is None else geohash.geohash_string(score))
    return out


@command("GEOPOS", -2, "readonly", keys=(1, 1, 1), categories="@read @geo @slow", group="geo", since="3.2.0")
def geopos(ctx: Ctx, argv: list[bytes]):
    """GEOPOS key [member [member ...]]"""
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    out: list = []
    for member in argv[2:]:
        position = _position(zset, member)
        out.append(NULL_ARRAY if position is None else [human_double(position[0]), human_double(position[1])])
    return out


@dataclass(slots=True)
class _Search:
    """What georadiusGeneric gathers from the arguments."""

    shape: Shape
    store: bytes | None = None
    store_dist: bool = False
    withdist: bool = False
    withhash: bool = False
    withcoord: bool = False
    from_member: bool = False
    from_lonlat: bool = False
    by_radius: bool = False
    by_box: bool = False
    any: bool = False
    count: int = 0
    sort: int = 0  # 0 none, 1 asc, -1 desc


def _set_radius(query: _Search, raw_radius: bytes, raw_unit: bytes) -> None:
    radius = parse_double(raw_radius, "ERR need numeric radius")
    if radius < 0:
        raise ReplyError("ERR radius cannot be negative")
    query.shape.radius, query.shape.conversion, query.shape.is_box = radius, _unit(raw_unit), False


def _set_box(query: _Search, raw_width: bytes, raw_height: bytes, raw_unit: bytes) -> None:
    width = parse_double(raw_width, "ERR need numeric width")
    height = parse_double(raw_height, "ERR need numeric height")
    if width < 0 or height < 0:
        raise ReplyError("ERR height or width cannot be negative")
    shape = query.shape
    shape.width, shape.height, shape.conversion, shape.is_box = width, height, _unit(raw_unit), True


def _set_center(query: _Search, zset: ZSetValue | None, member: bytes | None, lonlat=None) -> None:
    if lonlat is not None:
        query.shape.lon, query.shape.lat = _lonlat(*lonlat)
        return
    if zset is None:
        return  # no source key: parse on, the reply is empty anyway
    position = _position(zset, member)  # type: ignore[arg-type]
    if position is None:
        raise ReplyError("ERR could not decode requested zset member")
    query.shape.lon, query.shape.lat = position


def _head(argv: list[bytes], flags: int, zset: ZSetValue | None) -> tuple[_Search, int]:
    query = _Search(Shape(0.0, 0.0, 1.0))
    if flags & COORDS:
        _set_center(query, zset, None, (argv[2], argv[3]))
        _set_radius(query, argv[4], argv[5])
        return query, 6
    if flags & MEMBER:
        if zset is not None:
            _set_center(query, zset, argv[2])
            _set_radius(query, argv[3], argv[4])
        return query, 5
    if flags & SEARCHSTORE:
        query.store = argv[1]
        return query, 3
    return query, 2


def _parse(argv: list[bytes], flags: int, zset: ZSetValue | None) -> _Search:  # noqa: C901 - Redis's one loop
    query, i = _head(argv, flags, zset)
    search, may_store = bool(flags & SEARCH), not flags & (NOSTORE | SEARCH)
    while i < len(argv):
        arg, left = argv[i].lower(), len(argv) - i - 1
        if arg in (b"withdist", b"withhash", b"withcoord"):
            setattr(query, arg.decode(), True)
        elif arg == b"any":
            query.any = True
        elif arg in (b"asc", b"desc"):
            query.sort = 1 if arg == b"asc" else -1
        elif arg == b"count" and left >= 1:
            query.count = parse_int(argv[i + 1])
            if query.count <= 0:
                raise ReplyError("ERR COUNT must be > 0")
            i += 1
        elif arg in (b"store", b"storedist") and left >= 1 and may_store:
            query.store, query.store_dist = argv[i + 1], arg == b"storedist"
            i += 1
        elif arg == b"storedist" and flags & SEARCHSTORE:
            query.store_dist = True
        elif arg == b"frommember" and left >= 1 and search and not query.from_lonlat:
            _set_center(query, zset, argv[i + 1])
            query.from_member, i = True, i + 1
        elif arg == b"fromlonlat" and left >= 2 and search and not query.from_member:
            _set_center(query, zset, None, (argv[i + 1], argv[i + 2]))
            query.from_lonlat, i = True, i + 2
        elif arg == b"byradius" and left >= 2 and search and not query.by_box:
            _set_radius(query, argv[i + 1], argv[i + 2])
            query.by_radius, i = True, i + 2
        elif arg == b"bybox" and left >= 3 and search and not query.by_radius:
            _set_box(query, argv[i + 1], argv[i + 2], argv[i + 3])
            query.by_box, i = True, i + 3
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1
    _check(argv, flags, query)
    return query


def _check(argv: list[bytes], flags: int, query: _Search) -> None:
    name = argv[0].decode("latin-1")
    if query.store is not None and (query.withdist or query.withhash or query.withcoord):
        what = "GEOSEARCHSTORE" if flags & SEARCHSTORE else "STORE option in GEORADIUS"
        raise ReplyError(f"ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    if flags & SEARCH and not (query.from_member or query.from_lonlat):
        raise ReplyError(f"ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}")
    if flags & SEARCH and not (query.by_radius or query.by_box):
        raise ReplyError(f"ERR exactly one of BYRADIUS and BYBOX can be specified for {name}")
    if query.any and not query.count:
        raise ReplyError("ERR the ANY argument requires COUNT argument")


def _collect(zset: ZSetValue, shape: Shape, limit: int) -> list[tuple[bytes, float, float, float, float]]:
    """(member, distance m, score, lon, lat) of the points inside ``shape``, in Redis's order."""
    found = []
    for bits, step in geohash.search_cells(shape):
        if limit and len(found) >= limit:
            break
        low, high = geohash.cell_score_range(bits, step)
        start, stop = zset.score_span(ScoreRange(float(low), False, float(high), True))
        for score, member in zset.span(start, stop):
            lon, lat = geohash.decode_score(score)
            dist = shape.contains(lon, lat)
            if dist is not None:
                found.append((member, dist, score, lon, lat))
            if limit and len(found) >= limit:
                break
    return found


def _reply_item(query: _Search, item: tuple[bytes, float, float, float, float]):
    member, dist, score, lon, lat = item
    if not (query.withdist or query.withhash or query.withcoord):
        return member
    out: list = [member]
    if query.withdist:
        out.append(b"%.4f" % (dist / query.shape.conversion))
    if query.withhash:
        out.append(int(score))
    if query.withcoord:
        out.append([human_double(lon), human_double(lat)])
    return out


def _search(ctx: Ctx, argv: list[bytes], src_at: int, flags: int):
    zset = ctx.db.get_typed(argv[src_at], ZSetValue)
    query = _parse(argv, flags, zset)
    if zset is None:
        return [] if query.store is None else store_result(ctx, query.store, [], "")
    if query.count and not query.sort and not query.any:
        query.sort = 1
    found = _collect(zset, query.shape, query.count if query.any else 0)
    if query.sort:
        found.sort(key=lambda item: item[1], reverse=query.sort < 0)
    if query.count:
        found = found[: query.count]
    if query.store is None:
        return [_reply_item(query, item) for item in found]
    conversion = query.shape.conversion
    pairs = [(item[0], item[1] / conversion if query.store_dist else item[2]) for item in found]
    return store_result(ctx, query.store, pairs, "geosearchstore" if flags & SEARCH else "georadiusstore")


def _store_keys(argv: list[bytes]) -> list[int]:
    """GEORADIUS[BYMEMBER] keys: the source, plus the STORE/STOREDIST destination if any."""
    keys = [1]
    for i in range(2, len(argv) - 1):
        if argv[i].lower() in (b"store", b"storedist"):
            keys.append(i + 1)
    return keys


_RW = dict(keys=(1, 1, 1), categories="@write @geo @slow", group="geo", key_finder=_store_keys)
_RO = dict(keys=(1, 1, 1), categories="@read @geo @slow", group="geo")


@command("GEORADIUS", -6, "write denyoom", since="3.2.0", **_RW)
def georadius(ctx: Ctx, argv: list[bytes]):
    """GEORADIUS key longitude latitude radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC] [STORE key|STOREDIST key]"""  # noqa: E501
    return _search(ctx, argv, 1, COORDS)


@command("GEORADIUSBYMEMBER", -5, "write denyoom", since="3.2.0", **_RW)
def georadiusbymember(ctx: Ctx, argv: list[bytes]):
    """GEORADIUSBYMEMBER key member radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC] [STORE key|STOREDIST key]"""  # noqa: E501
    return _search(ctx, argv, 1, MEMBER)


@command("GEORADIUS_RO", -6, "readonly", since="3.2.10", **_RO)
def georadius_ro(ctx: Ctx, argv: list[bytes]):
    """GEORADIUS_RO key longitude latitude radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC]"""  # noqa: E501
    return _search(ctx, argv, 1, COORDS | NOSTORE)


@command("GEORADIUSBYMEMBER_RO", -5, "readonly", since="3.2.10", **_RO)
def georadiusbymember_ro(ctx: Ctx, argv: list[bytes]):
    """GEORADIUSBYMEMBER_RO key member radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC]"""  # noqa: E501
    return _search(ctx, argv, 1, MEMBER | NOSTORE)


@command("GEOSEARCH", -7, "readonly", since="6.2.0", **_RO)
def geosearch(ctx: Ctx, argv: list[bytes]):
    """GEOSEARCH key FROMMEMBER member|FROMLONLAT longitude latitude BYRADIUS radius M|KM|FT|MI|BYBOX width height M|KM|FT|MI [ASC|DESC] [COUNT count [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]"""  # noqa: E501
    return _search(ctx, argv, 1, SEARCH)


@command("GEOSEARCHSTORE", -8, "write denyoom", keys=(1, 2, 1), categories="@write @geo @slow", group="geo",
         since="6.2.0")
def geosearchstore(ctx: Ctx, argv: list[bytes]):
    """GEOSEARCHSTORE destination source FROMMEMBER member|FROMLONLAT longitude latitude BYRADIUS radius M|KM|FT|MI|BYBOX width height M|KM|FT|MI [ASC|DESC] [COUNT count [ANY]] [STOREDIST]"""  # noqa: E501
    return _search(ctx, argv, 2, SEARCH | SEARCHSTORE)
