"""TIME LASTSAVE SHUTDOWN SLOWLOG MEMORY LATENCY MONITOR DEBUG LOLWUT."""

from __future__ import annotations

import time

import pytest
import redis

from tests.conftest import RawConnection

DEBUG_REFUSED = (
    "DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a "
    "local connection, otherwise you need to set this option in the configuration file, and then restart the "
    "server."
)


def text_lines(reply) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else x for x in reply]


def test_time_is_seconds_and_microseconds(rr):
    seconds, micros = rr.time()
    assert abs(seconds - time.time()) < 5 and 0 <= micros < 1_000_000


def test_time_reply_is_two_bulk_strings(raw):
    raw.cmd("TIME")
    data = raw.read_some()
    assert data.startswith(b"*2\r\n$10\r\n")


def test_lastsave_is_the_persistence_engines_time(raw, server):
    engine = server.server.parts.persistence
    expected = 0 if engine is None else int(engine.lastsave() if callable(engine.lastsave) else engine.lastsave)
    raw.cmd("LASTSAVE")
    assert raw.read_some() == b":%d\r\n" % expected


def test_lastsave_is_zero_without_a_persistence_engine(raw, server):
    parts = server.server.parts
    saved = server.call(lambda: parts.persistence)
    server.call(setattr, parts, "persistence", None)
    try:
        raw.cmd("LASTSAVE")
        assert raw.read_some() == b":0\r\n"
    finally:
        server.call(setattr, parts, "persistence", saved)


@pytest.mark.parametrize(("args", "message"), [
    (("SHUTDOWN", "NOSAVE", "SAVE"), "syntax error"),
    (("SHUTDOWN", "BOGUS"), "syntax error"),
    (("SHUTDOWN", "ABORT", "NOW"), "syntax error"),
    (("SHUTDOWN", "ABORT"), "No shutdown in progress."),
])
def test_shutdown_refusals(r, redis_ref, args, message):
    for client in (r, redis.Redis(port=redis_ref.port)):
        with pytest.raises(redis.ResponseError) as exc:
            client.execute_command(*args)
        assert str(exc.value) == message


def test_shutdown_is_refused_inside_multi(raw):
    raw.cmd("MULTI")
    raw.cmd("SHUTDOWN")
    assert raw.read_exactly(b"+OK\r\n-ERR Command not allowed inside a transaction\r\n").endswith(b"transaction\r\n")


def test_shutdown_closes_the_connection_and_stops_the_server(raw, server):
    raw.cmd("SHUTDOWN", "NOSAVE", "NOW")
    assert raw.is_closed()
    assert server.server._stopping.is_set()
    assert server.server.shutdown_mode == "nosave"


# -- SLOWLOG ---------------------------------------------------------------------------------------


def test_slowlog_records_get_len_reset(r):
    r.config_set("slowlog-log-slower-than", "0")
    r.set("a", "1")
    r.get("a")
    entries = r.slowlog_get(2)
    assert len(entries) == 2
    assert entries[0]["command"].startswith(b"GET") or entries[0]["command"].startswith(b"SET")
    assert entries[0]["id"] > entries[1]["id"]
    assert r.slowlog_len() >= 3
    assert len(r.slowlog_get(-1)) == r.slowlog_len() - 1 or len(r.slowlog_get(-1)) >= 3
    assert r.slowlog_reset() is True
    assert r.slowlog_len() == 1  # the RESET itself is slower than 0 µs


def test_slowlog_entry_shape(raw, server):
    raw.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0")
    raw.read_some()
    raw.cmd("SLOWLOG", "RESET")
    raw.read_some()
    raw.cmd("CLIENT", "SETNAME", "me")
    raw.read_some()
    raw.cmd("SLOWLOG", "GET", "1")
    data = raw.read_some()
    assert data.startswith(b"*1\r\n*6\r\n:")
    assert b"*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$2\r\nme\r\n" in data and data.endswith(b"$2\r\nme\r\n")


