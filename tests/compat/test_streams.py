"""Streams: XADD/XRANGE/XREAD(BLOCK)/consumer groups, checked directly and against redis-server."""

import threading
import time

import pytest
import redis


@pytest.fixture
def ref(redis_ref):
    client = redis.Redis(port=redis_ref.port, protocol=2, socket_timeout=10)  # same client kind as `r`
    client.flushall()
    return client


def _both(r, ref, *cmd):
    """Run a command on Pion and on the reference; return both results (errors as strings)."""
    out = []
    for client in (r, ref):
        try:
            out.append(client.execute_command(*cmd))
        except redis.ResponseError as exc:
            out.append(f"ERR:{exc}")
    return out


DETERMINISTIC = [
    ("XADD", "s", "1-1", "a", "1"),
    ("XADD", "s", "1-1", "a", "again"),
    ("XADD", "s", "0-0", "a", "zero"),
    ("XADD", "s", "1-*", "b", "2"),
    ("XADD", "s", "5", "c", "3"),
    ("XADD", "s", "bad-id", "c", "3"),
    ("XADD", "s", "6-0", "odd"),
    ("XADD", "s", "MAXLEN", "-1", "7-0", "x", "y"),
    ("XLEN", "s"),
    ("XRANGE", "s", "-", "+"),
    ("XRANGE", "s", "(1-1", "+", "COUNT", "2"),
    ("XRANGE", "s", "1", "1"),
    ("XREVRANGE", "s", "+", "-", "COUNT", "1"),
    ("XRANGE", "s", "-", "+", "COUNT", "0"),
    ("XREVRANGE", "s", "+", "-", "COUNT", "0"),
    ("XRANGE", "s", "2", "1"),
    ("XPENDING", "s", "g"),
    ("XRANGE", "s", "(-", "+"),
    ("XDEL", "s", "1-2", "99-0"),
    ("XRANGE", "s", "-", "+"),
    ("XADD", "s", "MAXLEN", "2", "8-0", "m", "n"),
    ("XRANGE", "s", "-", "+"),
    ("XTRIM", "s", "MAXLEN", "1"),
    ("XTRIM", "s", "MINID", "9"),
    ("XLEN", "s"),
    ("XADD", "s", "NOMKSTREAM", "9-0", "a", "b"),
    ("XADD", "nos", "NOMKSTREAM", "9-0", "a", "b"),
    ("SET", "str", "v"),
    ("XADD", "str", "*", "a", "b"),
    ("XLEN", "str"),
    ("XREAD", "COUNT", "1", "STREAMS", "s", "0"),
    ("XREAD", "STREAMS", "s", "nos", "0", "0"),
    ("XREAD", "STREAMS", "s"),
    ("XREAD", "STREAMS", "s", ">"),
    ("XSETID", "s", "1-0"),
    ("XSETID", "s", "100-0"),
    ("XADD", "s", "99-0", "a", "b"),
    ("XGROUP", "CREATE", "s", "g", "0"),
    ("XGROUP", "CREATE", "s", "g", "0"),
    ("XGROUP", "CREATE", "nokey", "g", "0"),
    ("XGROUP", "CREATE", "mk", "g", "$", "MKSTREAM"),
    ("XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "s", ">"),
    ("XREADGROUP", "GROUP", "nog", "alice", "STREAMS", "s", ">"),
    ("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"),
    ("XACK", "s", "g", "9-0", "1-1"),
    ("XACK", "s", "nog", "9-0"),
    ("XGROUP", "CREATECONSUMER", "s", "g", "bob"),
    ("XGROUP", "DELCONSUMER", "s", "g", "bob"),
    ("XGROUP", "DESTROY", "s", "g"),
    ("XGROUP", "DESTROY", "s", "g"),
    ("XINFO", "GROUPS", "mk"),
    ("XPENDING", "mk", "nog"),
    ("XCLAIM", "mk", "nog", "c", "0", "1-0"),
    ("XINFO", "CONSUMERS", "mk", "nog"),
    ("XINFO", "CONSUMERS", "nokey", "g"),
    ("XGROUP", "CREATECONSUMER", "mk", "nog", "c"),
    ("XGROUP", "SETID", "nokey", "g", "0"),
    ("XINFO", "STREAM", "nokey"),
    ("XSETID", "nokey", "1-0"),
]


def test_deterministic_commands_match_redis(r, ref):
    for cmd in DETERMINISTIC:
        ours, theirs = _both(r, ref, *cmd)
        assert ours == theirs, cmd


def test_xadd_auto_ids_increase(r):
    ids = [r.xadd("auto", {"i": i}) for i in range(50)]
    assert ids == sorted(ids, key=lambda b: tuple(int(x) for x in b.split(b"-")))
    assert len(set(ids)) == 50


def test_xread_resp3_is_a_map(r3):
    r3.xadd("s3", {"a": "1"}, id="1-0")
    reply = r3.execute_command("XREAD", "STREAMS", "s3", "0")
    assert isinstance(reply, dict) and list(reply) == [b"s3"]


def test_xread_block_wakes_on_xadd(server, r):
    result = {}

    def reader():
        c = redis.Redis(port=server.port)
        result["got"] = c.xread({"bs": "$"}, block=5000)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.2)
    r.xadd("bs", {"k": "v"}, id="3-0")
    t.join(5)
    assert result["got"] == [[b"bs", [(b"3-0", {b"k": b"v"})]]]


