"""List commands through redis-py in RESP2 and RESP3: replies, shapes, error texts, WRONGTYPE,
emptied keys, keyspace events, what is logged, OBJECT ENCODING and DUMP/RESTORE of lists.

Also home of small helpers the other list/zset/geo test modules import."""

from __future__ import annotations

import time

import pytest
import redis

from pion.storage.list_value import ListValue, entry_size
from pion.storage.serialize import dump_value, load_value

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def err(client: redis.Redis, *argv) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        client.execute_command(*argv)
    return str(exc.value)


def record_journal(server) -> list:
    """What the dispatcher hands to the journal: one list of argvs per logged command."""
    records: list = []
    journal = server.server.journal
    original = journal.append

    def append(effects):
        records.append([[bytes(a) for a in argv] for _, argv in effects])
        return original(effects)

    server.call(setattr, journal, "append", append)
    return records


def raw_reply(raw, proto: int, *argv) -> bytes:
    """One command's raw reply bytes on a fresh protocol switch."""
    raw.cmd("HELLO", str(proto))
    raw.read_some(0.3)
    raw.cmd(*argv)
    return raw.read_some(0.5)


class Events:
    """Keyevent notifications (the server must run with notify-keyspace-events KEA)."""

    def __init__(self, srv) -> None:
        self.client = redis.Redis(port=srv.port)
        self.sub = self.client.pubsub()
        self.sub.psubscribe("__keyevent@0__:*")
        self.sub.get_message(timeout=2)

    def take(self) -> list[tuple[bytes, bytes]]:
        out = []
        deadline = time.time() + 0.3
        while time.time() < deadline:
            msg = self.sub.get_message(timeout=0.05)
            if msg and msg["type"] == "pmessage":
                out.append((msg["channel"].split(b":", 1)[1], msg["data"]))
        return out

    def close(self) -> None:
        self.sub.close()
        self.client.close()


# -- pushes and pops ------------------------------------------------------------------------------


def test_push_returns_length_and_orders_elements(rr):
    assert rr.rpush("l", "a", "b") == 2
    assert rr.lpush("l", "x", "y") == 4
    assert rr.lrange("l", 0, -1) == [b"y", b"x", b"a", b"b"]
    assert rr.lpushx("missing", "a") == 0 and rr.rpushx("missing", "a") == 0
    assert rr.exists("missing") == 0
    assert rr.rpushx("l", "z") == 5 and rr.lpushx("l", "w") == 6
    assert rr.llen("l") == 6 and rr.llen("missing") == 0


def test_pop_without_and_with_count(rr):
    rr.rpush("l", "a", "b", "c", "d")
    assert rr.lpop("l") == b"a"
    assert rr.rpop("l") == b"d"
    assert rr.lpop("l", 0) == []
    assert rr.rpop("l", 5) == [b"c", b"b"]
    assert rr.exists("l") == 0
    assert rr.lpop("missing") is None
    assert rr.lpop("missing", 2) is None
    assert rr.lpop("missing", 0) is None


def test_pop_null_shapes_on_the_wire(server, raw):
    assert raw_reply(raw, 2, "LPOP", "missing", "2") == b"*-1\r\n"
    assert raw_reply(raw, 2, "LPOP", "missing") == b"$-1\r\n"
    assert raw_reply(raw, 3, "LPOP", "missing", "2") == b"_\r\n"
    assert raw_reply(raw, 3, "LMPOP", "1", "missing", "LEFT") == b"_\r\n"


def test_pop_errors(r):
    r.rpush("l", "a")
    assert err(r, "LPOP", "l", "-1") == "value is out of range, must be positive"
    assert err(r, "LPOP", "l", "x") == "value is out of range, must be positive"
    assert err(r, "LPOP", "l", "1", "2") == "wrong number of arguments for 'lpop' command"
    assert err(r, "RPOP") == "wrong number of arguments for 'rpop' command"


# -- reads ---------------------------------------------------------------------------------------


