"""Geo commands: replies and error texts through redis-py in RESP2 and RESP3, and scores,
positions, distances and search results compared byte for byte with the reference Redis."""

from __future__ import annotations

import random

import pytest
import redis

from pion.storage import geohash
from tests.compat.test_lists import WRONGTYPE, err, raw_reply

SICILY = ["13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"]


def test_geoadd_geopos_geodist_geohash(rr):
    assert rr.geoadd("g", SICILY) == 2
    assert rr.geoadd("g", ["13.361389", "38.115556", "Palermo"], ch=True) == 0
    assert rr.geoadd("g", ["0", "0", "Palermo"], nx=True) == 0
    assert rr.geoadd("g", ["1", "1", "new"], xx=True) == 0 and rr.zscore("g", "new") is None
    assert rr.zscore("g", "Palermo") == 3479099956230698.0
    lon, lat = rr.geopos("g", "Palermo", "nope")[0]
    assert (lon, lat) == pytest.approx((13.36138933897018433, 38.11555639549629859))
    assert rr.geopos("g", "nope") == [None] and rr.geopos("missing", "a") == [None]
    assert rr.geodist("g", "Palermo", "Catania") == 166274.1516
    assert rr.geodist("g", "Palermo", "Catania", "km") == 166.2742
    assert rr.geodist("g", "Palermo", "nope") is None and rr.geodist("missing", "a", "b") is None
    hashes = [h.decode() if isinstance(h, bytes) else h for h in rr.geohash("g", "Palermo", "Catania", "nope")]
    assert hashes == ["sqc8b49rny0", "sqdtr74hyu0", None]


def test_coordinate_shapes_on_the_wire(server, raw):
    redis.Redis(port=server.port).geoadd("g", SICILY)
    assert raw_reply(raw, 2, "GEOPOS", "g", "Palermo", "nope") == (
        b"*2\r\n*2\r\n$20\r\n13.36138933897018433\r\n$20\r\n38.11555639549629859\r\n*-1\r\n")
    assert raw_reply(raw, 3, "GEOPOS", "g", "Palermo", "nope") == (
        b"*2\r\n*2\r\n,13.36138933897018433\r\n,38.11555639549629859\r\n_\r\n")
    assert raw_reply(raw, 3, "GEODIST", "g", "Palermo", "Catania", "mi") == b"$8\r\n103.3182\r\n"


def test_geosearch_options(rr):
    rr.geoadd("g", SICILY)
    assert rr.geosearch("g", longitude=15, latitude=37, radius=200, unit="km", sort="ASC") == [
        b"Catania", b"Palermo"]
    assert rr.geosearch("g", longitude=15, latitude=37, radius=100, unit="km") == [b"Catania"]
    full = rr.geosearch("g", member="Palermo", width=400, height=400, unit="km", withdist=True,
                        withhash=True, withcoord=True, sort="DESC")
    assert [item[0] for item in full] == [b"Catania", b"Palermo"]
    assert full[0][1] == 166.2742 and full[0][2] == 3479447370796909
    assert full[1][3] == pytest.approx((13.361389, 38.115556), abs=1e-5)
    assert rr.geosearch("g", longitude=15, latitude=37, radius=500, unit="km", count=1) == [b"Catania"]
    assert len(rr.geosearch("g", longitude=15, latitude=37, radius=500, unit="km", count=1, any=True)) == 1
    assert rr.geosearch("missing", member="x", radius=1, unit="m") == []


def test_store_forms(rr):
    rr.geoadd("g", SICILY)
    assert rr.geosearchstore("d", "g", longitude=15, latitude=37, radius=200, unit="km") == 2
    assert rr.zscore("d", "Palermo") == rr.zscore("g", "Palermo")
    assert rr.geosearchstore("d", "g", longitude=15, latitude=37, radius=200, unit="km", storedist=True) == 2
    assert rr.zscore("d", "Catania") == pytest.approx(56.4413, abs=1e-4)
    assert rr.georadius("g", 15, 37, 200, unit="km", store="d2") == 2
    assert rr.georadiusbymember("g", "Palermo", 1, unit="km", store_dist="d3") == 1
    assert rr.zscore("d3", "Palermo") == 0.0
    assert rr.geosearchstore("d", "g", longitude=0, latitude=0, radius=1, unit="m") == 0
    assert rr.exists("d") == 0


