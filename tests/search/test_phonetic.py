"""TEXT ... PHONETIC dm:xx: Double Metaphone codes indexed and expanded as RediSearch 2.10 does
(the byte-for-byte comparison with a live Redis Stack is ``stack_diff_phonetic.py``); here the
codes themselves, what the library's absence does, FT.CONFIG MIN_PHONETIC_TERM_LEN, and that the
field survives a reload."""

from __future__ import annotations

import time

import pytest
import redis

from pion.protocol.errors import ReplyError
from pion.vector import phonetic, schema
from tests.recovery.helpers import DirServer

pytest.importorskip("metaphone")  # the search extra (make venv installs it)


def cmd(r, *args):
    return r.execute_command(*args)


def _ids(reply) -> list[bytes]:
    if isinstance(reply, dict):
        return sorted(item[b"id"] for item in reply[b"results"])
    return sorted(x for x in reply[1:] if isinstance(x, bytes))


def _indexing(r) -> bool:
    info = cmd(r, "FT.INFO", "ph")
    return bool(info[info.index(b"indexing") + 1])


def test_codes_are_primary_cut_to_four_and_prefixed():
    assert phonetic.code("john") == phonetic.code("jon") == "<JN"
    assert phonetic.code("smith") == "<SM0" and phonetic.code("schmidt") == "<XMT"  # primary only
    assert phonetic.code("schwarzenegger") == "<XRSN"  # RediSearch keeps 4 letters
    assert phonetic.code("jose") == "<HS" and phonetic.code("josé") == "<JS"  # the padded "JOSE " of RediSearch
    assert phonetic.code("123") is None and phonetic.code("h") is None


def test_codes_follow_redisearchs_c_code_where_the_library_differs():
    # RediSearch 2.10.5's codes (FT.EXPLAIN shows them); the library alone gives MX, TMP, NMPR, HH, AT, SLK, NNT
    expected = {"much": "<MK", "each": "<AK", "ch": "<K", "rich": "<RX", "dumb": "<TM", "number": "<NMR",
                "high": "<H", "higher": "<HR", "hugh": "<H", "ought": "<AKT", "laugh": "<LF", "çelik": "<LK",
                "ñandú": "<NT", "müller": "<MLR", "straße": "<STR"}
    assert {word: phonetic.code(word) for word in expected} == expected


def test_matcher_and_flag_parsing():
    for good in phonetic.MATCHERS:
        assert phonetic.check_matcher(good) == good
    for bad in ("DM:EN", "dm:de", "dm", "", "xx:en"):
        with pytest.raises(ReplyError, match="^Matcher Format"):
            phonetic.check_matcher(bad)
    assert phonetic.parse_flag("TRUE") and phonetic.parse_flag("1")
    assert not phonetic.parse_flag("false") and not phonetic.parse_flag("0")
    with pytest.raises(ReplyError, match=r"^Invalid value \(yes\) for `phonetic`$"):
        phonetic.parse_flag("yes")
    assert phonetic.min_len({"MIN_PHONETIC_TERM_LEN": "5"}) == 5 and phonetic.min_len(None) == 3


def test_without_the_library_the_field_is_refused(monkeypatch):
    monkeypatch.setattr(phonetic, "_doublemetaphone", lambda: None)
    with pytest.raises(ReplyError, match=r"metaphone.*pion\[search\]"):
        schema.parse_create([b"FT.CREATE", b"i", b"SCHEMA", b"n", b"TEXT", b"PHONETIC", b"dm:en"])
    definition = schema.parse_create([b"FT.CREATE", b"i", b"SCHEMA", b"n", b"TEXT"])  # a plain field still works
    assert definition.fields[0].phonetic is None


