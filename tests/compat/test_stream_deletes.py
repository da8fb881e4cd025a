"""Redis 8.2's XDELEX and XACKDEL over the wire (RESP2 and RESP3). The scenarios and error texts
follow Redis's own tests (tests/unit/type/stream-cgroups.tcl and stream.tcl of Redis 8.2): no
8.x server runs here, so the expected replies are those the Redis suite asserts."""

from __future__ import annotations

import pytest
import redis

from tests.compat.test_sets import WRONGTYPE, Events, err, record_journal
from tests.compat.test_tracking import Raw

EMPTY_PENDING = (0, None, None, [])


def two_groups_read_both(r) -> None:
    r.delete("s")
    r.xadd("s", {"f": "v"}, id="1-0")
    r.xadd("s", {"f": "v"}, id="2-0")
    for group, consumer in (("g1", "c1"), ("g2", "c2")):
        r.xgroup_create("s", group, "0")
        r.xreadgroup(group, consumer, {"s": ">"})


def pending(r, group: str) -> tuple:
    """XPENDING's summary (count, min, max, [(consumer, count)]), as redis-py parses it."""
    got = r.xpending("s", group)
    return got["pending"], got["min"], got["max"], [(c["name"], c["pending"]) for c in got["consumers"]]


def test_argument_checks(rr):
    rr.xadd("s", {"f": "v"}, id="1-0")
    rr.xgroup_create("s", "g", "0")
    for cmd, head in (("XACKDEL", ("s", "g")), ("XDELEX", ("s",))):
        for bad in ("abc", "0", "-5"):
            assert err(rr, cmd, *head, "IDS", bad, "1-1") == "Number of IDs must be a positive integer"
        assert err(rr, cmd, *head, "IDS", "3", "1-1", "2-2") == "The `numids` parameter must match the number of arguments"
        assert err(rr, cmd, *head, "IDS", "1", "1-1", "2-2") == "syntax error"
        for a, b in (("KEEPREF", "DELREF"), ("KEEPREF", "ACKED"), ("DELREF", "ACKED")):
            assert err(rr, cmd, *head, a, b, "IDS", "1", "1-1") == "syntax error"
        assert err(rr, cmd, *head, "IDS", "1", "bad") == "Invalid stream ID specified as stream command argument"
        assert err(rr, cmd, *head, "IDS", "1", "1-0", "ACKED", "ACKED") == "syntax error"
        assert rr.execute_command(cmd, *head, "IDS", "1", "1-0", "DELREF") == [-1 if cmd == "XACKDEL" else 1]
        rr.xadd("s", {"f": "v"}, id="1-1") if cmd == "XACKDEL" else None
    assert err(rr, "XACKDEL", "s", "g") == "wrong number of arguments for 'xackdel' command"
    assert err(rr, "XDELEX", "s", "IDS", "1") == "wrong number of arguments for 'xdelex' command"
    rr.set("str", "v")
    assert err(rr, "XDELEX", "str", "IDS", "1", "1-0") == WRONGTYPE


def test_missing_key_or_group_answers_minus_one(rr):
    assert rr.execute_command("XACKDEL", "s", "g", "IDS", "2", "1-1", "2-2") == [-1, -1]
    assert rr.execute_command("XDELEX", "s", "IDS", "2", "1-1", "2-2") == [-1, -1]
    rr.xadd("s", {"f": "v"}, id="1-0")
    assert rr.execute_command("XACKDEL", "s", "g", "IDS", "2", "1-1", "2-2") == [-1, -1]
    assert rr.exists("s") == 1


