"""The request fast lane (``pion.server.fastlane``) against the dispatcher's generic path.

The same pipelined batches go to two in-process servers, one with the lane and one with the lane
closed (every command through ``Dispatcher.execute``): the reply bytes, INFO commandstats and
errorstats, the latency histograms' counts, the slow log's length and the keyspace must be the
same. The compiled lane (``pion.server._fastlane``, built by setup.py) is checked against the
pure module the same way; under CI a missing build fails (CI runs the compiled build).
"""

from __future__ import annotations

import asyncio
import os

import pytest

from pion.config import settings_from_pairs
from pion.server import fastlane
from pion.server.admin.latency import MAX_NS, Histogram
from pion.server.net.connection import Connection
from pion.server.run import make_server


class _Transport:
    """Collects what the server writes; reports nothing buffered (flow control never pauses)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data) -> None:
        self.data += data

    def writelines(self, buffers) -> None:
        for buffer in buffers:
            self.data += buffer

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, **limits) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 1974)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _frames(commands: list[list[bytes]]) -> bytes:
    return b"".join(b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)
                    for argv in commands)


def _cmds(text: str) -> list[list[bytes]]:
    return [line.encode().split() for line in text.strip().splitlines()]


#: pipelined reads: hot commands (right, wrong arity, wrong type, bad numbers, any spelling) mixed
#: with commands that change what the lane may do (MULTI, SELECT, CONFIG SET, HELLO, TRACKING)
BATCHES = [
    """
    SET k v
    GET k
    get k
    Get k
    GET missing
    GET
    SET
    INCR n
    INCR k
    incrby n 5
    DECR n
    HSET h f v f2 v2
    HGET h f
    HMGET h f nope f2
    HINCRBY h f 1
    LPUSH l a b c
    RPOP l
    LPOP l
    LRANGE l 0 -1
    SADD s a b a
    SISMEMBER s a
    ZADD z 1 a 2 b
    ZADD z nope a
    ZSCORE z b
    ZRANGE z 0 -1 WITHSCORES
    LPUSH h x
    SET e v EX 100
    TTL e
    SET e v EX nope
    MSET m1 1 m2 2
    MGET m1 m2 m3
    APPEND a xyz
    STRLEN a
    EXISTS k a nope
    TYPE h
    PING
    ECHO hi
    NOSUCH x
    DEL k m1
    """,
    """
    MULTI
    SET t1 v
    INCR n
    GET t1
    EXEC
    SET after 1
    SELECT 1
    SET k 9
    GET k
    SELECT 0
    GET k
    WATCH n
    INCR n
    MULTI
    INCR n
    EXEC
    """,
    """
    CONFIG SET slowlog-log-slower-than 0
    SET slow 1
    GET slow
    SLOWLOG LEN
    CONFIG SET slowlog-log-slower-than -1
    CONFIG SET maxmemory 1000000000
    SET mm 1
    CONFIG SET maxmemory 0
    SET mm 2
    """,
    """
    HELLO 3
    CLIENT TRACKING ON
    GET k
    SET k other
    GET k
    CLIENT TRACKING OFF
    HGETALL h
    SMEMBERS s
    ZRANGE z 0 -1 WITHSCORES
    KEYS *
    """,
]

#: scripts (EVAL, EVALSHA, FCALL take the lane): replies, errors raised and returned, the calls inside
SCRIPTS = [
    [b"EVAL", b"return redis.call('incr', KEYS[1])", b"1", b"n"],
    [b"EVAL", b"return redis.call('get', KEYS[1])", b"1", b"k"],
    [b"EVAL", b"return redis.call('lpush', KEYS[1], ARGV[1])", b"1", b"h", b"x"],
    [b"EVAL", b"return redis.pcall('incr', KEYS[1])", b"1", b"h"],
    [b"EVAL", b"return {1, 'two', {3}}", b"0"],
    [b"EVAL", b"syntax error here", b"0"],
    [b"EVAL", b"return 1", b"-1"],
    [b"EVALSHA", b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db", b"0"],
    [b"SCRIPT", b"LOAD", b"return ARGV[1]"],
    [b"EVALSHA", b"2a1e6d1d7c6b5b5bc6c1d6f7bb3a5fbc37e2a2d2", b"0", b"x"],
    [b"EVAL_RO", b"return redis.call('set', 'k', 'v')", b"0"],
    [b"FUNCTION", b"LOAD", b"#!lua name=lib\nredis.register_function('f', function(k, a) return redis.call('incr', k[1]) end)"],
    [b"FCALL", b"f", b"1", b"n"],
    [b"FCALL", b"nope", b"0"],
]

#: replies the connection streams (a list past STREAM_MIN) and a batch whose replies pass the
#: connection's high-water mark (flushed in the middle of the batch)
BIG = [
    [b"RPUSH", b"big", *(b"%d" % i for i in range(40_000))],
    [b"LRANGE", b"big", b"0", b"-1"],
    [b"LLEN", b"big"],
    [b"SET", b"blob", b"x" * 300_000],
    *([b"GET", b"blob"] for _ in range(8)),
    [b"DEL", b"big", b"blob"],
]

#: what INFO and the slow log say after the batches (times left out: they differ from run to run)
FINAL = _cmds("""
HELLO 2
SLOWLOG LEN
DBSIZE
""")


def _stats(server) -> dict:
    commandstats = {name: (calls, rejected, failed)
                    for name, (calls, _usec, rejected, failed) in server.dispatcher.stats.items()}
    histograms = {name: h.total for name, h in server.latency.histograms.items()}
    return {"commandstats": commandstats, "errorstats": dict(server.error_stats), "histograms": histograms,
            "numcommands": server.stat_numcommands, "failed": server.stat_failed, "rejected": server.stat_rejected,
            "keys": sorted(server.dbs[0].data), "keys1": sorted(server.dbs[1].data)}


async def _session(tmp_path, lane: str) -> tuple[bytes, dict, int]:
    """Run BATCHES on a fresh server; ``lane``: "closed", "pure" or "compiled"."""
    work = tmp_path / lane
    work.mkdir()
    server = make_server(settings_from_pairs([("port", "0"), ("dir", str(work)), ("appendonly", "no"),
                                                ("slowlog-log-slower-than", "-1")]))
    await server.start()
    try:
        if lane == "closed":
            server.lane.admits = lambda client: False
        else:
            cls = fastlane.FastLane if lane == "pure" else _compiled_class()
            server.lane = cls(server)
        generic = 0  # commands that went through Dispatcher.execute
        execute = server.dispatcher.execute

        def counting(client, argv):
            nonlocal generic
            generic += 1
            return execute(client, argv)

        server.dispatcher.execute = counting
        conn = Connection(server)
        transport = _Transport()
        conn.connection_made(transport)
        for batch in [*BATCHES, SCRIPTS, BIG, FINAL]:
            conn.data_received(_frames(_cmds(batch) if isinstance(batch, str) else batch))
            for _ in range(50):  # a streamed reply is written one piece per loop turn
                await asyncio.sleep(0)
        return bytes(transport.data), _stats(server), generic
    finally:
        await server.stop()


def test_the_lane_answers_and_counts_as_the_dispatcher(tmp_path):
    replies, stats, generic = asyncio.run(_session(tmp_path, "closed"))
    lane_replies, lane_stats, lane_generic = asyncio.run(_session(tmp_path, "pure"))
    sent = sum(len(_cmds(batch)) for batch in BATCHES) + len(SCRIPTS) + len(BIG) + len(FINAL)
    assert generic == sent  # closed: every command went the generic way
    assert generic - lane_generic > 40  # open: the lane ran most of them
    assert lane_replies == replies
    assert lane_stats == stats
    assert b"NOPERM" not in replies and b"WRONGTYPE" in replies and b"-ERR unknown command 'NOSUCH'" in replies


def test_the_lanes_histogram_buckets_are_the_histograms():
    """The lane fills a command's latency histogram inline: the same buckets as Histogram.record."""
    assert fastlane.MAX_NS == MAX_NS
    values = [0, 1, 2, 15, 16, 17, 31, 32, 33, 1000, 4095, 4096, 123_456, 999_999_999, MAX_NS, MAX_NS + 1, 5 * MAX_NS]
    for ns in values:
        reference, inline = Histogram(), Histogram()
        reference.record(ns)
        inline.sum_ns += ns
        inline.counts[fastlane.bucket(ns)] += 1
        inline.total += 1
        assert (inline.counts, inline.total, inline.sum_ns) == (reference.counts, reference.total, reference.sum_ns), ns


