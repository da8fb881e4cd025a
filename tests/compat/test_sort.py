"""SORT and SORT_RO through redis-py in RESP2 and RESP3 on lists, sets and sorted sets built with
RPUSH/SADD/ZADD: numeric and ALPHA order, BY (keys, hash fields, nosort), GET (#, keys, hash
fields), LIMIT clamping, DESC, STORE, and Redis's error texts. Tests skip while the container
family they need is not written yet."""

from __future__ import annotations

import pytest

from pion.server.commands.core.sort import strtod
from tests.compat.test_keys import err, needs, record_journal


def test_sort_of_missing_key_is_empty(rr):
    assert rr.sort("missing") == []
    assert rr.sort("missing", store="dst") == 0


def test_sort_errors(rr):
    rr.set("s", "v")
    assert err(rr, "SORT", "s") == "WRONGTYPE Operation against a key holding the wrong kind of value"
    assert err(rr, "SORT", "s", "FOO") == "syntax error"  # options are read before the key
    assert err(rr, "SORT", "s", "LIMIT", "x", "1") == "value is not an integer or out of range"
    assert err(rr, "SORT", "s", "LIMIT", "1") == "syntax error"
    assert err(rr, "SORT", "s", "STORE") == "syntax error"
    assert err(rr, "SORT", "s", "GET") == "syntax error"
    assert err(rr, "SORT", "s", "BY") == "syntax error"
    assert err(rr, "SORT_RO", "s", "STORE", "x") == "syntax error"
    assert err(rr, "SORT") == "wrong number of arguments for 'sort' command"


def test_numeric_sort_of_a_list(rr):
    needs(rr, "RPUSH", "l", "3", "1", "2", "10", "-1.5", "1e1")
    assert rr.sort("l") == [b"-1.5", b"1", b"2", b"3", b"10", b"1e1"]  # ties break by bytes
    assert rr.sort("l", desc=True) == [b"1e1", b"10", b"3", b"2", b"1", b"-1.5"]


def test_numbers_are_read_as_strtod_reads_them(rr):
    needs(rr, "RPUSH", "l", " 1", "0x10", "1e2", "-inf", "inf", "  +3.5", "")
    assert rr.sort("l") == [b"-inf", b"", b" 1", b"  +3.5", b"0x10", b"1e2", b"inf"]
    for bad in ("x", "1 ", "1_0", "nan", "1e400", "1e-400", "1e-310", "\t"):
        rr.delete("b")
        rr.rpush("b", "1", bad)
        assert err(rr, "SORT", "b") == "One or more scores can't be converted into double", bad


@pytest.mark.parametrize(("raw", "value"), [
    (b"", 0.0), (b" 1", 1.0), (b"0x10", 16.0), (b"0x1p3", 8.0), (b"-.5e-1", -0.05), (b"5.", 5.0),
    (b"INFINITY", float("inf")), (b"1e308", 1e308), (b"0e999", 0.0),
    (b"x", None), (b"1 ", None), (b"0x", None), (b"nan", None), (b"1e309", None), (b"4e-320", None),
    (b" ", None), (b"1_0", None), (b"infx", None),
])
def test_strtod(raw, value):
    assert strtod(raw) == value


def test_alpha_sort_and_limit(rr):
    needs(rr, "RPUSH", "l", "3", "1", "2", "10", "x")
    assert err(rr, "SORT", "l") == "One or more scores can't be converted into double"
    assert rr.sort("l", alpha=True) == [b"1", b"10", b"2", b"3", b"x"]
    assert rr.sort("l", alpha=True, start=1, num=2) == [b"10", b"2"]
    assert rr.sort("l", alpha=True, start=-5, num=2) == [b"1", b"10"]
    assert rr.execute_command("SORT", "l", "LIMIT", "0", "-3", "ALPHA") == [b"1", b"10", b"2", b"3", b"x"]
    assert rr.sort("l", alpha=True, start=10, num=2) == []
    assert rr.sort("l", alpha=True, desc=True, start=0, num=2) == [b"x", b"3"]