def test_lindex_and_lrange_windows(rr):
    rr.rpush("l", *"abcdef")
    assert rr.lindex("l", 0) == b"a" and rr.lindex("l", -1) == b"f"
    assert rr.lindex("l", 6) is None and rr.lindex("missing", 0) is None
    assert rr.lrange("l", -3, -1) == [b"d", b"e", b"f"]
    assert rr.lrange("l", 4, 100) == [b"e", b"f"]
    assert rr.lrange("l", -100, 1) == [b"a", b"b"]
    assert rr.lrange("l", 3, 2) == [] and rr.lrange("l", 6, 10) == []
    assert rr.lrange("missing", 0, -1) == []
    assert err(rr, "LINDEX", "l", "x") == "value is not an integer or out of range"
    assert err(rr, "LRANGE", "l", "0", "1.5") == "value is not an integer or out of range"


def test_lrange_of_a_long_list_from_either_end(r):
    r.rpush("l", *range(1000))
    assert r.lrange("l", 990, 994) == [b"%d" % i for i in range(990, 995)]
    assert r.lrange("l", 5, 8) == [b"5", b"6", b"7", b"8"]
    assert len(r.lrange("l", 0, -1)) == 1000


def test_lpos_options(rr):
    rr.rpush("l", *"abcabc")
    assert rr.lpos("l", "a") == 0
    assert rr.lpos("l", "a", rank=2) == 3
    assert rr.lpos("l", "a", rank=-1) == 3
    assert rr.lpos("l", "a", count=0) == [0, 3]
    assert rr.lpos("l", "a", rank=-1, count=0) == [3, 0]
    assert rr.lpos("l", "c", maxlen=2) is None
    assert rr.lpos("l", "b", count=5, maxlen=2) == [1]
    assert rr.lpos("l", "z") is None and rr.lpos("l", "z", count=1) == []
    assert rr.lpos("missing", "z") is None and rr.lpos("missing", "z", count=1) == []


def test_lpos_errors(r):
    r.rpush("l", "a")
    assert err(r, "LPOS", "l", "a", "RANK", "0").startswith("RANK can't be zero: use 1 to start")
    assert err(r, "LPOS", "l", "a", "COUNT", "-1") == "COUNT can't be negative"
    assert err(r, "LPOS", "l", "a", "MAXLEN", "-1") == "MAXLEN can't be negative"
    assert err(r, "LPOS", "l", "a", "RANK", "x") == "value is not an integer or out of range"
    assert err(r, "LPOS", "l", "a", "COUNT") == "syntax error"
    assert err(r, "LPOS", "l", "a", "FOO", "1") == "syntax error"


# -- in-place edits ------------------------------------------------------------------------------


def test_lset_linsert(rr):
    rr.rpush("l", "a", "b", "c")
    assert rr.lset("l", -1, "C") is True
    assert rr.linsert("l", "BEFORE", "b", "x") == 4
    assert rr.linsert("l", "after", "C", "y") == 5
    assert rr.linsert("l", "before", "zz", "q") == -1
    assert rr.linsert("missing", "before", "a", "q") == 0
    assert rr.lrange("l", 0, -1) == [b"a", b"x", b"b", b"C", b"y"]
    assert err(rr, "LSET", "l", "9", "v") == "index out of range"
    assert err(rr, "LSET", "missing", "0", "v") == "no such key"
    assert err(rr, "LINSERT", "l", "MIDDLE", "a", "v") == "syntax error"


def test_lrem_from_head_tail_and_all(rr):
    rr.rpush("l", *"abacada")
    assert rr.lrem("l", 2, "a") == 2
    assert rr.lrange("l", 0, -1) == [b"b", b"c", b"a", b"d", b"a"]
    assert rr.lrem("l", -1, "a") == 1
    assert rr.lrange("l", 0, -1) == [b"b", b"c", b"a", b"d"]
    assert rr.lrem("l", 0, "a") == 1 and rr.lrem("l", 0, "zz") == 0
    assert rr.lrem("missing", 0, "a") == 0
    rr.rpush("one", "x", "x")
    assert rr.lrem("one", 0, "x") == 2 and rr.exists("one") == 0


