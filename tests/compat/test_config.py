"""CONFIG GET / SET / RESETSTAT / REWRITE: Redis 7's parameters, replies and error texts."""

from __future__ import annotations

import socket
import time

import pytest
import redis

from pion.server.admin.config_table import HIDDEN, LOOKUP
from tests.conftest import RawConnection


def ref_client(redis_ref) -> redis.Redis:
    return redis.Redis(port=redis_ref.port, decode_responses=True)


def test_config_get_single_glob_and_several_patterns(rr):
    assert rr.config_get("maxmemory") == {"maxmemory": "0"}
    assert rr.config_get("nope") == {}
    got = rr.config_get("hash-max-*")
    assert set(got) == {"hash-max-listpack-entries", "hash-max-ziplist-entries", "hash-max-listpack-value",
                        "hash-max-ziplist-value"}
    both = rr.execute_command("CONFIG", "GET", "maxmemory", "timeout", "maxmemory")
    flat = both if isinstance(both, list) else [x for pair in both.items() for x in pair]
    assert dict(zip(flat[::2], flat[1::2], strict=True)) == {b"maxmemory": b"0", b"timeout": b"0"}


def test_config_get_is_a_map_in_resp3_and_flat_in_resp2(raw):
    raw.cmd("CONFIG", "GET", "timeout")
    assert raw.read_some() == b"*2\r\n$7\r\ntimeout\r\n$1\r\n0\r\n"
    raw.cmd("HELLO", "3")
    raw.read_some()
    raw.cmd("CONFIG", "GET", "timeout")
    assert raw.read_some() == b"%1\r\n$7\r\ntimeout\r\n$1\r\n0\r\n"


def test_config_get_exact_name_keeps_the_case_given(r):
    assert r.config_get("MAXMEMORY") == {"MAXMEMORY": "0"}
    assert r.config_get("MAXMEM*").keys() >= {"maxmemory", "maxmemory-policy"}


def test_every_reference_parameter_is_known(r, redis_ref):
    ours = set(r.config_get("*"))
    theirs = set(ref_client(redis_ref).config_get("*"))
    assert theirs - ours == set()
    assert {"locale-collate", "set-max-listpack-entries", "set-max-listpack-value"} <= ours


def test_hidden_parameters_need_an_exact_name(r):
    hidden = [name for name, param in LOOKUP.items() if param.flags & HIDDEN]
    assert hidden and not set(hidden) & set(r.config_get("*"))
    assert r.config_get("key-load-delay") == {"key-load-delay": "0"}


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("maxmemory", "1kb", "1024"),
    ("maxmemory", "1k", "1000"),
    ("maxmemory", "2GB", "2147483648"),
    ("maxmemory-policy", "ALLKEYS-LRU", "allkeys-lru"),
    ("notify-keyspace-events", "KEA", "AKE"),
    ("notify-keyspace-events", "Egx", "gxE"),
    ("notify-keyspace-events", "An", "A"),
    ("notify-keyspace-events", "Kx$", "$xK"),
    ("save", "+5 1 0100 20", "5 1 100 20"),
    ("save", "", ""),
    ("client-output-buffer-limit", "REPLICA 1k 2 3", "normal 0 0 0 slave 1000 2 3 pubsub 33554432 8388608 60"),
    ("appendfsync", "EVERYSEC", "everysec"),
    ("maxmemory-clients", "0%", "0"),
    ("latency-tracking-info-percentiles", "50 99.9", "50 99.9"),
    ("hash-max-ziplist-entries", "7", "7"),
    ("list-max-listpack-size", "0", "0"),
    ("slowlog-log-slower-than", "-1", "-1"),
    ("requirepass", "", ""),
    ("lua-time-limit", "10", "10"),
    ("replica-read-only", "NO", "no"),
    ("oom-score-adj-values", "1 2 3", "1 2 3"),
])
def test_config_set_normalizes_like_redis(r, redis_ref, name, value, shown):
    ref = ref_client(redis_ref)
    before = ref.config_get(name)[name]
    try:
        assert ref.config_set(name, value) is True
        assert ref.config_get(name)[name] == shown
    finally:
        ref.config_set(name, before)
    assert r.config_set(name, value) is True
    assert r.config_get(name)[name] == shown