@pytest.mark.parametrize(("args", "message"), [
    (("SLOWLOG", "GET", "-2"), "count should be greater than or equal to -1"),
    (("SLOWLOG", "GET", "x"), "count should be greater than or equal to -1"),
    (("SLOWLOG", "LEN", "x"), "wrong number of arguments for 'slowlog|len' command"),
    (("SLOWLOG", "FOO"), "unknown subcommand 'FOO'. Try SLOWLOG HELP."),
])
def test_slowlog_errors_match_redis(r, redis_ref, args, message):
    for client in (r, redis.Redis(port=redis_ref.port)):
        with pytest.raises(redis.ResponseError) as exc:
            client.execute_command(*args)
        assert str(exc.value) == message


def test_slowlog_help_matches_redis(r, redis_ref):
    assert r.execute_command("SLOWLOG", "HELP") == redis.Redis(port=redis_ref.port).execute_command("SLOWLOG", "HELP")


# -- MEMORY -----------------------------------------------------------------------------------------


def test_memory_usage(rr):
    assert rr.memory_usage("missing") is None
    rr.set("small", "x")
    rr.set("large", "x" * 10_000)
    small, large = rr.memory_usage("small"), rr.memory_usage("large")
    assert 0 < small < large and large >= 10_000
    rr.rpush("list", *range(100))
    assert rr.memory_usage("list", samples=0) > rr.memory_usage("small")


@pytest.mark.parametrize(("args", "message"), [
    (("MEMORY", "USAGE", "k", "SAMPLES", "x"), "value is not an integer or out of range"),
    (("MEMORY", "USAGE", "k", "bad"), "syntax error"),
    (("MEMORY", "USAGE", "k", "SAMPLES", "-1"), "syntax error"),
    (("MEMORY", "USAGE"), "wrong number of arguments for 'memory|usage' command"),
])
def test_memory_usage_errors_match_redis(r, redis_ref, args, message):
    for client in (r, redis.Redis(port=redis_ref.port)):
        client.set("k", "v")
        with pytest.raises(redis.ResponseError) as exc:
            client.execute_command(*args)
        assert str(exc.value) == message


def test_memory_stats_doctor_purge_malloc_help(rr):
    rr.set("a", "1")
    stats = rr.memory_stats()
    assert stats["keys.count"] == 1 and "db.0" in stats and stats["total.allocated"] > 0
    doctor = rr.execute_command("MEMORY", "DOCTOR")
    assert "Sam" in (doctor.decode() if isinstance(doctor, bytes) else doctor)
    assert rr.memory_purge() in (True, b"OK")
    assert rr.execute_command("MEMORY", "MALLOC-STATS") == b"Stats not supported for the current allocator"
    lines = text_lines(rr.execute_command("MEMORY", "HELP"))
    assert lines[0].startswith("MEMORY <subcommand>") and lines[-1] == "    Prints this help."


def test_memory_help_matches_redis(r, redis_ref):
    assert r.execute_command("MEMORY", "HELP") == redis.Redis(port=redis_ref.port).execute_command("MEMORY", "HELP")


# -- LATENCY ------------------------------------------------------------------------------------------


def test_latency_as_redis_with_monitoring_off(rr):
    assert rr.execute_command("LATENCY", "LATEST") == []
    assert rr.execute_command("LATENCY", "HISTORY", "command") == []
    assert rr.execute_command("LATENCY", "RESET") == 0
    assert rr.execute_command("LATENCY", "RESET", "command", "fork") == 0
    with pytest.raises(redis.ResponseError, match="^No samples available for event 'command'$"):
        rr.execute_command("LATENCY", "GRAPH", "command")
    doctor = rr.execute_command("LATENCY", "DOCTOR")
    assert "Latency monitoring is disabled" in (doctor.decode() if isinstance(doctor, bytes) else doctor)
    assert rr.execute_command("LATENCY", "HISTOGRAM", "nosuchcommand") in ({}, [])  # tracking is on


def test_latency_help_matches_redis(r, redis_ref):
    assert r.execute_command("LATENCY", "HELP") == redis.Redis(port=redis_ref.port).execute_command("LATENCY", "HELP")