def _compiled_class():
    """The compiled lane's class (whatever PION_PURE says: this test compares the two)."""
    try:
        from pion.server import _fastlane
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs the compiled build: pion.server._fastlane is missing")
        pytest.skip("the compiled lane is not built (setup.py build_ext --inplace)")
    return _fastlane.FastLane


def test_the_compiled_lane_is_the_pure_one(tmp_path):
    assert _compiled_class() is not fastlane.FastLane
    from pion.server import _fastlane  # the sentinels the connection compares are the pure module's

    assert _fastlane.REPLY is fastlane.REPLY and _fastlane.FULL is fastlane.FULL
    pure = asyncio.run(_session(tmp_path, "pure"))
    compiled = asyncio.run(_session(tmp_path, "compiled"))
    assert compiled == pure


def test_lane_class_follows_pion_pure(monkeypatch):
    monkeypatch.setenv(fastlane.PURE_ENV, "1")
    assert fastlane.lane_class() is fastlane.FastLane
    assert "pure Python (PION_PURE=1)" in fastlane.implementation()
    monkeypatch.delenv(fastlane.PURE_ENV)
    if fastlane._compiled() is not None:
        assert fastlane.lane_class() is not fastlane.FastLane and "compiled" in fastlane.implementation()


async def _acl_session(tmp_path) -> tuple[bytes, bytes, object, object]:
    server = make_server(settings_from_pairs([("port", "0"), ("dir", str(tmp_path)), ("appendonly", "no")]))
    await server.start()
    try:
        app, admin = Connection(server), Connection(server)
        app_out, admin_out = _Transport(), _Transport()
        app.connection_made(app_out)
        admin.connection_made(admin_out)
        admin.data_received(_frames(_cmds("ACL SETUSER app on nopass +@all ~* &*")))
        app.data_received(_frames(_cmds("AUTH app x\nSET k v\nGET k")))
        before = app.client.acl_verdict
        admin.data_received(_frames(_cmds("ACL SETUSER app -set")))
        app.data_received(_frames(_cmds("SET k w\nGET k")))
        after = app.client.acl_verdict
        admin.data_received(_frames(_cmds("ACL SETUSER app +set")))
        app.data_received(_frames(_cmds("SET k w\nGET k")))
        return bytes(app_out.data), bytes(admin_out.data), before, after
    finally:
        await server.stop()