@pytest.mark.parametrize(("args", "message"), [
    (("foo", "bar"), "Unknown option or number of arguments for CONFIG SET - 'foo'"),
    (("maxmemory", "abc"), "CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a "
                           "memory value"),
    (("maxmemory", "-1"), "CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a "
                          "memory value"),
    (("appendonly", "maybe"), "CONFIG SET failed (possibly related to argument 'appendonly') - argument must be "
                              "'yes' or 'no'"),
    (("databases", "3"), "CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config"),
    (("dir", "/tmp"), "CONFIG SET failed (possibly related to argument 'dir') - can't set protected config"),
    (("hz", "-5"), "CONFIG SET failed (possibly related to argument 'hz') - argument must be between 0 and "
                   "2147483647 inclusive"),
    (("hz", "+5"), "CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an "
                   "integer"),
    (("maxclients", "0"), "CONFIG SET failed (possibly related to argument 'maxclients') - argument must be between "
                          "1 and 4294967295 inclusive"),
    (("hash-max-listpack-entries", "-1"), "CONFIG SET failed (possibly related to argument "
                                          "'hash-max-listpack-entries') - argument must be between 0 and "
                                          "9223372036854775807 inclusive"),
    (("hash-max-ziplist-value", "abc"), "CONFIG SET failed (possibly related to argument 'hash-max-ziplist-value') "
                                        "- argument must be a memory value"),
    (("notify-keyspace-events", "Zq"), "CONFIG SET failed (possibly related to argument 'notify-keyspace-events') "
                                       "- Invalid event class character. Use 'Ag$lshzxeKEtmdn'."),
    (("maxmemory", "10", "maxmemory", "20"), "CONFIG SET failed (possibly related to argument 'maxmemory') - "
                                             "duplicate parameter"),
    (("databases", "2", "foo", "1"), "CONFIG SET failed (possibly related to argument 'databases') - can't set "
                                     "immutable config"),
    (("maxmemory", "1", "foo", "2"), "Unknown option or number of arguments for CONFIG SET - 'foo'"),
    (("save", "100"), "CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"),
    (("save", "5  1"), "CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"),
    (("client-output-buffer-limit", "normal 1 2"), "CONFIG SET failed (possibly related to argument "
                                                   "'client-output-buffer-limit') - Wrong number of arguments in "
                                                   "buffer limit configuration."),
    (("client-output-buffer-limit", "master 1 2 3"), "CONFIG SET failed (possibly related to argument "
                                                     "'client-output-buffer-limit') - Invalid client class "
                                                     "specified in buffer limit configuration."),
    (("maxmemory-clients", "200%"), "CONFIG SET failed (possibly related to argument 'maxmemory-clients') - "
                                    "percentage argument must be less or equal to 100"),
    (("maxmemory-clients", "abc"), "CONFIG SET failed (possibly related to argument 'maxmemory-clients') - "
                                   "argument must be a memory or percent value"),
    (("proto-max-bulk-len", "10"), "CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - "
                                   "argument must be between 1048576 and 9223372036854775807 inclusive"),
    (("unixsocketperm", "777"), "CONFIG SET failed (possibly related to argument 'unixsocketperm') - can't set "
                                "immutable config"),
    (("oom-score-adj-values", "1 2"), "CONFIG SET failed (possibly related to argument 'oom-score-adj-values') - "
                                      "wrong number of arguments"),
    (("latency-tracking-info-percentiles", "200"), "CONFIG SET failed (possibly related to argument "
                                                   "'latency-tracking-info-percentiles') - "
                                                   "latency-tracking-info-percentiles parameters should sit "
                                                   "between [0.0,100.0]"),
    (("cluster-announce-hostname", "a_b"), "CONFIG SET failed (possibly related to argument "
                                           "'cluster-announce-hostname') - Hostnames may only contain "
                                           "alphanumeric characters, hyphens or dots"),
    (("activedefrag", "yes"), "CONFIG SET failed (possibly related to argument 'activedefrag') - Active "
                              "defragmentation cannot be enabled: it requires a Redis server compiled with a "
                              "modified Jemalloc like the one shipped by default with the Redis source "
                              "distribution"),
    (("enable-debug-command", "yes"), "CONFIG SET failed (possibly related to argument 'enable-debug-command') - "
                                      "can't set immutable config"),
])
def test_config_set_errors_match_redis(rr, redis_ref, args, message):
    with pytest.raises(redis.ResponseError) as ours:
        rr.execute_command("CONFIG", "SET", *args)
    assert str(ours.value) == message
    with pytest.raises(redis.ResponseError) as theirs:
        ref_client(redis_ref).execute_command("CONFIG", "SET", *args)
    assert str(theirs.value) == message


