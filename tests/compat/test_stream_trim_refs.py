"""Redis 8.2's reference policies of XADD and XTRIM trimming (KEEPREF, DELREF, ACKED) over the
wire, and the option parser they share (Redis's streamParseAddOrTrimArgsOrReply). No 8.x server
runs here: the expectations are the documented semantics (the XTRIM/XADD command pages) and the
scenario of Redis's stream.tcl for ACKED under ``~``; the parser's 7.x cases are checked against
redis-server 7.0.15 in ``test_parser_matches_the_reference_server``."""

from __future__ import annotations

import redis

from tests.compat.test_sets import err, record_journal
from tests.compat.test_stream_deletes import EMPTY_PENDING, pending


def ids(r, key: str = "s") -> list[bytes]:
    return [sid for sid, _ in r.xrange(key)]


def four_entries_two_groups(r) -> None:
    """1-0..4-0; g1 read all four and acked 1-0 and 2-0; g2 read 1-0..3-0 and acked 1-0."""
    r.delete("s")
    for n in range(1, 5):
        r.xadd("s", {"f": "v"}, id=f"{n}-0")
    r.xgroup_create("s", "g1", "0")
    r.xgroup_create("s", "g2", "0")
    r.xreadgroup("g1", "c1", {"s": ">"})
    r.xreadgroup("g2", "c2", {"s": ">"}, count=3)
    r.xack("s", "g1", "1-0", "2-0")
    r.xack("s", "g2", "1-0")


def test_redis_py_scenario_without_groups(rr):
    """Without consumer groups the three policies trim alike (redis-py's own test)."""
    for policy in ("KEEPREF", "KEEPREF", "KEEPREF", "DELREF", "ACKED"):
        rr.execute_command("XADD", "s", policy, "MAXLEN", "=", 2, "*", "foo", "bar")
    assert rr.xlen("s") == 2
    for policy in ("KEEPREF", "DELREF", "ACKED"):
        rr.xadd("s", {"foo": "bar"})
        rr.xadd("s", {"foo": "bar"})
        assert rr.execute_command("XTRIM", "s", "MAXLEN", 2, policy) == 2
    assert err(rr, "XTRIM", "s", "MAXLEN", 2, "INVALID") == "syntax error"


def test_keepref_leaves_dangling_references(r):
    four_entries_two_groups(r)
    assert r.execute_command("XTRIM", "s", "MAXLEN", 1, "KEEPREF") == 3
    assert ids(r) == [b"4-0"]
    assert pending(r, "g2") == (2, b"2-0", b"3-0", [(b"c2", 2)])  # the PEL still names 2-0 and 3-0
    history = r.xreadgroup("g2", "c2", {"s": "0"})
    assert history == [[b"s", [(b"2-0", {}), (b"3-0", {})]]]  # nil bodies (redis-py maps them to {})


def test_delref_removes_the_references_from_every_pel(r):
    four_entries_two_groups(r)
    assert r.execute_command("XTRIM", "s", "MAXLEN", 1, "DELREF") == 3
    assert ids(r) == [b"4-0"]
    assert pending(r, "g2") == EMPTY_PENDING
    assert pending(r, "g1") == (1, b"4-0", b"4-0", [(b"c1", 1)])  # 3-0 went with its entry, 4-0 stays
    assert r.execute_command("XADD", "s", "DELREF", "MINID", "5-0", "5-0", "f", "v") == b"5-0"
    assert ids(r) == [b"5-0"] and pending(r, "g1") == EMPTY_PENDING


def test_acked_trims_only_what_no_group_needs_and_skips_the_rest(r):
    four_entries_two_groups(r)
    # 1-0: acked by both -> goes; 2-0, 3-0: pending in g2; 4-0: not delivered to g2 yet
    assert r.execute_command("XTRIM", "s", "MAXLEN", 0, "ACKED") == 1
    assert ids(r) == [b"2-0", b"3-0", b"4-0"]
    r.xack("s", "g1", "3-0")
    r.xack("s", "g2", "3-0")
    assert r.execute_command("XTRIM", "s", "MAXLEN", 0, "ACKED") == 1  # 3-0 goes, 2-0 is skipped
    assert ids(r) == [b"2-0", b"4-0"]
    assert pending(r, "g2") == (1, b"2-0", b"2-0", [(b"c2", 1)])


def test_acked_stops_at_maxlen_and_at_minid(r):
    r.xadd("s", {"f": "v"}, id="1-0")
    r.xadd("s", {"f": "v"}, id="2-0")
    r.xadd("s", {"f": "v"}, id="3-0")
    r.xgroup_create("s", "g", "$")  # nothing left to deliver, nothing pending: all acknowledged
    assert r.execute_command("XTRIM", "s", "MAXLEN", 2, "ACKED") == 1
    assert ids(r) == [b"2-0", b"3-0"]
    assert r.execute_command("XTRIM", "s", "MINID", "3-0", "ACKED") == 1
    assert ids(r) == [b"3-0"]
    r.xgroup_create("s", "late", "0")  # 3-0 not delivered to it: referenced
    assert r.execute_command("XTRIM", "s", "MAXLEN", 0, "ACKED") == 0
    # XADD: the new entry is referenced (no group has read it), the old one is trimmed once
    # every group has it acknowledged
    r.xreadgroup("late", "c", {"s": ">"})
    r.xack("s", "late", "3-0")
    assert r.execute_command("XADD", "s", "ACKED", "MAXLEN", 0, "4-0", "f", "v") == b"4-0"
    assert ids(r) == [b"4-0"]


