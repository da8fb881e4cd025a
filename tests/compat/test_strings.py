"""String commands through redis-py in RESP2 and RESP3: replies, error classes and texts, and
what each write logs (its deterministic effect) and notifies."""

from __future__ import annotations

import time

import pytest
import redis

from tests.compat.string_support import (  # noqa: F401 (fixtures)
    argvs,
    effects_fixture,
    error_of,
    events_fixture,
    wrongtype_fixture,
)

# -- GET / SET -------------------------------------------------------------------------------


def test_get_missing_and_wrongtype(rr, wrongtype):
    assert rr.get("nope") is None
    wrongtype(b"wt")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE Operation against a key holding the wrong kind of value$"):
        rr.get("wt")


def test_set_nx_xx(rr):
    assert rr.set("k", "1", xx=True) is None
    assert rr.set("k", "1", nx=True) is True
    assert rr.set("k", "2", nx=True) is None
    assert rr.set("k", "3", xx=True) is True
    assert rr.get("k") == b"3"


def test_set_get_returns_old_value_and_checks_type(rr, wrongtype):
    assert rr.set("k", "a", get=True) is None
    assert rr.set("k", "b", get=True) == b"a"
    wrongtype(b"wt")
    assert error_of(rr.set, "wt", "x", get=True).startswith("WRONGTYPE")
    assert rr.execute_command("SET", "k", "c", "GET", "GET", get=True) == b"b"


def test_set_nx_get_is_allowed_in_7(rr):
    assert rr.execute_command("SET", "k", "v1", "NX", "GET", get=True) is None
    assert rr.execute_command("SET", "k", "v2", "NX", "GET", get=True) == b"v1"
    assert rr.get("k") == b"v1"
    assert rr.execute_command("SET", "other", "v", "XX", "GET", get=True) is None
    assert rr.get("other") is None


@pytest.mark.parametrize("args", [
    ["NX", "XX"], ["XX", "NX"], ["EX", "10", "PX", "100"], ["KEEPTTL", "EX", "10"], ["EX", "10", "KEEPTTL"],
    ["EX"], ["PERSIST"], ["BOGUS"], ["EXAT", "1", "PXAT", "1"],
])
def test_set_option_conflicts_are_syntax_errors(rr, args):
    assert error_of(rr.execute_command, "SET", "k", "v", *args) == "syntax error"


def test_set_repeated_ttl_option_last_wins(server, rr):
    assert rr.execute_command("SET", "k", "v", "EX", "1", "EX", "1000")
    remaining = _expire_of(server, b"k") - int(time.time() * 1000)
    assert 990_000 <= remaining <= 1_000_000


@pytest.mark.parametrize("option,value", [("EX", "0"), ("PX", "-1"), ("EXAT", "0"), ("PXAT", "-5"),
                                          ("EX", "9223372036854775807"), ("PX", "9223372036854775807")])
def test_set_invalid_expire_time(rr, option, value):
    assert error_of(rr.execute_command, "SET", "k", "v", option, value) == "invalid expire time in 'set' command"


def test_set_expire_not_integer(rr):
    assert error_of(rr.execute_command, "SET", "k", "v", "EX", "1.5") == "value is not an integer or out of range"


def test_set_ex_expires(rr):
    assert rr.set("k", "v", px=50) is True
    assert rr.get("k") == b"v"
    time.sleep(0.12)
    assert rr.get("k") is None


def test_set_keepttl_keeps_and_plain_set_clears(server, rr):
    rr.set("k", "v", ex=100)
    rr.set("k", "w", keepttl=True)
    assert _expire_of(server, b"k") is not None
    rr.set("k", "x")
    assert _expire_of(server, b"k") is None


def test_set_pxat_in_the_past_deletes_the_key(rr, effects):
    rr.set("k", "old")
    assert rr.execute_command("SET", "k", "v", "PXAT", "1") in (b"OK", "OK", True)
    assert rr.get("k") is None
    assert argvs(effects)[-1] == [b"DEL", b"k"]
    effects.clear()
    assert rr.execute_command("SET", "gone", "v", "EXAT", "1") in (b"OK", "OK", True)
    assert rr.get("gone") is None
    assert effects == []  # nothing existed, nothing changed


def test_set_with_relative_ttl_logs_absolute_pxat(rr, effects):
    before = int(time.time() * 1000)
    rr.set("k", "v", ex=10)
    rr.execute_command("SETEX", "s", "10", "v")
    rr.execute_command("PSETEX", "p", "10000", "v")
    logged = argvs(effects)
    for key, argv in zip([b"k", b"s", b"p"], logged, strict=True):
        assert argv[:4] == [b"SET", key, b"v", b"PXAT"]
        assert before + 10_000 <= int(argv[4]) <= int(time.time() * 1000) + 10_000