def test_a_changed_user_is_a_new_object_and_the_cached_verdict_follows(tmp_path):
    replies, admin, before, after = asyncio.run(_acl_session(tmp_path))
    assert admin == b"+OK\r\n" * 3
    assert replies == (b"+OK\r\n+OK\r\n$1\r\nv\r\n"  # AUTH, SET, GET through the lane
                       b"-NOPERM this user has no permissions to run the 'set' command\r\n$1\r\nv\r\n"
                       b"+OK\r\n$1\r\nw\r\n")
    assert before[1] is True and after[1] is False and after[0] is not before[0]


async def _monitor_session(tmp_path) -> bytes:
    server = make_server(settings_from_pairs([("port", "0"), ("dir", str(tmp_path)), ("appendonly", "no")]))
    await server.start()
    try:
        app, watcher = Connection(server), Connection(server)
        watcher_out = _Transport()
        app.connection_made(_Transport())
        watcher.connection_made(watcher_out)
        watcher.data_received(_frames(_cmds("MONITOR")))
        app.data_received(_frames(_cmds("SET k v\nGET k")))
        await asyncio.sleep(0)
        return bytes(watcher_out.data)
    finally:
        await server.stop()


def test_monitor_sees_what_the_lane_would_have_run(tmp_path):
    seen = asyncio.run(_monitor_session(tmp_path))
    assert b'"SET" "k" "v"' in seen and b'"GET" "k"' in seen


#: one read of writes the lane hands to the journal together (plain writes, a large staged one, a
#: rewritten one, a script's, reads between them); the log's fsync fails under it in the second run
DURABLE = [
    *([b"SET", b"d%d" % i, b"v%d" % i] for i in range(40)),
    [b"GET", b"d3"],
    [b"SET", b"large", b"x" * 70_000],
    [b"SET", b"ttl", b"v", b"EX", b"100"],
    [b"INCR", b"n"],
    [b"EVAL", b"return redis.call('incr', KEYS[1])", b"1", b"n"],
    [b"GET", b"n"],
    [b"RPUSH", b"l", b"a"],
    [b"DEL", b"d1", b"nope"],
]


async def _durable_session(tmp_path, lane: str, failing: bool) -> tuple[bytes, list]:
    """DURABLE on a server with the log (``appendfsync always``, a small ``blob-threshold``);
    returns the replies and each record the journal got (``append``, one per command)."""
    from pion.storage import faults

    work = tmp_path / f"{lane}-{failing}"
    work.mkdir()
    server = make_server(settings_from_pairs([("port", "0"), ("dir", str(work)), ("appendfsync", "always"),
                                                ("blob-threshold", "65536"), ("save", "")]))
    await server.start()
    try:
        if lane == "closed":
            server.lane.admits = lambda client: False
        records: list = []
        journal = server.journal
        append = journal.append

        def recording(effects):
            records.append([argv[:2] for _, argv in effects])
            return append(effects)

        journal.append = recording
        conn = Connection(server)
        transport = _Transport()
        conn.connection_made(transport)
        if failing:
            faults.arm("wal.sync", "EIO", count=1)
        try:
            conn.data_received(_frames(DURABLE))
            for _ in range(2000):
                if not conn.waiting_durable and len(transport.data) and journal.durable_seq >= journal.seq:
                    break
                await asyncio.sleep(0.005)
        finally:
            faults.disarm()
        return bytes(transport.data), records
    finally:
        await server.stop()


@pytest.mark.parametrize("failing", [False, True])
def test_a_batch_of_writes_reaches_the_journal_as_one_record_each(tmp_path, failing):
    """The lane hands a read's writes to the journal together, after they ran: the records are
    the dispatcher's (one per write, in order), every reply waits for its record, and when the
    log's fsync fails every write of the batch is answered -MISCONF in its own place."""
    replies, records = asyncio.run(_durable_session(tmp_path, "closed", failing))
    lane_replies, lane_records = asyncio.run(_durable_session(tmp_path, "lane", failing))
    assert lane_records == records
    assert len(records) == 40 + 6 and records[40] == [[b"SET", b"large"]]
    assert lane_replies == replies
    if failing:
        assert replies.count(b"-MISCONF") == 46 and b"$2\r\nv3\r\n" in replies  # a read is answered
    else:
        assert b"MISCONF" not in replies and replies.startswith(b"+OK\r\n" * 40 + b"$2\r\nv3\r\n")