# -- MONITOR ------------------------------------------------------------------------------------------


def test_monitor_streams_other_clients_commands(server, r):
    monitor = RawConnection(server.port)
    monitor.cmd("MONITOR")
    assert monitor.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    r.set("key", "va lue")
    line = monitor.read_some()
    assert line.startswith(b"+") and line.endswith(b'"SET" "key" "va lue"\r\n')
    assert b" [0 127.0.0.1:" in line
    assert r.client_list()[0]["flags"] in ("O", "N")
    flags = {c["flags"] for c in r.client_list()}
    assert "O" in flags
    monitor.close()


# -- DEBUG ----------------------------------------------------------------------------------------------


def test_debug_is_refused_by_default_with_redis_text(r, redis_ref):
    for client in (r, redis.Redis(port=redis_ref.port)):
        with pytest.raises(redis.ResponseError) as exc:
            client.execute_command("DEBUG", "SLEEP", "0")
        assert str(exc.value) == DEBUG_REFUSED


@pytest.fixture
def debug_client(make_server):
    srv = make_server(enable_debug_command="yes")
    client = redis.Redis(port=srv.port)
    yield client, srv
    client.close()


def test_debug_sleep_object_and_active_expire(debug_client):
    r, srv = debug_client
    start = time.monotonic()
    assert r.execute_command("DEBUG", "SLEEP", "0.2") == b"OK"
    assert time.monotonic() - start >= 0.19
    r.set("k", "12345")
    info = r.execute_command("DEBUG", "OBJECT", "k").decode()
    assert info.startswith("Value at:0x") and " encoding:int " in info and "lru_seconds_idle:" in info
    with pytest.raises(redis.ResponseError, match="^no such key$"):
        r.execute_command("DEBUG", "OBJECT", "missing")
    assert r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0") == b"OK"
    assert srv.server.active_expire_enabled is False
    r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")
    assert srv.server.active_expire_enabled is True


def test_debug_unknown_and_unavailable_subcommands(debug_client):
    r, _ = debug_client
    with pytest.raises(redis.ResponseError, match="^unknown subcommand or wrong number of arguments for 'foo'. "
                                                  "Try DEBUG HELP.$"):
        r.execute_command("DEBUG", "foo")
    with pytest.raises(redis.ResponseError, match="^DEBUG JMAP is not supported"):
        r.execute_command("DEBUG", "JMAP")


def test_debug_hooks_from_engines(debug_client):
    r, srv = debug_client
    srv.call(srv.server.debug_hooks.__setitem__, "reload", lambda ctx, argv: b"reloaded")
    assert r.execute_command("DEBUG", "RELOAD") == b"reloaded"
    assert "RELOAD" in text_lines(r.execute_command("DEBUG", "HELP"))


def test_debug_local_allows_loopback_clients(make_server):
    srv = make_server(enable_debug_command="local")
    assert redis.Redis(port=srv.port).execute_command("DEBUG", "SLEEP", "0") == b"OK"


# -- LOLWUT -----------------------------------------------------------------------------------------------


def test_lolwut(rr):
    art = rr.execute_command("LOLWUT")
    text = art.decode() if isinstance(art, bytes) else art
    from pion import __version__
    from pion.server.admin.info import REDIS_VERSION

    assert text.endswith(f"Pion ver. {__version__} - Redis ver. {REDIS_VERSION}\n")
    assert rr.execute_command("LOLWUT", "VERSION", "5")
    with pytest.raises(redis.ResponseError, match="^value is not an integer or out of range$"):
        rr.execute_command("LOLWUT", "VERSION", "x")


# -- found by redis-py's own suite (docs/clients.md) ------------------------------------------------------


def test_lolwut_names_the_redis_version_it_speaks(r):
    text = r.execute_command("LOLWUT").decode()
    assert "Redis ver. " in text and "Pion ver. " in text


def test_role_is_a_master_without_replicas(rr):
    assert rr.role() == [b"master", 0, []]


