"""CLUSTER SLOT-STATS (Redis 8.2+) on a Pion node: the reply's shape in RESP2 and RESP3, every
error text of Redis's cluster_slot_stats.c, key-count, SLOTSRANGE and ORDERBY as Redis's
tests/unit/cluster/slot-stats.tcl checks them, the ``cluster-slot-stats-enabled`` setting and
the command's COMMAND INFO / DOCS entry. The counters themselves: test_slot_stats_metrics.py.

No diff against a reference server: the redis-server the suite installs (Debian's 7.0) has no
SLOT-STATS, so the expected replies are written out from Redis's source and its tcl test."""

from __future__ import annotations

import pytest
import redis

from tests.conftest import RawConnection
from tests.support.clusters import PionThreadCluster
from tests.support.servers import ThreadServer, make_settings

METRICS = ["key-count", "cpu-usec", "network-bytes-in", "network-bytes-out"]


@pytest.fixture
def node(tmp_path):
    cluster = PionThreadCluster(tmp_path, 1, cluster_slot_stats_enabled="yes")
    yield cluster
    cluster.stop()


@pytest.fixture
def plain(tmp_path):
    cluster = PionThreadCluster(tmp_path, 1)
    yield cluster
    cluster.stop()


def bare(port: int, protocol: int = 2) -> redis.Redis:
    """redis-py without its reply parsers (its CLUSTER and COMMAND ones reshape the replies)."""
    r = redis.Redis(port=port, protocol=protocol)
    r.response_callbacks.clear()
    return r


def slot_stats(r: redis.Redis, *args) -> list[tuple[int, dict[str, int]]]:
    """The reply as [(slot, {metric: value})], in reply order, from either protocol's shape."""
    out = []
    for slot, stats in r.execute_command("CLUSTER", "SLOT-STATS", *args):
        if isinstance(stats, list):
            stats = dict(zip(stats[::2], stats[1::2], strict=True))
        out.append((slot, {k.decode(): v for k, v in stats.items()}))
    return out


def test_reply_shape_resp2_and_resp3(node):
    conn = RawConnection(node.ports[0])
    try:
        conn.send(b"CLUSTER SLOT-STATS SLOTSRANGE 0 1\r\n")
        entry = lambda slot, head: (b"*2\r\n:%d\r\n" % slot + head + b"$9\r\nkey-count\r\n:0\r\n$8\r\ncpu-usec\r\n:0\r\n"  # noqa: E731
                                    b"$16\r\nnetwork-bytes-in\r\n:0\r\n$17\r\nnetwork-bytes-out\r\n:0\r\n")
        expected = b"*2\r\n" + entry(0, b"*8\r\n") + entry(1, b"*8\r\n")
        assert conn.read_exactly(expected) == expected
        conn.send(b"HELLO 3\r\n")
        conn.read_some(0.5)
        conn.send(b"CLUSTER SLOT-STATS SLOTSRANGE 0 1\r\n")
        expected = b"*2\r\n" + entry(0, b"%4\r\n") + entry(1, b"%4\r\n")  # each slot's stats a map
        assert conn.read_exactly(expected) == expected
        conn.send(b"CONFIG SET cluster-slot-stats-enabled no\r\n")
        assert conn.read_exactly(b"+OK\r\n") == b"+OK\r\n"
        conn.send(b"CLUSTER SLOT-STATS ORDERBY key-count LIMIT 1\r\n")
        expected = b"*1\r\n*2\r\n:0\r\n%1\r\n$9\r\nkey-count\r\n:0\r\n"  # off: key-count alone
        assert conn.read_exactly(expected) == expected
    finally:
        conn.close()


def test_disabled_setting_key_count_only_and_no_orderby_on_counters(plain):
    r = bare(plain.ports[0])
    assert r.config_get("cluster-slot-stats-enabled") == [b"cluster-slot-stats-enabled", b"no"]
    r.set("FOO", "x")
    slot = r.cluster("keyslot", "FOO")
    assert slot_stats(r, "SLOTSRANGE", slot, slot) == [(slot, {"key-count": 1})]
    for metric in METRICS[1:]:
        with pytest.raises(redis.ResponseError, match=r"^Unrecognized sort metric for ORDERBY\.$"):
            r.execute_command("CLUSTER", "SLOT-STATS", "ORDERBY", metric)
    assert slot_stats(r, "ORDERBY", "KEY-COUNT", "LIMIT", 1) == [(slot, {"key-count": 1})]
    r.config_set("cluster-slot-stats-enabled", "yes")
    assert r.config_get("cluster-slot-stats-enabled") == [b"cluster-slot-stats-enabled", b"yes"]
    assert slot_stats(r, "ORDERBY", "cpu-usec", "LIMIT", 1)[0][1].keys() == set(METRICS)
    with pytest.raises(redis.ResponseError, match="argument must be 'yes' or 'no'"):
        r.config_set("cluster-slot-stats-enabled", "maybe")