@pytest.mark.parametrize("value", ["10%", "3mb", "1"])
def test_client_eviction_is_refused_not_ignored(r, value):
    """Pion has no client eviction: a maxmemory-clients limit would be silently ignored, so it is
    refused with the reason (Redis's Tcl unit/client-eviction then fails fast instead of hanging)."""
    with pytest.raises(redis.ResponseError, match="client eviction \\(maxmemory-clients\\) is not supported by Pion"):
        r.config_set("maxmemory-clients", value)
    assert r.config_get("maxmemory-clients") == {"maxmemory-clients": "0"}


def test_config_enum_error_lists_the_choices(r):
    with pytest.raises(redis.ResponseError, match=r"- argument\(s\) must be one of the following: volatile-lru, "):
        r.config_set("maxmemory-policy", "bogus")


def test_config_set_wrong_arity_and_odd_arguments(r):
    with pytest.raises(redis.ResponseError, match="^wrong number of arguments for 'config|set' command$"):
        r.execute_command("CONFIG", "SET", "maxmemory")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("CONFIG", "SET", "a", "b", "c")
    with pytest.raises(redis.ResponseError, match="^wrong number of arguments for 'config|get' command$"):
        r.execute_command("CONFIG", "GET")


def test_config_set_several_is_atomic(r):
    with pytest.raises(redis.ResponseError, match="argument 'hz'"):
        r.execute_command("CONFIG", "SET", "maxmemory", "10mb", "hz", "abc")
    assert r.config_get("maxmemory") == {"maxmemory": "0"}
    assert r.execute_command("CONFIG", "SET", "maxmemory", "10mb", "hz", "20") == b"OK"
    assert r.config_get("maxmemory")["maxmemory"] == str(10 * 1024 * 1024)
    assert r.config_get("hz")["hz"] == "20"


def test_config_set_reaches_the_live_settings(r, server):
    r.config_set("slowlog-max-len", "7")
    r.config_set("maxmemory-policy", "allkeys-lru")
    settings = server.server.settings
    assert (settings.slowlog_max_len, settings.maxmemory_policy) == (7, "allkeys-lru")
    r.config_set("stream-node-max-entries", "50")
    assert server.server.settings.stream_node_max_entries == 50


def test_encoding_thresholds_are_settable_and_used(r):
    assert r.config_set("hash-max-ziplist-entries", "2") is True
    assert r.config_get("hash-max-listpack-entries") == {"hash-max-listpack-entries": "2"}
    r.hset("small", mapping={"a": "1", "b": "2"})
    r.hset("big", mapping={"a": "1", "b": "2", "c": "3"})
    assert r.object("encoding", "small") == b"listpack"
    assert r.object("encoding", "big") == b"hashtable"


def test_notify_keyspace_events_drive_notifications(r, server):
    r.config_set("notify-keyspace-events", "KEA")
    assert server.server.settings.notify_keyspace_events == "AKE"
    sub = redis.Redis(port=server.port).pubsub()
    sub.psubscribe("__key*__:*")
    sub.get_message(timeout=1)
    r.set("watched", "1")
    messages = [sub.get_message(timeout=1) for _ in range(2)]
    channels = {m["channel"] for m in messages if m}
    assert channels == {b"__keyspace@0__:watched", b"__keyevent@0__:set"}
    sub.close()


def test_config_resetstat_clears_the_counters(r):
    r.set("a", "1")
    with pytest.raises(redis.ResponseError):
        r.execute_command("NOSUCH")
    assert r.info("commandstats")
    assert r.config_resetstat() is True
    assert r.info("stats")["total_commands_processed"] == 1  # CONFIG RESETSTAT itself, as in Redis
    assert "cmdstat_set" not in r.info("commandstats")
    assert r.info("errorstats") == {}


def test_config_resetstat_runs_engine_hooks(r, server):
    calls = []
    server.call(server.server.resetstat_hooks.append, lambda srv: calls.append(srv))
    r.config_resetstat()
    assert calls == [server.server]