def test_geo_errors(r):
    r.geoadd("g", SICILY)
    assert err(r, "GEOADD", "g", "200", "100", "x") == "invalid longitude,latitude pair 200.000000,100.000000"
    assert err(r, "GEOADD", "g", "x", "1", "a") == "value is not a valid float"
    assert err(r, "GEOADD", "g", "XX", "NX", "1", "2", "a") == "syntax error"
    assert err(r, "GEOADD", "g", "GT", "1", "2", "a") == "syntax error"
    assert err(r, "GEODIST", "g", "a", "b", "parsecs") == "unsupported unit provided. please use M, KM, FT, MI"
    assert err(r, "GEODIST", "g", "a", "b", "km", "x") == "syntax error"
    base = ["GEOSEARCH", "g", "FROMLONLAT", "1", "2"]
    assert err(r, *base, "BYRADIUS", "-1", "km") == "radius cannot be negative"
    assert err(r, *base, "BYRADIUS", "x", "km") == "need numeric radius"
    assert err(r, *base, "BYBOX", "1", "x", "km") == "need numeric height"
    assert err(r, *base, "BYBOX", "-1", "1", "km") == "height or width cannot be negative"
    assert err(r, *base, "BYRADIUS", "1", "km", "COUNT", "0") == "COUNT must be > 0"
    assert err(r, *base, "BYRADIUS", "1", "km", "ANY") == "the ANY argument requires COUNT argument"
    assert err(r, *base, "BYRADIUS", "1", "km", "STORE", "x") == "syntax error"
    assert err(r, *base, "COUNT", "3") == "exactly one of BYRADIUS and BYBOX can be specified for GEOSEARCH"
    assert err(r, "geosearch", "g", "BYRADIUS", "1", "m", "COUNT", "3") == (
        "exactly one of FROMMEMBER or FROMLONLAT can be specified for geosearch")
    assert err(r, "GEOSEARCH", "g", "FROMMEMBER", "nope", "BYRADIUS", "1", "m") == (
        "could not decode requested zset member")
    assert err(r, "GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "1", "2", "BYRADIUS", "1", "km", "WITHDIST") == (
        "GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    assert err(r, "GEORADIUS", "g", "1", "2", "1", "km", "STORE", "d", "WITHCOORD") == (
        "STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    assert err(r, "GEORADIUS_RO", "g", "1", "2", "1", "km", "STORE", "d") == "syntax error"
    r.set("str", "v")
    for argv in (("GEOADD", "str", "1", "2", "a"), ("GEOPOS", "str", "a"), ("GEODIST", "str", "a", "b"),
                 ("GEOHASH", "str", "a"), ("GEOSEARCH", "str", "FROMLONLAT", "1", "2", "BYRADIUS", "1", "m")):
        assert err(r, *argv) == WRONGTYPE


def test_geohash_matches_redis_known_cells():
    assert geohash.score_of(13.361389, 38.115556) == 3479099956230698
    assert geohash.geohash_string(3479099956230698) == b"sqc8b49rny0"
    assert geohash.distance(0.0, 0.0, 0.0, 1.0) == pytest.approx(111226.30, abs=0.01)


# -- against the reference ------------------------------------------------------------------------


@pytest.fixture
def both(server, redis_ref):
    mine = redis.Redis(port=server.port, socket_timeout=10)
    ref = redis.Redis(port=redis_ref.port, socket_timeout=10)
    ref.flushall()
    yield mine, ref
    ref.flushall()
    mine.close()
    ref.close()


def _random_points(rng: random.Random, count: int, spread: tuple[float, float, float, float]) -> list[str]:
    lon0, lat0, dlon, dlat = spread
    args = []
    for i in range(count):
        lon = min(180.0, max(-180.0, lon0 + rng.uniform(-dlon, dlon)))
        lat = min(85.05112878, max(-85.05112878, lat0 + rng.uniform(-dlat, dlat)))
        args += ["%.6f" % lon, "%.6f" % lat, "p%d" % i]
    return args


def test_scores_positions_and_hashes_equal_the_reference(both):
    mine, ref = both
    rng = random.Random(7)
    args = _random_points(rng, 300, (0, 0, 180, 85.05112878))
    args += ["180", "85.05112878", "ne", "-180", "-85.05112878", "sw", "0", "0", "origin"]
    assert mine.geoadd("g", args) == ref.geoadd("g", args)
    assert mine.execute_command("ZRANGE", "g", 0, -1, "WITHSCORES") == ref.execute_command(
        "ZRANGE", "g", 0, -1, "WITHSCORES")
    members = ["p%d" % i for i in range(0, 300, 7)] + ["ne", "sw", "origin", "nope"]
    for command in ("GEOPOS", "GEOHASH"):
        assert mine.execute_command(command, "g", *members) == ref.execute_command(command, "g", *members)
    for unit in ("m", "km", "ft", "mi"):
        for a, b in zip(members, reversed(members), strict=True):
            assert mine.geodist("g", a, b, unit) == ref.geodist("g", a, b, unit)


@pytest.mark.parametrize("seed", range(4))
def test_searches_equal_the_reference(both, seed):
    mine, ref = both
    rng = random.Random(seed)
    centre = (rng.uniform(-170, 170), rng.uniform(-80, 80))
    args = _random_points(rng, 250, (centre[0], centre[1], 8, 6))
    mine.geoadd("g", args)
    ref.geoadd("g", args)
    for _ in range(25):
        lon = "%.5f" % (centre[0] + rng.uniform(-5, 5))
        lat = "%.5f" % max(-85, min(85, centre[1] + rng.uniform(-5, 5)))
        unit = rng.choice(["m", "km", "mi", "ft"])
        size = {"m": 400000, "km": 400, "mi": 250, "ft": 1300000}[unit] * rng.uniform(0.05, 1)
        shape = (["BYRADIUS", "%.3f" % size, unit] if rng.random() < 0.5
                 else ["BYBOX", "%.3f" % size, "%.3f" % (size * rng.uniform(0.3, 2)), unit])
        start = ["FROMLONLAT", lon, lat] if rng.random() < 0.7 else ["FROMMEMBER", "p%d" % rng.randrange(250)]
        options = [opt for opt in ("WITHDIST", "WITHHASH", "WITHCOORD") if rng.random() < 0.4]
        options += rng.choice([[], ["ASC"], ["DESC"], ["COUNT", "5"], ["COUNT", "3", "DESC"]])
        argv = ["GEOSEARCH", "g", *start, *shape, *options]
        assert mine.execute_command(*argv) == ref.execute_command(*argv), argv
        radius = ["GEORADIUS", "g", lon, lat, "%.3f" % size, unit, "WITHDIST", "ASC"]
        assert mine.execute_command(*radius) == ref.execute_command(*radius), radius