@pytest.mark.parametrize(("args", "error"), [
    (["ORDERBY", "key-count", "non-existent-arg"], "syntax error"),
    (["ORDERBY", "key-count", "DESC", "LIMIT", "-1"], "Limit has to lie in between 1 and 16384 (maximum number of slots)."),
    (["ORDERBY", "key-count", "LIMIT", "0"], "Limit has to lie in between 1 and 16384 (maximum number of slots)."),
    (["ORDERBY", "key-count", "LIMIT", "16385"], "Limit has to lie in between 1 and 16384 (maximum number of slots)."),
    (["ORDERBY", "key-count", "LIMIT", "abc"], "Limit has to lie in between 1 and 16384 (maximum number of slots)."),
    (["ORDERBY", "key-count", "LIMIT"], "syntax error"),  # LIMIT without a value is not LIMIT
    (["ORDERBY", "key-count", "LIMIT", "1", "LIMIT", "2"], "Multiple filters of the same type are disallowed."),
    (["ORDERBY", "key-count", "ASC", "DESC"], "Multiple filters of the same type are disallowed."),
    (["ORDERBY", "non-existent-metric"], "Unrecognized sort metric for ORDERBY."),
    (["SLOTSRANGE", "5", "1"], "Start slot number 5 is greater than end slot number 1"),
    (["SLOTSRANGE", "0", "16384"], "Invalid or out of range slot"),
    (["SLOTSRANGE", "-1", "3"], "Invalid or out of range slot"),
    (["SLOTSRANGE", "x", "3"], "Invalid or out of range slot"),
    (["SLOTSRANGE", "0", "1", "2"], "unknown subcommand or wrong number of arguments for 'SLOT-STATS'. Try CLUSTER HELP."),
    (["SLOTS", "0", "1"], "unknown subcommand or wrong number of arguments for 'SLOT-STATS'. Try CLUSTER HELP."),
])
def test_errors_as_redis(node, args, error):
    r = bare(node.ports[0])
    with pytest.raises(redis.ResponseError) as info:
        r.execute_command("CLUSTER", "SLOT-STATS", *args)
    assert str(info.value) == error


def test_arity_and_cluster_disabled(tmp_path, node):
    r = bare(node.ports[0])
    with pytest.raises(redis.ResponseError, match=r"^wrong number of arguments for 'cluster\|slot-stats' command$"):
        r.execute_command("CLUSTER", "SLOT-STATS", "ORDERBY")
    server = ThreadServer(make_settings(tmp_path / "standalone")).start()
    try:
        s = redis.Redis(port=server.port)
        with pytest.raises(redis.ResponseError, match="^This instance has cluster support disabled$"):
            s.execute_command("CLUSTER", "SLOT-STATS", "SLOTSRANGE", 0, 1)
    finally:
        server.stop()


def test_key_count_follows_the_keyspace(node):
    """slot-stats.tcl's key-count cases: startup, a new key, a mutation, a deletion, an expiry."""
    r = bare(node.ports[0])
    slot = r.cluster("keyslot", "FOO")
    assert all(s["key-count"] == 0 for _, s in slot_stats(r, "SLOTSRANGE", 0, 16383))
    r.set("FOO", "TEST")
    r.set("{FOO}2", "x")
    assert [(n, s["key-count"]) for n, s in slot_stats(r, "SLOTSRANGE", slot, slot)] == [(slot, 2)]
    r.set("FOO", "NEW_VALUE")
    assert slot_stats(r, "SLOTSRANGE", slot, slot)[0][1]["key-count"] == 2
    r.delete("FOO")
    assert slot_stats(r, "SLOTSRANGE", slot, slot)[0][1]["key-count"] == 1
    r.pexpire("{FOO}2", 1)
    import time
    time.sleep(0.05)  # expired, not yet removed: not counted, as CLUSTER COUNTKEYSINSLOT
    assert slot_stats(r, "SLOTSRANGE", slot, slot)[0][1]["key-count"] == r.cluster("countkeysinslot", slot) == 0
    assert sum(s["key-count"] for _, s in slot_stats(r, "SLOTSRANGE", 0, 16383)) == 0