def test_config_hook_refusal_rolls_back(r, server):
    def refuse_appendfsync(srv, old, new):
        return "the log cannot change policy now" if old.appendfsync != new.appendfsync else None

    server.call(server.server.config_hooks.append, refuse_appendfsync)
    with pytest.raises(redis.ResponseError, match="^CONFIG SET failed \\(possibly related to argument 'appendfsync'"
                                                 "\\) - the log cannot change policy now$"):
        r.config_set("appendfsync", "no")
    assert r.config_get("appendfsync") == {"appendfsync": "always"}


def test_config_rewrite_without_a_file(r):
    with pytest.raises(redis.ResponseError, match="^The server is running without a config file$"):
        r.config_rewrite()


def test_config_rewrite_updates_the_file(make_server, tmp_path):
    path = tmp_path / "pion.conf"
    path.write_text("# my settings\nmaxmemory 100mb\nhash-max-ziplist-entries 64\nkvcache yes\nsave 60 1\nsave 10 5\n")
    srv = make_server(config_file=str(path))
    r = redis.Redis(port=srv.port, decode_responses=True)
    r.config_set("maxmemory", "2mb")
    r.config_set("hash-max-listpack-entries", "9")
    r.config_set("notify-keyspace-events", "KEA")
    assert r.config_rewrite() in (True, "OK")
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "# my settings"
    assert "maxmemory 2097152" in lines and "maxmemory 100mb" not in text
    assert "hash-max-listpack-entries 9" in lines
    assert "kvcache yes" in lines
    assert sum(line.startswith("save ") for line in lines) == 1
    assert "# Generated by CONFIG REWRITE" in lines
    assert "notify-keyspace-events AKE" in lines
    from pion.config import read_config_file, settings_from_pairs

    again = settings_from_pairs(read_config_file(str(path)))
    assert again.maxmemory == 2 * 1024 * 1024 and again.notify_keyspace_events == "AKE"
    r.close()


def test_config_set_port_rebinds_the_listener(r, server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        new_port = probe.getsockname()[1]
    old_port = server.port
    assert r.config_set("port", str(new_port)) is True
    moved = RawConnection(new_port)
    moved.cmd("PING")
    assert moved.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"
    moved.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", old_port), timeout=1).close()
    assert r.ping() is True  # the connection made on the old port stays


def test_config_set_port_in_use_is_refused(r, server):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(redis.ResponseError, match="^CONFIG SET failed \\(possibly related to argument 'port'\\) - "
                                                     "Unable to listen on this port. Check server logs.$"):
            r.config_set("port", str(port))
    assert r.config_get("port")["port"] == str(server.port)


def test_config_set_bind_rebinds_and_accepts_optional_addresses(r, server):
    assert r.config_set("bind", "127.0.0.1 -::1") is True
    assert r.config_get("bind") == {"bind": "127.0.0.1 -::1"}
    fresh = RawConnection(server.port)
    fresh.cmd("PING")
    assert fresh.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"
    fresh.close()
    with pytest.raises(redis.ResponseError, match="without a password"):  # checked before binding
        r.config_set("bind", "192.0.2.1")
    r.config_set("protected-mode", "no")
    with pytest.raises(redis.ResponseError, match="Failed to bind to specified addresses.$"):
        r.config_set("bind", "192.0.2.1")
    r.config_set("protected-mode", "yes")
    assert r.config_get("bind") == {"bind": "127.0.0.1 -::1"}
    assert r.config_set("bind", "127.0.0.1") is True  # drops ::1: 127.0.0.1 is listened on again
    for _ in range(50):
        try:
            again = RawConnection(server.port)
            break
        except OSError:
            time.sleep(0.02)
    again.cmd("PING")
    assert again.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"
    again.close()


def test_config_get_shows_pion_own_parameters(r):
    got = r.config_get("wal-segment-size")
    assert got == {"wal-segment-size": str(64 * 1024 * 1024)}
    assert "config-file" not in r.config_get("*")


def test_config_help(rr):
    lines = [x.decode() if isinstance(x, bytes) else x for x in rr.execute_command("CONFIG", "HELP")]
    assert lines[0] == "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert lines[-1] == "    Prints this help."
