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


# -- found by redis-py's own suite (docs/clients.md) ----------------------------------------------


GROUP_COUNTERS = [
    [("XADD", "s", "1-1", "a", "1"), ("XGROUP", "CREATE", "s", "g", "0")],
    [("XADD", "s", "1-1", "a", "1"), ("XGROUP", "CREATE", "s", "g", "$")],
    [("XADD", "s", "1-1", "a", "1"), ("XADD", "s", "2-1", "a", "1"), ("XGROUP", "CREATE", "s", "g", "0"),
     ("XGROUP", "SETID", "s", "g", "1-1", "ENTRIESREAD", "1")],
    [("XADD", "s", "1-1", "a", "1"), ("XADD", "s", "2-1", "a", "1"), ("XADD", "s", "3-1", "a", "1"),
     ("XGROUP", "CREATE", "s", "g", "0"), ("XDEL", "s", "2-1"), ("XREADGROUP", "GROUP", "g", "c", "COUNT", "1",
                                                                 "STREAMS", "s", ">")],
    [("XADD", "s", "1-1", "a", "1"), ("XADD", "s", "2-1", "a", "1"), ("XADD", "s", "3-1", "a", "1"),
     ("XGROUP", "CREATE", "s", "g", "0"), ("XDEL", "s", "2-1"), ("XREADGROUP", "GROUP", "g", "c",
                                                                 "STREAMS", "s", ">")],
]


@pytest.mark.parametrize("script", GROUP_COUNTERS)
def test_xinfo_groups_entries_read_is_the_raw_counter_and_lag_as_redis(r, ref, script):
    """entries-read is the group's own counter (null until known, not an estimate); lag is not clamped."""
    for cmd in script:
        _both(r, ref, *cmd)
    assert r.xinfo_groups("s") == ref.xinfo_groups("s")


def test_xinfo_groups_lag_counts_the_stream_when_the_group_is_before_its_first_entry(r):
    """A group behind the first entry (and no tombstone after it) lags by the stream's length; an
    ENTRIESREAD past entries-added is capped to it (Redis 8.2.2; 7.x kept it and answered a
    negative lag: docs/compat-differences.md), as redis-py 8.1's
    test_xgroup_create_entriesread_fixed_max_entries_read expects."""
    for i in range(3):
        r.xadd("s", {"foo": i})
    r.xgroup_create("s", "g", 0, entries_read=7)
    [group] = r.xinfo_groups("s")
    assert group["entries-read"] == 3 and group["lag"] == 3
    r.xgroup_setid("s", "g", "$", entries_read=9999)
    [group] = r.xinfo_groups("s")
    assert group["entries-read"] == 3 and group["lag"] == 0


def test_xtrim_approximate_removes_whole_nodes_only(r):
    for _ in range(4):
        r.xadd("t", {"foo": "bar"})
    assert r.xtrim("t", 3, approximate=True, limit=2) == 0  # the node holds 4 > LIMIT
    assert r.xtrim("t", 3, approximate=True) == 0  # the node is not all surplus
    assert r.xtrim("t", 0, approximate=True) == 4 and r.xlen("t") == 0


# -- found by Redis's own test suite (docs/redis-test-suite.md) -------------------------------------


def test_xtrim_approximate_follows_node_boundaries_after_exact_trims(r):
    """Exact trims leave the head node partly deleted; ``~`` then drops that node whole."""
    r.config_set("stream-node-max-entries", 100)
    for j in range(1000):
        r.xadd("s", {"x": j}, id=f"{j + 1}-0")
    r.xtrim("s", 666, approximate=False)
    r.xtrim("s", 555, approximate=False)
    assert r.xlen("s") == 555
    assert r.xtrim("s", 444, approximate=True) == 55 and r.xlen("s") == 500
    assert r.xtrim("s", 400, approximate=True) == 100 and r.xlen("s") == 400


def test_xadd_maxlen_approximate_keeps_whole_nodes(r):
    r.config_set("stream-node-max-entries", 100)
    for j in range(1000):
        r.xadd("s", {"x": j}, maxlen=555, approximate=True)
    assert r.xlen("s") == 600
    r.delete("s")
    for j in range(10):
        r.xadd("s", {"x": j})
    r.config_set("stream-node-max-entries", 3)  # later nodes hold 3; LIMIT counts whole nodes
    for j in range(9):
        r.xadd("s", {"x": j})
    assert r.xtrim("s", 0, approximate=True, limit=12) == 10 and r.xlen("s") == 9


