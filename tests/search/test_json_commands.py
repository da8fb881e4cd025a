"""JSON.* over the wire in RESP2 and RESP3: reply shapes and error texts as RedisJSON's
(redis-json commands.rs), legacy and JSONPath paths, TYPE/DUMP/RESTORE/keyspace behaviour."""

from __future__ import annotations

import json

import pytest
import redis

DOC = {"a": 1, "b": [1, 2, 3], "c": {"d": "x", "e": [True, None, 2.5]}, "n": {"a": 5}}


@pytest.fixture
def j(rr):
    rr.execute_command("JSON.SET", "k", "$", json.dumps(DOC))
    return rr


def cmd(r, *args):
    return r.execute_command(*args)


def test_set_get_legacy_and_jsonpath(j):
    assert cmd(j, "JSON.GET", "k") == b'{"a":1,"b":[1,2,3],"c":{"d":"x","e":[true,null,2.5]},"n":{"a":5}}'
    assert cmd(j, "JSON.GET", "k", ".c.d") == b'"x"'
    assert cmd(j, "JSON.GET", "k", "$..a") == b"[1,5]"
    assert json.loads(cmd(j, "JSON.GET", "k", "$.b", ".a")) == {"$.b": [[1, 2, 3]], ".a": [1]}
    assert json.loads(cmd(j, "JSON.GET", "k", ".a", ".c.d")) == {".a": 1, ".c.d": "x"}
    assert cmd(j, "JSON.GET", "k", "$.nothing") == b"[]"
    with pytest.raises(redis.ResponseError, match="^Path does not exist$"):
        cmd(j, "JSON.GET", "k", ".nothing")
    assert cmd(j, "JSON.GET", "missing") is None
    assert cmd(j, "JSON.GET", "k", "INDENT", "  ", "NEWLINE", "\n", "SPACE", " ", ".n") == b'{\n  "a": 5\n}'


def test_set_conditions_and_creation(j):
    assert cmd(j, "JSON.SET", "k", "$.a", "2", "NX") is None
    assert cmd(j, "JSON.SET", "k", "$.a", "2", "XX") == b"OK"
    assert cmd(j, "JSON.SET", "k", "$.new", '"v"', "XX") is None
    assert cmd(j, "JSON.SET", "k", "$.new", '"v"') == b"OK"
    assert cmd(j, "JSON.SET", "k", "$.deep.er", "1") is None  # no parent object: nothing set
    assert cmd(j, "JSON.SET", "k", "$..a", "7") == b"OK"  # every match
    assert json.loads(cmd(j, "JSON.GET", "k", "$..a")) == [7, 7]
    with pytest.raises(redis.ResponseError, match="^new objects must be created at the root$"):
        cmd(j, "JSON.SET", "fresh", "$.x", "1")
    with pytest.raises(redis.ResponseError, match="^expected ident at line 1 column 2$"):  # serde_json's, as RedisJSON answers
        cmd(j, "JSON.SET", "k", "$", "nope")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        cmd(j, "JSON.SET", "k", "$", "1", "NX", "XX")
    with pytest.raises(redis.ResponseError, match="^array index out of range$"):
        cmd(j, "JSON.SET", "k", "$.b[9]", "1")
    assert cmd(j, "TYPE", "k") in (b"ReJSON-RL", "ReJSON-RL")


def test_type_differs_by_protocol(j):
    legacy = cmd(j, "JSON.TYPE", "k", ".c")
    path = cmd(j, "JSON.TYPE", "k", "$..a")
    if j.protocol_version == 2:
        assert legacy == b"object" and path == [b"integer", b"integer"]
    else:
        assert legacy == [b"object"] and path == [[b"integer", b"integer"]]