def test_xread_block_times_out_with_null(r):
    start = time.time()
    assert r.xread({"none": "$"}, block=150) == []
    assert time.time() - start >= 0.14


def test_xreadgroup_pending_and_ack(r):
    for i in range(3):
        r.xadd("q", {"n": i}, id=f"{i + 1}-0")
    r.xgroup_create("q", "workers", id="0")
    got = r.xreadgroup("workers", "w1", {"q": ">"}, count=2)
    assert [e[0] for e in got[0][1]] == [b"1-0", b"2-0"]
    summary = r.xpending("q", "workers")
    assert summary["pending"] == 2 and summary["consumers"] == [{"name": b"w1", "pending": 2}]
    assert r.xack("q", "workers", "1-0") == 1
    detail = r.xpending_range("q", "workers", "-", "+", 10)
    assert [d["message_id"] for d in detail] == [b"2-0"] and detail[0]["times_delivered"] == 1


def test_xclaim_and_xautoclaim_move_ownership(r):
    r.xadd("c", {"a": 1}, id="1-0")
    r.xadd("c", {"a": 2}, id="2-0")
    r.xgroup_create("c", "g", id="0")
    r.xreadgroup("g", "w1", {"c": ">"})
    claimed = r.xclaim("c", "g", "w2", 0, ["1-0"])
    assert claimed[0][0] == b"1-0"
    r.xdel("c", "2-0")
    cursor, entries, deleted = r.execute_command("XAUTOCLAIM", "c", "g", "w3", "0", "0-0")
    assert cursor == b"0-0" and [e[0] for e in entries] == [b"1-0"] and deleted == [b"2-0"]


def test_xinfo_stream_fields(r):
    r.xadd("i", {"a": 1}, id="1-0")
    info = r.xinfo_stream("i")
    assert info["length"] == 1 and info["last-generated-id"] == b"1-0" and info["first-entry"][0] == b"1-0"


def test_xreadgroup_is_logged_as_xclaim_and_setid(server, r):
    records = []
    journal = server.server.journal
    original = journal.append
    server.call(lambda: setattr(journal, "append", lambda effects: records.append(effects) or original(effects)))
    r.xadd("lg", {"a": 1}, id="1-0")
    r.xgroup_create("lg", "g", id="0")
    records.clear()
    r.xreadgroup("g", "c", {"lg": ">"})
    names = [argv[0] + b" " + argv[1] for _, argv in records[0]]
    assert names == [b"XGROUP CREATECONSUMER", b"XCLAIM lg", b"XGROUP SETID"]