def test_ltrim(rr):
    rr.rpush("l", *"abcdef")
    assert rr.ltrim("l", 1, -2) is True
    assert rr.lrange("l", 0, -1) == [b"b", b"c", b"d", b"e"]
    assert rr.ltrim("l", 5, 1) is True
    assert rr.exists("l") == 0
    assert rr.ltrim("missing", 0, 1) is True


# -- moves ---------------------------------------------------------------------------------------


def test_lmove_and_rpoplpush(rr):
    rr.rpush("src", "a", "b", "c")
    assert rr.lmove("src", "dst", "LEFT", "RIGHT") == b"a"
    assert rr.lmove("src", "dst", "RIGHT", "LEFT") == b"c"
    assert rr.rpoplpush("src", "dst") == b"b"
    assert rr.exists("src") == 0
    assert rr.lrange("dst", 0, -1) == [b"b", b"c", b"a"]
    assert rr.lmove("dst", "dst", "LEFT", "RIGHT") == b"b"
    assert rr.lrange("dst", 0, -1) == [b"c", b"a", b"b"]
    assert rr.rpoplpush("missing", "dst") is None
    assert err(rr, "LMOVE", "dst", "x", "UP", "LEFT") == "syntax error"


def test_single_element_rotation_keeps_the_key(r):
    r.rpush("l", "only")
    assert r.lmove("l", "l", "LEFT", "LEFT") == b"only"
    assert r.lrange("l", 0, -1) == [b"only"]


def test_lmpop(rr):
    rr.rpush("b", "1", "2", "3")
    assert rr.lmpop(2, "a", "b", direction="LEFT", count=2) == [b"b", [b"1", b"2"]]
    assert rr.lmpop(1, "b", direction="RIGHT") == [b"b", [b"3"]]
    assert rr.lmpop(1, "b", direction="LEFT") is None
    assert err(rr, "LMPOP", "0", "a", "LEFT") == "numkeys should be greater than 0"
    assert err(rr, "LMPOP", "1", "a", "UP") == "syntax error"
    assert err(rr, "LMPOP", "2", "a", "LEFT") == "syntax error"
    assert err(rr, "LMPOP", "1", "a", "LEFT", "COUNT", "0") == "count should be greater than 0"
    assert err(rr, "LMPOP", "1", "a", "LEFT", "COUNT", "1", "COUNT", "1") == "syntax error"


# -- types, events, logging ----------------------------------------------------------------------


def test_wrongtype_on_every_list_command(rr):
    rr.set("str", "v")
    rr.rpush("l", "a")
    calls = [
        ("LPUSH", "str", "a"), ("RPUSHX", "str", "a"), ("LPOP", "str"), ("RPOP", "str", "0"),
        ("LLEN", "str"), ("LINDEX", "str", "0"), ("LSET", "str", "0", "a"), ("LINSERT", "str", "BEFORE", "a", "b"),
        ("LREM", "str", "0", "a"), ("LTRIM", "str", "0", "1"), ("LRANGE", "str", "0", "-1"), ("LPOS", "str", "a"),
        ("LMOVE", "str", "l", "LEFT", "LEFT"), ("LMOVE", "l", "str", "LEFT", "LEFT"), ("RPOPLPUSH", "l", "str"),
        ("LMPOP", "2", "missing", "str", "LEFT"), ("BLPOP", "str", "0"), ("BLMOVE", "l", "str", "LEFT", "LEFT", "0"),
    ]
    for argv in calls:
        assert err(rr, *argv) == WRONGTYPE, argv
    assert rr.lrange("l", 0, -1) == [b"a"]
    assert rr.lmpop(2, "l", "str", direction="LEFT") == [b"l", [b"a"]]