def test_set_get_is_logged_without_get(rr, effects):
    rr.execute_command("SET", "k", "v", "GET", "KEEPTTL", "get")
    assert argvs(effects) == [[b"SET", b"k", b"v", b"KEEPTTL"]]


def test_set_nx_that_does_nothing_logs_nothing(rr, effects):
    rr.set("k", "v")
    effects.clear()
    assert rr.set("k", "w", nx=True, ex=10) is None
    assert effects == []


def test_set_notifies_set_and_expire(events):
    srv, seen = events
    client = redis.Redis(port=srv.port)
    client.set("k", "v", ex=10)
    assert seen == [("$", "set", b"k"), ("g", "expire", b"k")]


def test_setnx(rr):
    assert rr.setnx("k", "a") is True
    assert rr.setnx("k", "b") is False
    assert rr.get("k") == b"a"


def test_setex_psetex(rr):
    assert rr.execute_command("SETEX", "k", "100", "v") in (True, b"OK", "OK")
    assert rr.psetex("p", 100000, "v") is True
    assert error_of(rr.execute_command, "SETEX", "k", "0", "v") == "invalid expire time in 'setex' command"
    assert error_of(rr.execute_command, "PSETEX", "k", "-1", "v") == "invalid expire time in 'psetex' command"
    assert error_of(rr.execute_command, "SETEX", "k", "x", "v") == "value is not an integer or out of range"
    assert error_of(rr.execute_command, "SETEX", "k", "1") == "wrong number of arguments for 'setex' command"


# -- GETSET / GETDEL / GETEX -------------------------------------------------------------------


def test_getset(rr, wrongtype, effects):
    assert rr.getset("k", "a") is None
    assert rr.getset("k", "b") == b"a"
    assert argvs(effects)[-1] == [b"SET", b"k", b"b"]
    wrongtype(b"wt")
    assert error_of(rr.getset, "wt", "x").startswith("WRONGTYPE")


def test_getdel(rr, wrongtype, effects):
    rr.set("k", "v")
    effects.clear()
    assert rr.getdel("k") == b"v"
    assert rr.get("k") is None
    assert rr.getdel("k") is None
    assert argvs(effects) == [[b"DEL", b"k"]]
    wrongtype(b"wt")
    assert error_of(rr.getdel, "wt").startswith("WRONGTYPE")


def test_getex_sets_and_removes_ttl(server, rr, effects):
    rr.set("k", "v")
    effects.clear()
    assert rr.getex("k") == b"v"
    assert effects == []
    assert rr.getex("k", ex=100) == b"v"
    when = _expire_of(server, b"k")
    assert argvs(effects) == [[b"PEXPIREAT", b"k", b"%d" % when]]
    assert rr.getex("k", persist=True) == b"v"
    assert _expire_of(server, b"k") is None
    assert argvs(effects)[-1] == [b"PERSIST", b"k"]
    effects.clear()
    assert rr.getex("k", persist=True) == b"v"  # no TTL: nothing changes
    assert effects == []


def test_getex_past_absolute_time_deletes(rr, effects):
    rr.set("k", "v")
    assert rr.getex("k", pxat=1) == b"v"
    assert rr.get("k") is None
    assert argvs(effects)[-1] == [b"DEL", b"k"]


def test_getex_errors(rr, wrongtype):
    rr.set("k", "v")
    assert error_of(rr.execute_command, "GETEX", "k", "EX", "10", "PERSIST") == "syntax error"
    assert error_of(rr.execute_command, "GETEX", "k", "NX") == "syntax error"
    assert error_of(rr.execute_command, "GETEX", "k", "KEEPTTL") == "syntax error"
    assert error_of(rr.execute_command, "GETEX", "k", "EX", "0") == "invalid expire time in 'getex' command"
    assert rr.execute_command("GETEX", "missing", "EX", "0") is None  # lookup comes first
    wrongtype(b"wt")
    assert error_of(rr.execute_command, "GETEX", "wt", "EX", "0").startswith("WRONGTYPE")


# -- MGET / MSET / MSETNX ----------------------------------------------------------------------


def test_mget_gives_nil_for_other_types(rr, wrongtype):
    rr.set("a", "1")
    wrongtype(b"wt")
    assert rr.mget("a", "wt", "missing") == [b"1", None, None]


def test_mset_and_msetnx(rr):
    assert rr.mset({"a": "1", "b": "2"}) is True
    assert rr.msetnx({"b": "x", "c": "3"}) is False
    assert rr.get("c") is None
    assert rr.msetnx({"c": "3", "d": "4"}) is True
    assert rr.mget("a", "b", "c", "d") == [b"1", b"2", b"3", b"4"]
    assert error_of(rr.execute_command, "MSET", "a", "1", "b") == "wrong number of arguments for 'mset' command"
    assert error_of(rr.execute_command, "MSETNX", "a") == "wrong number of arguments for 'msetnx' command"