def test_by_nosort_keeps_native_order(rr):
    needs(rr, "RPUSH", "l", "3", "1", "2", "10", "x")
    assert rr.sort("l", by="nosort") == [b"3", b"1", b"2", b"10", b"x"]
    assert rr.sort("l", by="nosort", desc=True, start=1, num=2) == [b"10", b"2"]
    needs(rr, "ZADD", "z", "3", "c", "1", "a", "2", "b")
    assert rr.sort("z", by="nosort") == [b"a", b"b", b"c"]
    assert rr.sort("z", by="nosort", desc=True, start=0, num=2) == [b"c", b"b"]


def test_by_external_keys_and_hash_fields(rr):
    needs(rr, "RPUSH", "l", "a", "b", "c")
    rr.mset({"w_a": 3, "w_b": 1, "w_c": 2, "name_a": "A", "name_c": "C"})
    assert rr.sort("l", by="w_*") == [b"b", b"c", b"a"]
    assert rr.sort("l", by="w_*", get=["#", "name_*"]) == [b"b", None, b"c", b"C", b"a", b"A"]
    needs(rr, "HSET", "h_a", "f", "30")
    rr.hset("h_b", "f", "10")
    rr.hset("h_c", "f", "20")
    assert rr.sort("l", by="h_*->f") == [b"b", b"c", b"a"]
    assert rr.sort("l", by="h_*->f", get="h_*->f") == [b"10", b"20", b"30"]
    assert rr.sort("l", by="h_*->nofield") == [b"a", b"b", b"c"]  # missing weights count as 0


def test_get_patterns_without_star_or_of_wrong_type_are_nil(rr):
    needs(rr, "RPUSH", "l", "1", "2")
    rr.set("fixed", "v")
    assert rr.sort("l", get="fixed") == [None, None]
    assert rr.sort("l", get=["#->f", "l"]) == [None, None, None, None]


def test_alpha_by_missing_weights_sort_first_and_stay_stable(rr):
    needs(rr, "RPUSH", "t", "3", "2", "1", "2", "3")
    rr.set("w3", "x")
    assert rr.sort("t", by="w*", alpha=True) == [b"2", b"1", b"2", b"3", b"3"]
    assert err(rr, "SORT", "t", "BY", "w*") == "One or more scores can't be converted into double"


def test_sort_of_a_set_and_a_zset(rr):
    needs(rr, "SADD", "s", "5", "3", "40")
    assert rr.sort("s") == [b"3", b"5", b"40"]
    assert rr.sort("s", alpha=True) == [b"3", b"40", b"5"]
    needs(rr, "ZADD", "z", "1", "9", "2", "8")
    assert rr.sort("z") == [b"8", b"9"]


def test_store_writes_a_list_and_drops_ttl(rr):
    needs(rr, "RPUSH", "l", "3", "1", "2")
    rr.set("dst", "old", ex=100)
    assert rr.sort("l", store="dst") == 3
    assert rr.lrange("dst", 0, -1) == [b"1", b"2", b"3"]
    assert rr.ttl("dst") == -1
    assert rr.sort("l", get=["#", "nokey_*"], store="dst") == 6
    assert rr.lrange("dst", 0, -1) == [b"1", b"", b"2", b"", b"3", b""]
    assert rr.sort("l", start=5, num=5, store="dst") == 0
    assert rr.exists("dst") == 0


def test_store_of_a_set_without_sorting_is_sorted_alpha(rr):
    needs(rr, "SADD", "s", "b", "c", "a")
    assert rr.sort("s", by="nosort", store="dst") == 3
    assert rr.lrange("dst", 0, -1) == [b"a", b"b", b"c"]


def test_sort_ro(rr):
    needs(rr, "RPUSH", "l", "2", "1")
    assert rr.sort_ro("l") == [b"1", b"2"]
    assert rr.execute_command("SORT_RO", "l", "DESC") == [b"2", b"1"]


def test_sort_store_is_logged_and_key_positions(server, r):
    needs(r, "RPUSH", "l", "2", "1")
    records = record_journal(server)
    r.sort("l", store="dst")
    assert records[0][0][1][:2] == [b"SORT", b"l"]
    from pion.server.commands.core.sort import _sort_keys

    assert _sort_keys([b"SORT", b"l", b"LIMIT", b"0", b"1", b"GET", b"store", b"STORE", b"d"]) == [1, 8]
    assert _sort_keys([b"SORT", b"l", b"BY", b"store"]) == [1]