def test_replicaof_follows_a_primary_and_no_one_promotes(r):
    assert r.replicaof("NO", "ONE")
    assert r.execute_command("SLAVEOF", "no", "one")
    with pytest.raises(redis.ResponseError, match="^wrong number of arguments for 'replicaof' command$"):
        r.replicaof("NO ONE")
    with pytest.raises(redis.ResponseError, match="^Invalid master port$"):
        r.replicaof("127.0.0.1", 0)
    assert r.replicaof("127.0.0.1", 1)  # nobody listens there: a replica whose link is down
    assert r.execute_command("ROLE")[:4] in ([b"slave", b"127.0.0.1", 1, b"connect"],
                                             [b"slave", b"127.0.0.1", 1, b"connecting"])
    assert r.info("replication")["master_link_status"] == "down"
    with pytest.raises(redis.ReadOnlyError):
        r.set("k", "v")
    assert r.replicaof("NO", "ONE") and r.set("k", "v")


def test_module_list_names_the_built_in_engines_and_loading_is_refused(rr):
    names = {entry[b"name"]: entry[b"ver"] for entry in rr.module_list()}
    assert names == {b"search": 80400, b"ReJSON": 80400, b"vectorset": 1}  # built in, as Redis 8 lists them
    with pytest.raises(redis.ResponseError, match="^MODULE LOAD is not supported by Pion"):
        rr.module_load("/tmp/none.so")
    assert "LIST" in text_lines(rr.execute_command("MODULE", "HELP"))


def test_info_modules_and_hello_list_what_module_list_names(rr, raw):
    """Redis 8's ``module:name=...,ver=...`` lines, which redis-py parses into ``info()["modules"]``
    and its module gate (``skip_ifmodversion_lt``) reads; HELLO's ``modules`` is the same list."""
    listed = {entry[b"name"]: entry[b"ver"] for entry in rr.module_list()}
    modules = rr.info("modules")["modules"]
    assert {m["name"]: m["ver"] for m in modules} == {name.decode(): ver for name, ver in listed.items()}
    assert all(m["api"] == 1 and m["filters"] == 0 for m in modules)
    raw.cmd("INFO", "modules")
    text = raw.read_some().decode()
    assert "module:name=search,ver=80400,api=1,filters=0,usedby=[],using=[],options=[handle-io-errors]" in text
    assert text.split("\r\n")[1] == "# Modules"
    hello = rr.execute_command("HELLO", str(rr.protocol_version))
    def as_map(reply):
        return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))

    hello = as_map(hello)
    assert hello[b"version"] == b"8.4.0"
    assert {as_map(e)[b"name"]: as_map(e)[b"ver"] for e in hello[b"modules"]} == listed


def test_debug_error_answers_with_the_given_error(make_server):
    """Client suites fake server states with it: redis-py maps the prefixes to its exceptions."""
    r = redis.Redis(port=make_server(enable_debug_command="yes").port)
    with pytest.raises(redis.BusyLoadingError):
        r.execute_command("DEBUG", "ERROR", "LOADING fake message")
    with pytest.raises(redis.ReadOnlyError):
        r.execute_command("DEBUG", "ERROR", "READONLY fake\r\nmessage")
    assert r.ping()


# -- found by Redis's own test suite (docs/redis-test-suite.md) -------------------------------------


def _histogram(r, *names):
    reply = r.execute_command("LATENCY", "HISTOGRAM", *names)
    flat = dict(zip(reply[::2], reply[1::2], strict=True)) if isinstance(reply, list) else reply
    return {name: dict(zip(body[::2], body[1::2], strict=True)) if isinstance(body, list) else body
            for name, body in flat.items()}