def test_mset_clears_ttl(server, rr):
    rr.set("a", "1", ex=100)
    rr.mset({"a": "2"})
    assert _expire_of(server, b"a") is None


# -- APPEND / STRLEN ---------------------------------------------------------------------------


def test_append_and_strlen(server, rr, wrongtype, effects):
    assert rr.append("k", "hello") == 5
    assert rr.append("k", " world") == 11
    assert rr.get("k") == b"hello world"
    assert rr.strlen("k") == 11
    assert rr.strlen("missing") == 0
    server.call(server.server.dbs[0].set_expire, b"k", 2**50)
    rr.append("k", "!")
    assert _expire_of(server, b"k") is not None
    effects.clear()
    assert rr.append("k", "") == 12
    assert effects == []
    wrongtype(b"wt")
    assert error_of(rr.append, "wt", "x").startswith("WRONGTYPE")
    assert error_of(rr.strlen, "wt").startswith("WRONGTYPE")


def test_append_size_limit(make_server):
    srv = make_server(proto_max_bulk_len=1024 * 1024)
    client = redis.Redis(port=srv.port)
    client.set("k", b"x" * (1024 * 1024))
    assert error_of(client.append, "k", "y") == "string exceeds maximum allowed size (proto-max-bulk-len)"


# -- counters ----------------------------------------------------------------------------------


def test_incr_decr_family(rr, wrongtype):
    assert rr.incr("n") == 1
    assert rr.incrby("n", 10) == 11
    assert rr.decr("n") == 10
    assert rr.decrby("n", 20) == -10
    rr.set("s", "abc")
    assert error_of(rr.incr, "s") == "value is not an integer or out of range"
    rr.set("s", " 1")
    assert error_of(rr.incr, "s") == "value is not an integer or out of range"
    assert error_of(rr.incrby, "n", "1.5") == "value is not an integer or out of range"
    rr.set("big", "9223372036854775807")
    assert error_of(rr.incr, "big") == "increment or decrement would overflow"
    rr.set("small", "-9223372036854775808")
    assert error_of(rr.decr, "small") == "increment or decrement would overflow"
    assert error_of(rr.decrby, "n", "-9223372036854775808") == "decrement would overflow"
    wrongtype(b"wt")
    assert error_of(rr.incr, "wt").startswith("WRONGTYPE")


def test_incr_keeps_ttl(server, rr):
    rr.set("n", "1", ex=100)
    rr.incr("n")
    assert _expire_of(server, b"n") is not None


@pytest.mark.parametrize("start,incr,expected", [
    (None, "0.1", b"0.1"), ("0.1", "0.2", b"0.3"), ("10.50", "0.1", b"10.6"), ("5", "-5", b"0"),
    ("1", "1e3", b"1001"), ("3", "-3.5", b"-0.5"), ("5.0e3", "2.0e2", b"5200"), ("0", "0x10", b"16"),
])
def test_incrbyfloat_formats_like_redis(rr, start, incr, expected):
    if start is not None:
        rr.set("f", start)
    assert rr.incrbyfloat("f", incr) == float(expected)  # redis-py answers a float
    assert rr.get("f") == expected


def test_incrbyfloat_errors_and_log(rr, wrongtype, effects):
    rr.set("f", "1.5", ex=100)
    effects.clear()
    assert rr.incrbyfloat("f", 1) == 2.5
    assert argvs(effects) == [[b"SET", b"f", b"2.5", b"KEEPTTL"]]
    assert error_of(rr.incrbyfloat, "f", "abc") == "value is not a valid float"
    assert error_of(rr.execute_command, "INCRBYFLOAT", "f", "nan") == "value is not a valid float"
    assert error_of(rr.execute_command, "INCRBYFLOAT", "f", " 1") == "value is not a valid float"
    assert error_of(rr.execute_command, "INCRBYFLOAT", "f", "1e5000") == "value is not a valid float"
    assert error_of(rr.execute_command, "INCRBYFLOAT", "f", "inf") == "increment would produce NaN or Infinity"
    rr.set("s", "x")
    assert error_of(rr.incrbyfloat, "s", 1) == "value is not a valid float"
    wrongtype(b"wt")
    assert error_of(rr.incrbyfloat, "wt", 1).startswith("WRONGTYPE")


# -- ranges ------------------------------------------------------------------------------------


def test_getrange_and_substr(rr, wrongtype):
    rr.set("k", "This is a string")
    assert rr.getrange("k", 0, 3) == b"This"
    assert rr.getrange("k", -3, -1) == b"ing"
    assert rr.getrange("k", 0, -1) == b"This is a string"
    assert rr.getrange("k", 10, 100) == b"string"
    assert rr.getrange("k", -1, -5) == b""
    assert rr.getrange("missing", 0, -1) == b""
    assert rr.execute_command("SUBSTR", "k", 0, 3) == b"This"
    assert error_of(rr.getrange, "k", "a", 1) == "value is not an integer or out of range"
    wrongtype(b"wt")
    assert error_of(rr.getrange, "wt", 0, 1).startswith("WRONGTYPE")