def test_numbers(j):
    if j.protocol_version == 2:
        assert cmd(j, "JSON.NUMINCRBY", "k", "$.a", "2") == b"[3]"
        assert cmd(j, "JSON.NUMINCRBY", "k", ".a", "0.5") == b"3.5"
        assert cmd(j, "JSON.NUMMULTBY", "k", "$..a", "2") == b"[7.0,10]"
        assert cmd(j, "JSON.NUMINCRBY", "k", "$.c", "1") == b"[null]"
    else:
        assert cmd(j, "JSON.NUMINCRBY", "k", "$.a", "2") == [3]
        assert cmd(j, "JSON.NUMINCRBY", "k", "$.c.e[2]", "1") == [3.5]
    with pytest.raises(redis.ResponseError, match="^could not perform this operation on a key that doesn't exist$"):
        cmd(j, "JSON.NUMINCRBY", "missing", "$.a", "1")
    with pytest.raises(redis.ResponseError, match="^bad input number$"):
        cmd(j, "JSON.NUMINCRBY", "k", "$.a", '"x"')
    if j.protocol_version == 2:  # RESP3 answers per match (null) for legacy paths too
        with pytest.raises(redis.ResponseError, match=r"^Path '\$.c.d' does not exist or does not contains a number$"):
            cmd(j, "JSON.NUMINCRBY", "k", ".c.d", "1")
    else:
        assert cmd(j, "JSON.NUMINCRBY", "k", ".c.d", "1") == [None]


def test_strings_and_toggle(j):
    assert cmd(j, "JSON.STRAPPEND", "k", "$.c.d", '"yz"') == [3]
    assert cmd(j, "JSON.STRLEN", "k", ".c.d") == 3
    assert cmd(j, "JSON.STRLEN", "k", "$..*")[:2] == [None, None]
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE wrong type of path value - expected string but found integer$"):
        cmd(j, "JSON.STRLEN", "k", ".a")
    assert cmd(j, "JSON.TOGGLE", "k", "$.c.e[0]") == [0]
    assert cmd(j, "JSON.TOGGLE", "k", ".c.e[0]") == b"true"
    with pytest.raises(redis.ResponseError, match=r"^Path '\$.a' does not exist or not a bool$"):
        cmd(j, "JSON.TOGGLE", "k", ".a")


def test_arrays(j):
    assert cmd(j, "JSON.ARRAPPEND", "k", "$.b", "4", '"five"') == [5]
    assert cmd(j, "JSON.ARRINSERT", "k", "$.b", "0", "0") == [6]
    assert cmd(j, "JSON.ARRINSERT", "k", ".b", "-1", "9") == 7
    with pytest.raises(redis.ResponseError, match="^index out of bounds$"):
        cmd(j, "JSON.ARRINSERT", "k", "$.b", "99", "1")
    assert cmd(j, "JSON.ARRLEN", "k", "$..b") == [7]
    assert cmd(j, "JSON.ARRLEN", "k", "$.a") == [None]
    assert cmd(j, "JSON.ARRINDEX", "k", "$.b", "3") == [3]
    assert cmd(j, "JSON.ARRINDEX", "k", "$.b", "3.0") == [-1]  # an integer is not a float
    assert cmd(j, "JSON.ARRPOP", "k", "$.b") == [b'"five"']
    assert cmd(j, "JSON.ARRPOP", "k", "$.b", "0") == [b"0"]
    assert cmd(j, "JSON.ARRTRIM", "k", "$.b", "1", "2") == [2]
    assert json.loads(cmd(j, "JSON.GET", "k", "$.b")) == [[2, 3]]
    assert cmd(j, "JSON.ARRPOP", "k", "$.a") == [None]
    with pytest.raises(redis.ResponseError, match="^Path '.a' does not exist or not an array$"):  # as given: ARRAPPEND
        cmd(j, "JSON.ARRAPPEND", "k", ".a", "1")


def test_objects_clear_delete(j):
    assert cmd(j, "JSON.OBJKEYS", "k") == [b"a", b"b", b"c", b"n"]
    assert cmd(j, "JSON.OBJKEYS", "k", "$..n") == [[b"a"]]
    assert cmd(j, "JSON.OBJLEN", "k", "$.c") == [2]
    assert cmd(j, "JSON.OBJLEN", "missing") is None
    assert cmd(j, "JSON.CLEAR", "k", "$.c") == 1
    assert json.loads(cmd(j, "JSON.GET", "k", "$.c")) == [{}]
    assert cmd(j, "JSON.DEL", "k", "$..a") == 2
    assert cmd(j, "JSON.FORGET", "k", "$.b") == 1
    assert cmd(j, "JSON.DEL", "k", "$.nothing") == 0
    assert cmd(j, "JSON.DEL", "k") == 1
    assert cmd(j, "EXISTS", "k") == 0
    cmd(j, "JSON.SET", "k2", "$", '{"only":1}')
    assert cmd(j, "JSON.DEL", "k2", "$.only") == 1
    assert cmd(j, "EXISTS", "k2") == 0  # an emptied root goes with its key, as RedisJSON 2.8+


