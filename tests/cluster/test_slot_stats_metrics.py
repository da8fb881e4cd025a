"""CLUSTER SLOT-STATS's counters on a Pion node (``cluster-slot-stats-enabled yes``): which
command's cpu-usec and network bytes count on which slot, and when, with the exact byte counts
of Redis's tests/unit/cluster/slot-stats.tcl (what Pion has: no replicas, so the replication
stream's bytes are not there). The command's shape and errors: test_slot_stats.py."""

from __future__ import annotations

import time

import pytest
import redis

from tests.cluster.test_slot_stats import bare, slot_stats
from tests.conftest import RawConnection
from tests.support.clusters import PionThreadCluster


@pytest.fixture
def node(tmp_path):
    cluster = PionThreadCluster(tmp_path, 1, cluster_slot_stats_enabled="yes")
    yield cluster
    cluster.stop()


@pytest.fixture
def r(node):
    client = bare(node.ports[0])
    client.execute_command("CONFIG", "RESETSTAT")
    yield client
    client.close()


@pytest.fixture
def raw(node):
    conn = RawConnection(node.ports[0])
    yield conn
    conn.close()


def counted(r: redis.Redis, metric: str) -> dict[int, int]:
    """slot -> ``metric`` for the slots where it is not 0."""
    return {slot: stats[metric] for slot, stats in slot_stats(r, "SLOTSRANGE", 0, 16383) if stats[metric]}


def usec(r: redis.Redis, command: str) -> int:
    text = r.execute_command("INFO", "commandstats").decode()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"cmdstat_{command}:"))
    return int(line.split("usec=")[1].split(",")[0])


def wait_blocked(r: redis.Redis, count: int) -> None:
    deadline = time.time() + 10
    while f"blocked_clients:{count}\r" not in r.execute_command("INFO", "clients").decode():
        assert time.time() < deadline, "the client did not (un)block"
        time.sleep(0.01)


def slot(r: redis.Redis, key: str) -> int:
    return r.execute_command("CLUSTER", "KEYSLOT", key)


# -- network-bytes-in ----------------------------------------------------------------------------


def test_bytes_in_multibulk_and_inline(r, raw):
    r.execute_command("SET", "key", "value")  # *3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n
    assert counted(r, "network-bytes-in") == {slot(r, "key"): 33}
    r.execute_command("CONFIG", "RESETSTAT")
    raw.send(b"SET key value\r\n")  # inline: the line and its newline
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    assert counted(r, "network-bytes-in") == {slot(r, "key"): 15}


def test_bytes_in_blocking_command_counts_when_it_ends(r, raw):
    raw.cmd("BLPOP", "key", "0")  # 31 bytes
    wait_blocked(r, 1)
    assert counted(r, "network-bytes-in") == {}
    r.execute_command("LPUSH", "key", "value")  # 35 bytes
    wait_blocked(r, 0)
    assert raw.read_exactly(b"*2\r\n$3\r\nkey\r\n$5\r\nvalue\r\n")
    assert counted(r, "network-bytes-in") == {slot(r, "key"): 66}


def test_bytes_in_transaction(r, raw):
    raw.cmd("MULTI")  # 15 bytes, counted with the EXEC
    raw.cmd("SET", "key", "value")  # 33 bytes, counted when queued
    assert raw.read_exactly(b"+OK\r\n+QUEUED\r\n") == b"+OK\r\n+QUEUED\r\n"
    assert counted(r, "network-bytes-in") == {slot(r, "key"): 33}
    raw.cmd("EXEC")  # 14 bytes
    assert raw.read_exactly(b"*1\r\n+OK\r\n") == b"*1\r\n+OK\r\n"
    assert counted(r, "network-bytes-in") == {slot(r, "key"): 62}


def test_keyless_and_pubsub_commands_count_nowhere(r, raw):
    r.execute_command("INFO")
    raw.cmd("SUBSCRIBE", "channel")
    raw.read_some(0.3)
    r.execute_command("PUBLISH", "channel", "message")
    for refused in (["NOSUCHCOMMAND", "key"], ["GET"]):  # refused before they ran: nowhere either
        with pytest.raises(redis.ResponseError):
            r.execute_command(*refused)
    for metric in ("cpu-usec", "network-bytes-in", "network-bytes-out"):
        assert counted(r, metric) == {}