def test_xackdel_delref_removes_the_entry_from_every_pel(r):
    two_groups_read_both(r)
    assert r.execute_command("XACKDEL", "s", "g1", "DELREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert r.xlen("s") == 0
    assert pending(r, "g1") == pending(r, "g2") == EMPTY_PENDING
    assert r.execute_command("XACKDEL", "s", "g2", "DELREF", "IDS", "2", "1-0", "2-0") == [-1, -1]


def test_xackdel_acked_deletes_only_what_every_group_acknowledged(r):
    two_groups_read_both(r)
    assert r.execute_command("XACKDEL", "s", "g1", "ACKED", "IDS", "2", "1-0", "2-0") == [2, 2]
    assert r.xlen("s") == 2 and pending(r, "g1") == EMPTY_PENDING
    assert pending(r, "g2") == (2, b"1-0", b"2-0", [(b"c2", 2)])
    assert r.execute_command("XACKDEL", "s", "g2", "ACKED", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert r.xlen("s") == 0 and pending(r, "g2") == EMPTY_PENDING


def test_xackdel_keepref_leaves_the_other_groups_references(r):
    two_groups_read_both(r)
    assert r.execute_command("XACKDEL", "s", "g1", "KEEPREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert r.xlen("s") == 0 and pending(r, "g1") == EMPTY_PENDING
    assert pending(r, "g2") == (2, b"1-0", b"2-0", [(b"c2", 2)])
    assert r.execute_command("XACKDEL", "s", "g2", "IDS", "2", "1-0", "2-0") == [1, 1]  # KEEPREF by default
    assert pending(r, "g2") == EMPTY_PENDING


def test_xdelex_strategies(r):
    two_groups_read_both(r)
    assert r.execute_command("XDELEX", "s", "ACKED", "IDS", "1", "1-0") == [2]  # pending in both groups
    r.xack("s", "g1", "1-0")
    r.xack("s", "g2", "1-0")
    assert r.execute_command("XDELEX", "s", "ACKED", "IDS", "2", "1-0", "9-0") == [1, -1]
    assert r.execute_command("XDELEX", "s", "KEEPREF", "IDS", "1", "2-0") == [1]
    assert pending(r, "g1")[0] == 1  # a dangling reference left behind, as XDEL leaves it
    assert r.execute_command("XDELEX", "s", "DELREF", "IDS", "1", "2-0") == [-1]  # gone, but its refs go too
    assert pending(r, "g1") == pending(r, "g2") == EMPTY_PENDING


def test_xdelex_acked_keeps_what_a_new_group_can_still_deliver(r):
    r.xadd("s", {"f": "v"}, id="1-0")
    r.xgroup_create("s", "g1", "0")
    r.xreadgroup("g1", "c", {"s": ">"})
    r.xack("s", "g1", "1-0")
    r.xgroup_create("s", "late", "0")  # has not read 1-0 yet
    assert r.execute_command("XDELEX", "s", "ACKED", "IDS", "1", "1-0") == [2]
    r.xgroup_setid("s", "late", "$")
    assert r.execute_command("XDELEX", "s", "ACKED", "IDS", "1", "1-0") == [1]
    assert r.execute_command("XDELEX", "s", "IDS", "1", "1-0") == [-1]  # no groups, no refs: plain XDEL


def test_logging_replays_and_events(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    events = Events(srv)
    records = record_journal(srv)
    r = redis.Redis(port=srv.port)
    two_groups_read_both(r)
    records.clear()
    events.take()
    r.execute_command("XACKDEL", "s", "g1", "ACKED", "IDS", "1", "1-0")
    r.execute_command("XDELEX", "s", "IDS", "1", "9-9")  # nothing to do: not logged
    r.execute_command("XDELEX", "s", "DELREF", "IDS", "1", "2-0")
    logged = [argv for effects in records for argv in effects]
    assert logged == [[b"XACKDEL", b"s", b"g1", b"ACKED", b"IDS", b"1", b"1-0"],
                      [b"XDELEX", b"s", b"DELREF", b"IDS", b"1", b"2-0"]]
    assert events.take() == [(b"xdel", b"s")]


def test_writes_invalidate_watch_and_tracking(server):
    r, other = redis.Redis(port=server.port), redis.Redis(port=server.port)
    two_groups_read_both(r)
    with r.pipeline() as pipe:
        pipe.watch("s")
        other.execute_command("XDELEX", "s", "IDS", "1", "1-0")
        pipe.multi()
        pipe.xlen("s")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    me, writer = Raw(server.port), Raw(server.port)
    me.run("CLIENT", "TRACKING", "on")
    me.run("XLEN", "s")
    writer.run("XACKDEL", "s", "g2", "IDS", "1", "2-0")
    assert b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\ns\r\n" in me.read(0.3)
    me.close(), writer.close()


def test_command_metadata(r):
    for name, arity in (("xdelex", -5), ("xackdel", -6)):
        info = r.execute_command("COMMAND", "INFO", name)[name]
        assert (info["arity"], info["flags"], info["acl_categories"]) == (arity, ["write", "fast"],
                                                                           ["@write", "@stream", "@fast"])
    assert r.command_getkeys("XACKDEL", "k", "g", "IDS", "1", "1-0") == ["k"]
    assert {"xdelex", "xackdel"} <= set(r.acl_cat("stream"))