def test_mget_mset_merge_resp(j):
    cmd(j, "JSON.SET", "k2", "$", '{"a":"two"}')
    assert cmd(j, "JSON.MGET", "k", "k2", "missing", "$.a") == [b"[1]", b'["two"]', None]
    assert cmd(j, "JSON.MGET", "k", "k2", ".a") == [b"1", b'"two"']
    assert cmd(j, "JSON.MSET", "m1", "$", '{"x":1}', "m2", "$", "[1]") == b"OK"
    with pytest.raises(redis.ResponseError, match="^new objects must be created at the root$"):
        cmd(j, "JSON.MSET", "m3", "$", "1", "m4", "$.x", "1")
    assert cmd(j, "EXISTS", "m3") == 0  # validated before anything was set
    assert cmd(j, "JSON.MERGE", "k", "$", '{"a":null,"c":{"d":"y","z":1}}') == b"OK"
    assert json.loads(cmd(j, "JSON.GET", "k")) == {"b": [1, 2, 3], "c": {"d": "y", "e": [True, None, 2.5], "z": 1},
                                                   "n": {"a": 5}}
    resp = cmd(j, "JSON.RESP", "k", ".c")
    assert resp[0] in (b"{", "{") and resp[1] == b"d"


def test_wrongtype_dump_restore_rename_expire(j):
    cmd(j, "SET", "s", "v")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        cmd(j, "JSON.GET", "s")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        cmd(j, "GET", "k")
    payload = cmd(j, "DUMP", "k")
    cmd(j, "RESTORE", "copy", "0", payload)
    assert cmd(j, "JSON.GET", "copy") == cmd(j, "JSON.GET", "k")
    cmd(j, "RENAME", "copy", "moved")
    assert json.loads(cmd(j, "JSON.GET", "moved", "$.a")) == [1]
    cmd(j, "PEXPIRE", "moved", "50")
    cmd(j, "JSON.SET", "moved", "$.a", "2")  # in-place change keeps the TTL
    assert cmd(j, "PTTL", "moved") > 0
    assert cmd(j, "OBJECT", "ENCODING", "k") == b"raw"


def test_filters_and_recursion(j):
    cmd(j, "JSON.SET", "store", "$", json.dumps({"book": [{"price": 8.95, "t": "a"}, {"price": 22.99, "t": "b"},
                                                          {"price": 12, "t": "c"}]}))
    assert json.loads(cmd(j, "JSON.GET", "store", "$.book[?(@.price<10)].t")) == ["a"]
    assert json.loads(cmd(j, "JSON.GET", "store", "$.book[?(@.price>10 && @.t=='c')].t")) == ["c"]
    assert json.loads(cmd(j, "JSON.GET", "store", "$.book[?(@.t=~'^[ab]$')].price")) == [8.95, 22.99]
    assert json.loads(cmd(j, "JSON.GET", "store", "$.book[-1:].t")) == ["c"]
    assert json.loads(cmd(j, "JSON.GET", "store", "$.book[0,2].t")) == ["a", "c"]
    assert json.loads(cmd(j, "JSON.GET", "store", "$..price")) == [8.95, 22.99, 12]
    with pytest.raises(redis.ResponseError, match="^Error occurred on position"):
        cmd(j, "JSON.GET", "store", "$.book[")


def test_debug_memory_and_help(j):
    assert cmd(j, "JSON.DEBUG", "MEMORY", "k") > 0
    assert len(cmd(j, "JSON.DEBUG", "MEMORY", "k", "$..a")) == 2
    assert cmd(j, "JSON.DEBUG", "HELP")[0].startswith(b"MEMORY")