def test_latency_histogram_counts_calls_per_command_and_subcommand(r):
    r.config_resetstat()
    assert list(_histogram(r)) == [b"config|resetstat"]
    r.set("a", "b")
    r.set("c", "d")
    r.execute_command("CLIENT", "ID")
    histo = _histogram(r, "set", "client", "nosuchcommand")
    assert set(histo) == {b"set", b"client|id"} and histo[b"set"][b"calls"] == 2
    buckets = histo[b"set"][b"histogram_usec"]
    counts = list(buckets.values()) if isinstance(buckets, dict) else buckets[1::2]
    assert counts == sorted(counts) and counts[-1] == 2  # cumulative, up to every call
    stats = r.info("latencystats")
    assert set(stats["latency_percentiles_usec_set"]) == {"p50", "p99", "p99.9"}
    r.config_set("latency-tracking", "no")
    r.get("a")
    assert b"get" not in _histogram(r)
    r.config_set("latency-tracking", "yes")


def test_latency_monitor_samples_commands_over_the_threshold(debug_client):
    r, _ = debug_client
    r.config_set("latency-monitor-threshold", 50)
    try:
        r.execute_command("DEBUG", "SLEEP", "0.06")
        latest = r.execute_command("LATENCY", "LATEST")
        assert latest[0][0] == b"command" and latest[0][2] >= 50 and latest[0][3] >= 50
        history = r.execute_command("LATENCY", "HISTORY", "command")
        assert len(history) == 1 and history[0][1] >= 50
        assert "command" in r.execute_command("LATENCY", "GRAPH", "command").decode()
        assert "1. command: 1 latency spikes" in r.execute_command("LATENCY", "DOCTOR").decode()
        assert r.execute_command("LATENCY", "RESET", "nosuchevent") == 0
        assert r.execute_command("LATENCY", "RESET") == 1
        assert r.execute_command("LATENCY", "LATEST") == []
    finally:
        r.config_set("latency-monitor-threshold", 0)


def test_debug_protocol_answers_each_resp_type_as_redis(debug_client):
    _, srv = debug_client
    conn = RawConnection(srv.port)
    expected = {
        2: [(b"bignum", b"$37\r\n1234567999999999999999999999999999999\r\n"),
            (b"attrib", b"$39\r\nSome real reply following the attribute\r\n"),
            (b"push", b"-ERR RESP2 is not supported by this command\r\n"),
            (b"map", b"*6\r\n:0\r\n:0\r\n:1\r\n:1\r\n:2\r\n:0\r\n")],
        3: [(b"bignum", b"(1234567999999999999999999999999999999\r\n"),
            (b"attrib", b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n"
                        b"$39\r\nSome real reply following the attribute\r\n"),
            (b"push", b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n$40\r\nSome real reply following the push reply\r\n"),
            (b"verbatim", b"=29\r\ntxt:This is a verbatim\nstring\r\n"),
            (b"double", b",3.141\r\n"), (b"set", b"~3\r\n:0\r\n:1\r\n:2\r\n")],
    }
    for proto, cases in expected.items():
        conn.cmd("HELLO", str(proto))
        conn.read_some()
        for name, reply in cases:
            conn.cmd("DEBUG", "PROTOCOL", name)
            assert conn.read_exactly(reply) == reply, (proto, name)
    conn.cmd("DEBUG", "PROTOCOL", "nope")
    assert conn.read_some().startswith(b"-ERR Wrong protocol type name.")
    conn.close()


def test_debug_loadaof_rebuilds_the_keyspace_from_the_log(make_server):
    srv = make_server(enable_debug_command="yes", appendonly=True)
    r = redis.Redis(port=srv.port)
    r.config_set("stream-node-max-entries", 100)
    for j in range(150):
        r.xadd("s", {"x": j}, maxlen=120, approximate=True)
    r.set("k", "v", px=100_000)
    r.incrbyfloat("f", 1.5)
    before = (r.xlen("s"), r.xrange("s", count=1), r.get("k"), r.get("f"))
    assert r.execute_command("DEBUG", "LOADAOF") == b"OK"
    assert (r.xlen("s"), r.xrange("s", count=1), r.get("k"), r.get("f")) == before
    assert 0 < r.pttl("k") <= 100_000
    r.config_set("appendonly", "no")
    with pytest.raises(redis.ResponseError, match="needs appendonly yes"):
        r.execute_command("DEBUG", "LOADAOF")