def test_xrange_exclusive_bound_past_the_last_possible_id_is_an_error(r):
    r.xadd("s", {"f": "v"}, id="5-0")
    with pytest.raises(redis.ResponseError, match="invalid start ID for the interval"):
        r.xrange("s", "(18446744073709551615-18446744073709551615", "+")
    with pytest.raises(redis.ResponseError, match="invalid end ID for the interval"):
        r.xrange("s", "-", "(0-0")
    with pytest.raises(redis.ResponseError, match="invalid end ID for the interval"):
        r.xrevrange("s", "(0-0", "-")


def test_blocked_xread_waits_through_the_key_turning_into_a_list(server, r):
    result = {}

    def reader():
        result["got"] = redis.Redis(port=server.port).xread({"s1": "$"}, block=5000)

    t = threading.Thread(target=reader)
    t.start()
    deadline = time.time() + 3
    while r.info("clients")["blocked_clients"] < 1 and time.time() < deadline:
        time.sleep(0.01)
    with r.pipeline(transaction=True) as pipe:
        pipe.xadd("s1", {"old": "x"}).delete("s1").lpush("s1", "a").execute()
    r.delete("s1")
    r.xadd("s1", {"new": "y"}, id="7-0")
    t.join(5)
    assert result["got"] == [[b"s1", [(b"7-0", {b"new": b"y"})]]]


def test_xgroup_setid_takes_dash_and_plus_but_create_does_not(r):
    r.xadd("s", {"f": "v"}, id="5-0")
    with pytest.raises(redis.ResponseError, match="Invalid stream ID"):
        r.xgroup_create("s", "g", "-")
    r.xgroup_create("s", "g", "0")
    assert r.xgroup_setid("s", "g", "+")
    assert r.xinfo_groups("s")[0]["last-delivered-id"] == b"18446744073709551615-18446744073709551615"
    assert r.xgroup_setid("s", "g", "-")
    assert r.xinfo_groups("s")[0]["last-delivered-id"] == b"0-0"


def test_xautoclaim_deleted_entries_count_against_count_and_options_come_first(r):
    with pytest.raises(redis.ResponseError, match="COUNT must be > 0"):
        r.execute_command("XAUTOCLAIM", "nokey", "g", "c", "0", "-", "COUNT", "0")
    with pytest.raises(redis.ResponseError, match="COUNT must be > 0"):
        r.execute_command("XAUTOCLAIM", "nokey", "g", "c", "0", "-", "COUNT", "x")
    for n in (1, 2, 3):
        r.xadd("x", {"f": "v"}, id=f"{n}-0")
    r.xgroup_create("x", "grp", "0")
    r.xreadgroup("grp", "Alice", {"x": ">"})
    r.xdel("x", "1-0")
    assert r.execute_command("XAUTOCLAIM", "x", "grp", "Bob", "0", "0-0", "COUNT", "1") == [b"2-0", [], [b"1-0"]]


def test_a_blocked_command_unblocked_with_an_error_counts_as_failed(server, r):
    r.xgroup_create("s", "g", "$", mkstream=True)
    r.config_resetstat()
    result = {}

    def reader():
        try:
            redis.Redis(port=server.port).xreadgroup("g", "Alice", {"s": ">"}, block=0)
        except redis.ResponseError as exc:
            result["err"] = str(exc)

    t = threading.Thread(target=reader)
    t.start()
    deadline = time.time() + 3
    while r.info("clients")["blocked_clients"] < 1 and time.time() < deadline:
        time.sleep(0.01)
    r.xgroup_destroy("s", "g")
    t.join(5)
    assert "the consumer group this client was blocked on no longer exists" in result["err"]
    assert r.info("errorstats")["errorstat_NOGROUP"]["count"] == 1
    assert r.info("commandstats")["cmdstat_xreadgroup"]["failed_calls"] == 1
    other = r.info("errorstats").get("errorstat_ERR", {}).get("count", 0)  # the clients' handshakes
    assert r.info("stats")["total_error_replies"] == 1 + other


def test_scripts_may_not_use_block_with_xread_or_xreadgroup(r):
    r.xgroup_create("s", "g", "$", mkstream=True)
    assert r.eval("return redis.pcall('xread','STREAMS','s','$')", 1, "s") is None
    with pytest.raises(redis.ResponseError, match="xread command is not allowed with BLOCK option from scripts"):
        r.eval("return redis.pcall('xread','BLOCK',0,'STREAMS','s','$')", 1, "s")
    with pytest.raises(redis.ResponseError, match="xreadgroup command is not allowed with BLOCK option from scripts"):
        r.eval("return redis.pcall('xreadgroup','group','g','c','BLOCK',0,'STREAMS','s','>')", 1, "s")