# -- network-bytes-out ---------------------------------------------------------------------------


def test_bytes_out_reply_and_blocked_reply(r, raw):
    r.execute_command("SET", "FOO", "value")  # +OK\r\n
    assert counted(r, "network-bytes-out") == {slot(r, "FOO"): 5}
    r.execute_command("CONFIG", "RESETSTAT")
    raw.cmd("BLPOP", "key", "0")
    wait_blocked(r, 1)
    assert counted(r, "network-bytes-out") == {}
    r.execute_command("LPUSH", "key", "value")  # :1\r\n, then BLPOP's 24 bytes
    wait_blocked(r, 0)
    assert raw.read_exactly(b"*2\r\n$3\r\nkey\r\n$5\r\nvalue\r\n")
    assert counted(r, "network-bytes-out") == {slot(r, "key"): 28}


def test_bytes_out_sharded_pubsub(r, node):
    sub = RawConnection(node.ports[0])
    try:
        sub.cmd("SSUBSCRIBE", "channel")  # *3\r\n$10\r\nssubscribe\r\n$7\r\nchannel\r\n:1\r\n
        assert sub.read_exactly(b"*3\r\n$10\r\nssubscribe\r\n$7\r\nchannel\r\n:1\r\n")
        assert counted(r, "network-bytes-out") == {slot(r, "channel"): 38}
        sub.cmd("SSUBSCRIBE", "channel2")
        sub.read_exactly(b"*3\r\n$10\r\nssubscribe\r\n$8\r\nchannel2\r\n:2\r\n")
        r.execute_command("CONFIG", "RESETSTAT")
        assert r.execute_command("SPUBLISH", "channel", "hello") == 1  # :1\r\n and the 42-byte smessage
        assert r.execute_command("SPUBLISH", "channel2", "hello") == 1  # :1\r\n and 43 bytes
        assert sub.read_exactly(b"*3\r\n$8\r\nsmessage\r\n$7\r\nchannel\r\n$5\r\nhello\r\n")
        assert counted(r, "network-bytes-out") == {slot(r, "channel"): 46, slot(r, "channel2"): 47}
        assert counted(r, "network-bytes-in") == {slot(r, "channel"): 42, slot(r, "channel2"): 43}
    finally:
        sub.close()


# -- cpu-usec ------------------------------------------------------------------------------------


def test_cpu_of_a_command_is_its_commandstats_usec(r):
    r.execute_command("SET", "FOO", "VALUE")
    cpu = counted(r, "cpu-usec")
    assert cpu == {slot(r, "FOO"): usec(r, "set")} and cpu[slot(r, "FOO")] > 0


def test_cpu_reset_by_resetstat_and_by_slot_ownership(r):
    r.execute_command("CONFIG", "SET", "cluster-require-full-coverage", "no")
    r.execute_command("SET", "FOO", "VALUE")
    r.execute_command("DEL", "FOO")
    assert counted(r, "cpu-usec") and counted(r, "network-bytes-in")
    r.execute_command("CONFIG", "RESETSTAT")
    assert counted(r, "cpu-usec") == counted(r, "network-bytes-in") == counted(r, "network-bytes-out") == {}
    r.execute_command("SET", "FOO", "VALUE")
    r.execute_command("DEL", "FOO")
    foo = slot(r, "FOO")
    r.execute_command("CLUSTER", "DELSLOTS", foo)
    r.execute_command("CLUSTER", "ADDSLOTS", foo)  # the slot's new owner starts at 0
    assert counted(r, "cpu-usec") == counted(r, "network-bytes-in") == {}