@pytest.fixture
def names(any_client):
    r = any_client
    cmd(r, "FT.CREATE", "ph", "ON", "HASH", "PREFIX", "1", "p:", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en",
        "t", "TEXT")
    for i, name in enumerate(["John", "Jon", "Smith", "Smyth", "Schmidt", "Catherine", "Kathryn", "Al"]):
        r.hset(f"p:{i}", mapping={"name": name, "t": name})
    yield r
    cmd(r, "FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "3")


def test_sounds_alike_on_the_phonetic_field_only(names):
    r = names
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:jon", "NOCONTENT")) == [b"p:0", b"p:1"]
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@t:jon", "NOCONTENT")) == [b"p:1"]
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:smith", "NOCONTENT")) == [b"p:2", b"p:3"]  # not Schmidt
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:kathryn", "NOCONTENT")) == [b"p:5", b"p:6"]
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:jon=>{$phonetic:false}", "NOCONTENT")) == [b"p:1"]
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:jon", "NOCONTENT", "VERBATIM")) == [b"p:1"]
    assert _ids(cmd(r, "FT.SEARCH", "ph", '@name:"jon"', "NOCONTENT")) == [b"p:1"]  # exact: no expansion
    # a code is a term of its own, never a word a prefix or a wildcard reaches
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:w'*'", "NOCONTENT", "LIMIT", "0", "100")) == \
        sorted(f"p:{i}".encode() for i in range(8))
    with pytest.raises(redis.ResponseError, match="^field does not support phonetics$"):
        cmd(r, "FT.SEARCH", "ph", "@t:jon=>{$phonetic:true}")
    with pytest.raises(redis.ResponseError, match="^field does not support phonetics$"):
        cmd(r, "FT.EXPLAIN", "ph", "@t:(a|jon=>{$phonetic:false})")  # refused while parsing, as RediSearch
    assert cmd(r, "FT.EXPLAIN", "ph", "@name|t:jon=>{$phonetic:true}")  # one phonetic field is enough
    with pytest.raises(redis.ResponseError, match=r"^Invalid value \(maybe\) for `phonetic`$"):
        cmd(r, "FT.SEARCH", "ph", "@name:jon=>{$phonetic:maybe}")


def test_min_phonetic_term_len_is_read_at_indexing(names):
    r = names
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:el", "NOCONTENT")) == []  # "Al" (2 letters) has no code
    cmd(r, "FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "2")
    r.hset("p:8", mapping={"name": "El"})
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:al", "NOCONTENT")) == [b"p:7", b"p:8"]
    cmd(r, "FT.CONFIG", "SET", "MIN_PHONETIC_TERM_LEN", "9")
    r.hset("p:9", mapping={"name": "Jonny"})
    assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:john", "NOCONTENT")) == [b"p:0", b"p:1"]


def test_phonetic_field_survives_a_reload(tmp_path):
    server = DirServer(tmp_path / "data", enable_debug_command="yes").start()
    try:
        r = server.client(protocol=2)
        cmd(r, "FT.CREATE", "ph", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en")
        r.hset("p:0", mapping={"name": "John"})
        r.hset("p:1", mapping={"name": "Jon"})
        assert cmd(r, "DEBUG", "RELOAD")
        deadline = time.monotonic() + 20  # the index is rebuilt from the keys in the background
        while _indexing(r) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _ids(cmd(r, "FT.SEARCH", "ph", "@name:jon", "NOCONTENT")) == [b"p:0", b"p:1"]
    finally:
        server.stop()


def test_a_short_word_repeats_the_code_before_it(any_client):
    # Redis Stack (RediSearch 2.10.5) with the same commands: "Jon x y z" holds <JN 4 times, so
    # TFIDF's norm is 4 for it: 0.5 against 1 for "Jon" (both with t "jon")
    r = any_client
    cmd(r, "FT.CREATE", "k0", "PREFIX", "1", "k0:", "SCHEMA", "name", "TEXT", "PHONETIC", "dm:en", "t", "TEXT")
    r.hset("k0:1", mapping={"name": "Jon x y z", "t": "jon"})
    r.hset("k0:2", mapping={"name": "Jon", "t": "jon"})
    reply = cmd(r, "FT.SEARCH", "k0", "@name:jon=>{$phonetic:false}", "NOCONTENT", "WITHSCORES", "SCORER", "TFIDF")
    if isinstance(reply, dict):
        scores = {item[b"id"]: item[b"score"] for item in reply[b"results"]}
    else:
        scores = {reply[i]: float(reply[i + 1]) for i in range(1, len(reply), 2)}
    assert scores == {b"k0:1": 0.5, b"k0:2": 1.0}