def test_keyspace_events(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    r = redis.Redis(port=srv.port)
    events = Events(srv)
    r.rpush("l", "a", "b")
    r.lpush("l", "c")
    r.lset("l", 0, "x")
    r.linsert("l", "BEFORE", "x", "y")
    r.lrem("l", 1, "y")
    r.ltrim("l", 0, 1)
    r.lmove("l", "m", "LEFT", "RIGHT")
    r.rpop("l")
    assert events.take() == [
        (b"rpush", b"l"), (b"lpush", b"l"), (b"lset", b"l"), (b"linsert", b"l"), (b"lrem", b"l"),
        (b"ltrim", b"l"), (b"rpush", b"m"), (b"lpop", b"l"), (b"rpop", b"l"), (b"del", b"l"),
    ]
    events.close()
    r.close()


def test_lmpop_is_logged_as_a_pop_with_count(server, r):
    r.rpush("l", "a", "b", "c")
    records = record_journal(server)
    r.lmpop(2, "missing", "l", direction="RIGHT", count=2)
    r.lpop("l")
    r.lpop("missing")
    assert records == [[[b"RPOP", b"l", b"2"]], [[b"LPOP", b"l"]]]


def test_watch_sees_list_changes(r):
    r.rpush("l", "a")
    with r.pipeline() as pipe:
        pipe.watch("l")
        r.rpush("l", "b")
        pipe.multi()
        pipe.lpop("l")
        with pytest.raises(redis.WatchError):
            pipe.execute()


# -- encodings and serialization -----------------------------------------------------------------


def test_object_encoding_follows_list_max_listpack_size(r):
    r.config_set("list-max-listpack-size", 4)
    r.rpush("l", "a", "b", "c", "d")
    assert r.object("encoding", "l") == b"listpack"
    r.rpush("l", "e")
    assert r.object("encoding", "l") == b"quicklist"
    r.rpop("l", 2)
    assert r.object("encoding", "l") == b"quicklist"
    r.rpop("l", 1)
    assert r.object("encoding", "l") == b"listpack"


def test_object_encoding_by_bytes(r):
    r.rpush("l", "x" * 4000, "y" * 4000)
    assert r.object("encoding", "l") == b"listpack"
    r.rpush("l", "z" * 300)
    assert r.object("encoding", "l") == b"quicklist"


def test_entry_sizes_follow_listpack():
    assert entry_size(b"5") == 2 and entry_size(b"-1") == 3 and entry_size(b"99999") == 5
    assert entry_size(b"a" * 10) == 12 and entry_size(b"a" * 100) == 103
    assert entry_size(b"007") == 5


def test_dump_restore_round_trip(r):
    r.rpush("l", "a", "b", "")
    payload = r.dump("l")
    r.restore("copy", 0, payload)
    assert r.lrange("copy", 0, -1) == [b"a", b"b", b""]
    value = load_value(dump_value(ListValue([b"x"], quick=True)))
    assert list(value.items) == [b"x"] and value.quick


def test_listpack_size_bookkeeping_stays_exact(server, r):
    r.rpush("l", *[b"v%d" % i for i in range(50)], 7, -300, "x" * 100)
    r.lpush("l", "head")
    r.lset("l", 3, "y" * 70)
    r.linsert("l", "AFTER", "v10", "12345")
    r.lrem("l", -2, "v20")
    r.ltrim("l", 2, -3)
    r.lpop("l", 3)
    r.lmove("l", "l", "LEFT", "RIGHT")

    def check():
        value = server.server.dbs[0].data[b"l"]
        expected = 7 + sum(entry_size(item) for item in value.items)
        return value.nbytes, expected

    actual, expected = server.call(check)
    assert actual == expected


def test_copy_makes_an_independent_list(r):
    r.rpush("l", "a", "b")
    assert r.copy("l", "c") is True
    r.rpush("c", "x")
    r.lpop("l")
    assert r.lrange("l", 0, -1) == [b"b"] and r.lrange("c", 0, -1) == [b"a", b"b", b"x"]