def test_cpu_of_a_transaction_is_the_exec(r, raw):
    raw.cmd("MULTI")
    raw.cmd("SET", "FOO", "value")
    raw.cmd("GET", "FOO")
    raw.read_exactly(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n")
    assert counted(r, "cpu-usec") == {}  # nothing ran yet
    raw.cmd("EXEC")
    assert raw.read_exactly(b"*2\r\n+OK\r\n$5\r\nvalue\r\n")
    assert counted(r, "cpu-usec") == {slot(r, "FOO"): usec(r, "exec")}


def test_cpu_of_scripts(r):
    foo = slot(r, "FOO")
    r.execute_command("EVAL", "redis.call('set', 'FOO', 'bar'); return redis.call('get', 'FOO')", 0)
    assert counted(r, "cpu-usec") == {foo: usec(r, "eval")}  # no KEYS: the slot of the keys it touched
    r.execute_command("CONFIG", "RESETSTAT")
    r.execute_command("EVAL", "#!lua flags=allow-cross-slot-keys\nredis.call('set', 'FOO', 'bar'); "
                      "return redis.call('get', 'FOO2')", 0)
    assert counted(r, "cpu-usec") == {}  # cross-slot: counted nowhere
    r.execute_command("CONFIG", "RESETSTAT")
    r.execute_command("FUNCTION", "LOAD", "#!lua name=f1\nredis.register_function{function_name='f1', callback="
                      "function() redis.call('set', 'FOO', '1') return redis.call('get', 'FOO') end}")
    r.execute_command("FCALL", "f1", 0)
    assert counted(r, "cpu-usec") == {foo: usec(r, "fcall")}
    r.execute_command("CONFIG", "RESETSTAT")
    r.execute_command("FUNCTION", "LOAD", "REPLACE", "#!lua name=f1\nredis.register_function{function_name='f1', "
                      "callback=function() redis.call('set', 'FOO', '1') return redis.call('get', 'FOO2') end, "
                      "flags={'allow-cross-slot-keys'}}")
    r.execute_command("FCALL", "f1", 0)
    assert counted(r, "cpu-usec") == {}
    r.execute_command("CONFIG", "RESETSTAT")
    r.execute_command("EVAL", "return redis.call('get', KEYS[1])", 1, "FOO")  # declared: the KEYS' slot
    assert counted(r, "cpu-usec") == {foo: usec(r, "eval")}


def test_cpu_of_a_blocked_command_counts_when_it_ends(r, raw):
    raw.cmd("BLPOP", "FOO", "0")
    wait_blocked(r, 1)
    assert counted(r, "cpu-usec") == {}  # as INFO commandstats: nothing until it ends
    r.execute_command("LPUSH", "FOO", "value")
    wait_blocked(r, 0)
    raw.read_exactly(b"*2\r\n$3\r\nFOO\r\n$5\r\nvalue\r\n")
    cpu = counted(r, "cpu-usec")
    assert set(cpu) == {slot(r, "FOO")}
    # its first try and the try that served it (commandstats has the first only) and the LPUSH
    assert cpu[slot(r, "FOO")] >= usec(r, "lpush") + usec(r, "blpop")
    r.execute_command("CONFIG", "RESETSTAT")
    raw.cmd("BLPOP", "FOO", "0.05")  # ends on its timeout
    raw.read_exactly(b"*-1\r\n")
    assert set(counted(r, "cpu-usec")) == {slot(r, "FOO")}
    assert counted(r, "network-bytes-in") == {slot(r, "FOO"): 34}
    assert counted(r, "network-bytes-out") == {slot(r, "FOO"): 5}


def test_nothing_is_counted_while_the_setting_is_off(r):
    r.execute_command("CONFIG", "SET", "cluster-slot-stats-enabled", "no")
    r.execute_command("SET", "FOO", "value")
    r.execute_command("CONFIG", "SET", "cluster-slot-stats-enabled", "yes")
    foo = slot(r, "FOO")
    assert slot_stats(r, "SLOTSRANGE", foo, foo) == [
        (foo, {"key-count": 1, "cpu-usec": 0, "network-bytes-in": 0, "network-bytes-out": 0})]
    r.execute_command("GET", "FOO")  # *2\r\n$3\r\nGET\r\n$3\r\nFOO\r\n, $5\r\nvalue\r\n
    assert counted(r, "network-bytes-in") == {foo: 22}
    assert counted(r, "network-bytes-out") == {foo: 11}


def test_bytes_out_of_a_streamed_reply(r, raw):
    """A large array goes out a piece per loop turn (pion.protocol.streamed): every piece counts."""
    from pion.protocol.streamed import STREAM_MIN

    items = [b"v%d" % i for i in range(STREAM_MIN * 3)]
    r.execute_command("RPUSH", "FOO", *items)
    r.execute_command("CONFIG", "RESETSTAT")
    raw.cmd("LRANGE", "FOO", "0", "-1")
    expected = b"*%d\r\n" % len(items) + b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in items)
    assert raw.read_exactly(expected) == expected
    assert counted(r, "network-bytes-out") == {slot(r, "FOO"): len(expected)}