def test_acked_under_approximation_trims_eligible_nodes_entry_by_entry(make_server):
    """Redis's stream.tcl scenario (8.2, fixed in 8.4.x): with nodes of two entries, a node whose
    entries are all acknowledged goes, the next (not acknowledged) stays."""
    srv = make_server(stream_node_max_entries=2)
    r = redis.Redis(port=srv.port)
    for n in range(1, 5):
        r.xadd("s", {"f": "v"}, id=f"{n}-0")
    r.xgroup_create("s", "g", "0")
    r.xreadgroup("g", "c", {"s": ">"})
    r.xack("s", "g", "1-0", "2-0")
    assert r.execute_command("XTRIM", "s", "MINID", "~", "5-0", "ACKED") == 2
    assert ids(r) == [b"3-0", b"4-0"]
    r.xack("s", "g", "3-0")
    assert r.execute_command("XTRIM", "s", "MAXLEN", "~", 0, "ACKED") == 1  # 4-0 still pending
    assert ids(r) == [b"4-0"]


def test_policy_position_and_repetition(r):
    for n in range(1, 4):
        r.xadd("s", {"f": "v"}, id=f"{n}-0")
    r.xgroup_create("s", "g", "0")
    assert r.execute_command("XTRIM", "s", "ACKED", "MAXLEN", 0) == 0  # nothing delivered yet
    assert r.execute_command("XTRIM", "s", "ACKED", "MAXLEN", 2, "KEEPREF") == 1  # the last one given wins
    assert r.execute_command("XADD", "s", "DELREF", "NOMKSTREAM", "MAXLEN", 2, "4-0", "f", "v") == b"4-0"
    assert ids(r) == [b"3-0", b"4-0"]
    assert err(r, "XTRIM", "s", "MAXLEN", 2, "ACKED", "bogus") == "syntax error"
    assert err(r, "XTRIM", "s", "ACKED", "KEEPREF") == "syntax error, XTRIM must be called with a trimming strategy"
    assert err(r, "XADD", "s", "ACKED", "bad-id", "f", "v") == \
        "Invalid stream ID specified as stream command argument"


def test_what_is_logged_replays_to_the_same_stream_and_pels(make_server):
    first, second = make_server(), make_server()
    records = record_journal(first)
    r = redis.Redis(port=first.port)
    four_entries_two_groups(r)
    r.xack("s", "g1", "3-0")
    r.xack("s", "g2", "3-0")
    assert r.execute_command("XTRIM", "s", "MAXLEN", 0, "ACKED") == 2  # 1-0 and 3-0
    assert r.execute_command("XADD", "s", "DELREF", "MAXLEN", 2, "5-0", "f", "v") == b"5-0"
    logged = [argv for effects in records for argv in effects]
    trims = [argv for argv in logged if argv[0] == b"XTRIM"]
    assert trims == [[b"XTRIM", b"s", b"MINID", b"=", b"3-1", b"ACKED"],
                     [b"XTRIM", b"s", b"MINID", b"=", b"4-0", b"DELREF"]]
    copy = redis.Redis(port=second.port)
    for argv in logged:
        copy.execute_command(*argv)
    assert ids(copy) == ids(r) == [b"4-0", b"5-0"]
    for group in ("g1", "g2"):
        assert pending(copy, group) == pending(r, group)


def test_parser_matches_the_reference_server(r, redis_ref):
    """The 7.x parts of the shared option parser, reply for reply against redis-server 7.0.15."""
    cases = [
        ("XADD", "s", "1-1", "a", "1"), ("XADD", "s", "2-1", "a", "1"), ("XADD", "s", "3-1", "a", "1"),
        ("XADD", "s", "MAXLEN", 1, "MINID", 0, "4-1", "a", "1"), ("XADD", "s", "MAXLEN", 1, "MAXLEN", 2, "4-1", "a", "1"),
        ("XTRIM", "s", "MAXLEN", 1, "MINID", 0), ("XTRIM", "s", "LIMIT", 10, "MAXLEN", "~", 1),
        ("XTRIM", "s", "MAXLEN", 2, "LIMIT", 5), ("XTRIM", "s", "LIMIT", 5), ("XTRIM", "s", "NOMKSTREAM", "MAXLEN", 1),
        ("XTRIM", "s", "MAXLEN", 2, "bogus"), ("XADD", "s", "LIMIT", 5, "*", "a", "1"),
        ("XADD", "s", "MAXLEN", "~", 2, "LIMIT", 0, "5-1", "a", "1"), ("XADD", "s", "bogus", "a", "b", "c"),
        ("XADD", "s", "0-0", "a", "b"), ("XADD", "s", "MAXLEN", -1, "6-1", "a", "b"),
        ("XADD", "s", "MINID", "bad", "6-1", "a", "b"), ("XADD", "s", "MAXLEN", "~", "6-1", "a", "b"),
        ("XADD", "s", "MAXLEN", "=", 1, "7-1", "a", "b"), ("XRANGE", "s", "-", "+"), ("XTRIM", "s", "MAXLEN", "="),
        ("XADD", "s", "8-*", "a", "b"), ("XADD", "s", "8-x", "a", "b"), ("XTRIM", "s", "MINID", "=", "8-0"),
        ("XRANGE", "s", "-", "+"),
    ]
    theirs = redis.Redis(port=redis_ref.port)
    theirs.delete("s")

    def reply(client, argv):
        try:
            return client.execute_command(*argv)
        except redis.ResponseError as exc:
            return ("error", str(exc))

    for argv in cases:
        assert reply(r, argv) == reply(theirs, argv), argv
    theirs.delete("s")


def test_command_docs_list_the_policies(raw):
    for name in ("xadd", "xtrim"):
        raw.cmd("COMMAND", "DOCS", name)
        docs = raw.read_some()
        assert b"KEEPREF" in docs and b"DELREF" in docs and b"ACKED" in docs and b"8.2.0" in docs, name