def test_only_my_slots_are_listed(node):
    r = bare(node.ports[0])
    r.config_set("cluster-require-full-coverage", "no")
    assert [n for n, _ in slot_stats(r, "SLOTSRANGE", 100, 102)] == [100, 101, 102]
    r.execute_command("CLUSTER", "DELSLOTS", 100)
    assert [n for n, _ in slot_stats(r, "SLOTSRANGE", 100, 102)] == [101, 102]
    everything = slot_stats(r, "SLOTSRANGE", 0, 16383)
    assert len(everything) == 16383 and 100 not in {n for n, _ in everything}
    assert [n for n, _ in everything] == sorted(n for n, _ in everything)
    assert len(slot_stats(r, "ORDERBY", "key-count")) == 16383  # no LIMIT: every slot I own
    r.execute_command("CLUSTER", "ADDSLOTS", 100)
    assert len(slot_stats(r, "SLOTSRANGE", 0, 16383)) == 16384


def test_orderby_order_ties_and_limit(node):
    r = bare(node.ports[0])
    for n, tag in enumerate("01234", start=1):  # n keys in the slot of {tag}
        for i in range(n):
            r.set(f"{i}{{{tag}}}", "VALUE")
    tagged = [r.cluster("keyslot", tag) for tag in "01234"]
    top = slot_stats(r, "ORDERBY", "key-count", "LIMIT", 5)  # DESC by default
    assert [(n, s["key-count"]) for n, s in top] == [(tagged[i], i + 1) for i in (4, 3, 2, 1, 0)]
    bottom = slot_stats(r, "ORDERBY", "key-count", "ASC", "LIMIT", 3)  # options in any order
    assert [n for n, _ in bottom] == [n for n in range(16384) if n not in tagged][:3]  # ties: slot order
    for metric in METRICS:
        for order in ("DESC", "ASC"):
            values = [s[metric] for _, s in slot_stats(r, "ORDERBY", metric, order)]
            assert values == sorted(values, reverse=order == "DESC") and len(values) == 16384
    r.flushall()
    r.config_resetstat()
    for metric in METRICS:  # all zero: ordered by slot whichever way
        for order in ("DESC", "ASC"):
            assert [n for n, _ in slot_stats(r, "ORDERBY", metric, "LIMIT", 5, order)] == [0, 1, 2, 3, 4]


def test_limit_above_the_slots_i_own(node):
    r = bare(node.ports[0])
    r.config_set("cluster-require-full-coverage", "no")
    r.execute_command("CLUSTER", "FLUSHSLOTS")
    r.execute_command("CLUSTER", "ADDSLOTS", 101, 100)
    for metric in METRICS:
        for order in ("DESC", "ASC"):
            assert [n for n, _ in slot_stats(r, "ORDERBY", metric, "LIMIT", 5, order)] == [100, 101]
    assert slot_stats(r, "SLOTSRANGE", 0, 16383) == slot_stats(r, "ORDERBY", "key-count", "ASC")


def test_command_info_and_docs(node):
    r = bare(node.ports[0])
    info = r.execute_command("COMMAND", "INFO", "CLUSTER|SLOT-STATS")[0]
    assert info[:6] == [b"cluster|slot-stats", -4, [b"loading", b"stale"], 0, 0, 0]
    assert info[6] == [b"@slow"]
    assert info[7] == [b"nondeterministic_output", b"request_policy:all_shards"]
    docs = r.execute_command("COMMAND", "DOCS", "CLUSTER|SLOT-STATS")
    doc = dict(zip(docs[1][::2], docs[1][1::2], strict=True))
    assert doc[b"since"] == b"8.2.0" and doc[b"group"] == b"cluster"
    assert doc[b"summary"] == b"Return an array of slot usage statistics for slots assigned to the current node."
    filter_arg = dict(zip(doc[b"arguments"][0][::2], doc[b"arguments"][0][1::2], strict=True))
    assert filter_arg[b"name"] == b"filter" and filter_arg[b"type"] == b"oneof"
    subs = r.execute_command("COMMAND", "INFO", "CLUSTER")[0][9]
    assert b"cluster|slot-stats" in [sub[0] for sub in subs]