def test_setrange(rr, wrongtype, effects):
    rr.set("k", "Hello World")
    assert rr.setrange("k", 6, "Redis") == 11
    assert rr.get("k") == b"Hello Redis"
    assert rr.setrange("pad", 5, "x") == 6
    assert rr.get("pad") == b"\x00\x00\x00\x00\x00x"
    assert rr.setrange("missing", 3, "") == 0
    assert rr.get("missing") is None
    effects.clear()
    assert rr.setrange("k", 0, "") == 11
    assert rr.setrange("k", 0, "Hello") == 11  # same bytes: nothing changes
    assert effects == []
    assert error_of(rr.setrange, "k", -1, "x") == "offset is out of range"
    assert error_of(rr.setrange, "k", 536870911, "xy") == \
        "string exceeds maximum allowed size (proto-max-bulk-len)"
    wrongtype(b"wt")
    assert error_of(rr.setrange, "wt", 0, "x").startswith("WRONGTYPE")


def test_lcs_string_len_and_idx(rr, wrongtype):
    rr.mset({"a": "ohmytext", "b": "mynewtext"})
    assert rr.lcs("a", "b") == b"mytext"
    assert rr.lcs("a", "b", len=True) == 6
    reply = rr.lcs("a", "b", idx=True, minmatchlen=4, withmatchlen=True)
    matches = [[[4, 7], [5, 8], 4]]
    if rr.protocol_version == 3:
        assert reply == {b"matches": matches, b"len": 6}
    else:
        assert reply == [b"matches", matches, b"len", 6]
    plain = rr.lcs("a", "b", idx=True)
    assert (plain[b"matches"] if isinstance(plain, dict) else plain[1]) == [[[4, 7], [5, 8]], [[2, 3], [0, 1]]]
    assert rr.lcs("a", "missing") == b""
    assert error_of(rr.lcs, "a", "b", len=True, idx=True) == \
        "If you want both the length and indexes, please just use IDX."
    assert error_of(rr.execute_command, "LCS", "a", "b", "FOO") == "syntax error"
    wrongtype(b"wt")
    assert error_of(rr.lcs, "a", "wt") == "The specified keys must contain string values"


def test_lcs_long_strings_match_a_plain_dp(rr):
    import random

    rnd = random.Random(7)
    a = bytes(rnd.choice(b"ACGT") for _ in range(300))
    b = bytes(rnd.choice(b"ACGT") for _ in range(250))
    rr.mset({"a": a, "b": b})
    prev = [0] * (len(b) + 1)
    for ch in a:
        cur = [0]
        for j, other in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if ch == other else max(prev[j], cur[j - 1]))
        prev = cur
    assert rr.lcs("a", "b", len=True) == prev[-1]
    assert len(rr.lcs("a", "b")) == prev[-1]


# -- helpers -----------------------------------------------------------------------------------


def _expire_of(server, key: bytes):
    return server.call(server.server.dbs[0].ttl_ms, key)



def test_logged_effects_replay_to_the_same_state(server, make_server, rr, effects):
    """Running the logged effects on a fresh server rebuilds the same values and expiry times."""
    script = [
        ["SET", "a", "1", "EX", "100"], ["INCRBYFLOAT", "a", "0.5"], ["SET", "b", "x", "GET", "PX", "50000"],
        ["GETEX", "b", "EX", "70"], ["SETEX", "c", "30", "v"], ["GETEX", "c", "PERSIST"], ["GETSET", "d", "1"],
        ["INCRBY", "d", "41"], ["APPEND", "d", "!"], ["SETRANGE", "e", "2", "hi"], ["SETBIT", "f", "9", "1"],
        ["BITFIELD", "f", "INCRBY", "u4", "0", "3"], ["BITOP", "NOT", "g", "f"], ["MSETNX", "h", "1", "i", "2"],
        ["GETDEL", "i"], ["SET", "a", "2", "KEEPTTL"], ["PSETEX", "j", "90000", "v"], ["GETEX", "j", "PXAT", "1"],
    ]
    for argv in script:
        rr.execute_command(*argv)
    replica = make_server()
    client = redis.Redis(port=replica.port)
    for _db, argv in effects:
        client.execute_command(*argv)
    keys = [bytes([c]) for c in b"abcdefghij"]

    def state(srv):
        db = srv.server.dbs[0]
        return [(db.get(k), db.ttl_ms(k)) for k in keys]

    assert server.call(state, server) == replica.call(state, replica)
    assert all(b"EX" not in argv and b"GETEX" not in argv for _, argv in effects)
