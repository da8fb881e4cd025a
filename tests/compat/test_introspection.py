"""COMMAND and INFO: reply shapes compared byte for byte with Redis where the command is Redis's."""

from __future__ import annotations

import pytest
import redis

from tests.conftest import RawConnection


def raw_reply(port: int, *args: str, proto: int = 2) -> bytes:
    conn = RawConnection(port)
    if proto == 3:
        conn.cmd("HELLO", "3")
        conn.read_some()
    conn.cmd(*args)
    data = conn.read_some()
    while True:  # big replies arrive in several reads
        more = conn.read_some(0.2)
        if not more:
            break
        data += more
    conn.close()
    return data


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("args", [
    ("COMMAND", "INFO", "get"),
    ("COMMAND", "INFO", "get", "nosuchcommand"),
    ("COMMAND", "DOCS", "get"),
    ("COMMAND", "INFO", "client|list"),
    ("COMMAND", "INFO", "config|set"),
    ("COMMAND", "GETKEYSANDFLAGS", "set", "a", "b"),
    ("COMMAND", "GETKEYSANDFLAGS", "lmove", "a", "b", "left", "right"),
    ("COMMAND", "GETKEYS", "mset", "a", "1", "b", "2"),
    ("COMMAND", "LIST", "FILTERBY", "MODULE", "x"),
])
def test_command_replies_equal_redis_bytes(server, redis_ref, proto, args):
    assert raw_reply(server.port, *args, proto=proto) == raw_reply(redis_ref.port, *args, proto=proto)


@pytest.mark.parametrize(("args", "message"), [
    (("COMMAND", "GETKEYS", "get"), "wrong number of arguments for 'command|getkeys' command"),
    (("COMMAND", "GETKEYS", "ping", "x"), "The command has no key arguments"),
    (("COMMAND", "GETKEYS", "get", "a", "b"), "Invalid number of arguments specified for command"),
    (("COMMAND", "GETKEYS", "foo", "a"), "Invalid command specified"),
    (("COMMAND", "GETKEYS", "client", "nosub"), "Invalid command specified"),
    (("COMMAND", "LIST", "FILTERBY", "bad", "x"), "syntax error"),
    (("COMMAND", "LIST", "x"), "syntax error"),
    (("COMMAND", "FOO"), "unknown subcommand 'FOO'. Try COMMAND HELP."),
    (("COMMAND", "COUNT", "x"), "wrong number of arguments for 'command|count' command"),
])
def test_command_errors_match_redis(r, redis_ref, args, message):
    for client in (r, redis.Redis(port=redis_ref.port)):
        with pytest.raises(redis.ResponseError) as exc:
            client.execute_command(*args)
        assert str(exc.value) == message


def test_command_count_and_full_table_agree(rr):
    table = rr.command()
    assert rr.command_count() == len(table) > 200
    assert table["get"]["arity"] == 2 and table["set"]["first_key_pos"] == 1
    assert [s[0] for s in table["client"]["subcommands"] if s[0] == b"client|setinfo"] == [b"client|setinfo"]


def test_bare_command_runs_and_container_info_lists_subcommands(raw):
    raw.cmd("COMMAND", "INFO", "config")
    data = raw.read_some()
    assert data.startswith(b"*1\r\n*10\r\n$6\r\nconfig\r\n:-2\r\n")
    assert b"config|rewrite" in data and b"+@slow" in data


def test_command_docs_nests_subcommands_and_uses_pion_docs_for_new_ones(r):
    docs = r.execute_command("COMMAND DOCS", "client")
    pairs = dict(zip(docs[::2], docs[1::2], strict=True))
    client = dict(zip(pairs[b"client"][::2], pairs[b"client"][1::2], strict=True))
    subs = dict(zip(client[b"subcommands"][::2], client[b"subcommands"][1::2], strict=True))
    assert b"client|list" in subs and b"client|setinfo" in subs
    setinfo = dict(zip(subs[b"client|setinfo"][::2], subs[b"client|setinfo"][1::2], strict=True))
    assert setinfo[b"since"] == b"7.2.0" and setinfo[b"group"] == b"connection"


def test_command_docs_of_unknown_names_are_left_out(r):
    assert r.execute_command("COMMAND DOCS", "nosuch", "get")[0] == b"get"
    assert len(r.execute_command("COMMAND DOCS", "nosuch")) == 0


def test_command_list_filters(rr):
    everything = rr.execute_command("COMMAND LIST")
    assert b"get" in everything and b"client|list" in everything
    pattern = rr.execute_command("COMMAND LIST", "FILTERBY", "PATTERN", "CONFIG*")
    assert set(pattern) == {b"config", b"config|get", b"config|set", b"config|resetstat", b"config|rewrite",
                            b"config|help"}
    admin = rr.execute_command("COMMAND LIST", "FILTERBY", "ACLCAT", "admin")
    assert b"config|set" in admin and b"get" not in admin
    assert rr.execute_command("COMMAND LIST", "FILTERBY", "ACLCAT", "nope") == []


def test_command_getkeys_through_redis_py(rr):
    def keys(*args):
        return [k.decode() if isinstance(k, bytes) else k for k in rr.command_getkeys(*args)]

    assert keys("SET", "a", "b") == ["a"]
    assert keys("MSET", "a", "1", "b", "2") == ["a", "b"]
    assert keys("MEMORY", "USAGE", "k") == ["k"]


def test_command_help(rr):
    lines = [x.decode() if isinstance(x, bytes) else x for x in rr.execute_command("COMMAND HELP")]
    assert lines[0] == "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert "GETKEYSANDFLAGS <full-command>" in lines


# -- INFO ---------------------------------------------------------------------------------------------


def info_text(server, *sections: str) -> str:
    data = raw_reply(server.port, "INFO", *sections)
    return data[data.index(b"\r\n") + 2: -2].decode()


def test_info_default_sections_in_redis_order(server):
    text = info_text(server)
    titles = [line[2:] for line in text.split("\r\n") if line.startswith("# ")]
    assert titles[:11] == ["Server", "Clients", "Memory", "Persistence", "Stats", "Replication", "CPU", "Modules",
                           "Errorstats", "Cluster", "Keyspace"]  # engines' sections (Pion) come after
    assert "\r\n\r\n# Clients\r\n" in text


def test_info_everything_adds_commandstats(server):
    titles = [line[2:] for line in info_text(server, "everything").split("\r\n") if line.startswith("# ")]
    assert "Commandstats" in titles and titles.index("Commandstats") < titles.index("Keyspace")
    assert titles == [line[2:] for line in info_text(server, "all").split("\r\n") if line.startswith("# ")]


def test_info_server_fields(rr, server):
    info = rr.info("server")
    assert info["redis_version"] == "8.4.0"
    from pion import __version__

    assert info["pion_version"] == __version__
    assert info["tcp_port"] == server.port
    assert len(info["run_id"]) == 40 and info["redis_mode"] == "standalone"
    assert isinstance(info["uptime_in_seconds"], int)


def test_info_several_sections_and_unknown(server):
    text = info_text(server, "server", "CLIENTS")
    assert text.startswith("# Server\r\n") and "\r\n\r\n# Clients\r\n" in text and "# Memory" not in text
    assert raw_reply(server.port, "INFO", "nosuchsection") == b"$0\r\n\r\n"


def test_info_counts_clients_commands_and_keys(r, server):
    other = redis.Redis(port=server.port)
    other.ping()
    before = r.info("stats")["total_commands_processed"]
    r.set("k1", "v")
    r.set("k2", "v", ex=100)
    assert r.info("stats")["total_commands_processed"] == before + 3
    assert r.info("clients")["connected_clients"] == 2
    keyspace = info_text(server, "keyspace")
    assert keyspace == "# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=0\r\n"
    assert r.info("keyspace")["db0"]["keys"] == 2
    other.close()


def test_info_commandstats_and_errorstats(r):
    r.set("a", "1")
    with pytest.raises(redis.ResponseError):
        r.execute_command("NOSUCH")
    with pytest.raises(redis.ResponseError):
        r.execute_command("LPUSH", "a", "x")
    stats = r.info("commandstats")
    assert stats["cmdstat_set"]["calls"] == 1 and stats["cmdstat_lpush"]["failed_calls"] == 1
    assert r.info("errorstats") == {"errorstat_ERR": {"count": 1}, "errorstat_WRONGTYPE": {"count": 1}}
    assert r.info("stats")["total_error_replies"] == 2


def test_info_is_verbatim_in_resp3(server):
    data = raw_reply(server.port, "INFO", "cluster", proto=3)
    body = "# Cluster\r\ncluster_enabled:0\r\n"
    assert data == b"=%d\r\ntxt:%s\r\n" % (len(body) + 4, body.encode())


def test_engines_register_and_replace_sections(r, server):
    def pion_section(srv):
        return {"stats_scope": "worker", "kvprefix_hits": 3}

    def persistence_section(srv):
        return {"loading": 0, "aof_enabled": 1, "wal_bytes": 10}

    server.call(server.server.info_sections.__setitem__, "pion", pion_section)
    server.call(server.server.info_sections.__setitem__, "persistence", persistence_section)
    text = info_text(server)
    assert text.endswith("# Pion\r\nstats_scope:worker\r\nkvprefix_hits:3\r\n")
    assert r.info("persistence") == {"loading": 0, "aof_enabled": 1, "wal_bytes": 10}
    assert r.info("pion")["kvprefix_hits"] == 3


def test_info_memory_reports_a_size(rr):
    memory = rr.info("memory")
    assert memory["used_memory_rss"] > 0 and memory["used_memory_peak"] >= memory["used_memory"] >= 0
    assert memory["maxmemory_policy"] == "noeviction"


# -- found by Redis's own test suite (docs/redis-test-suite.md) -------------------------------------


def test_default_info_has_no_rejected_calls_but_commandstats_does(r):
    r.ping()
    for section in ((), ("default",)):
        text = str(r.info(*section))
        assert "rejected_calls" not in text and "used_memory" in text
    for section in ("all", "everything", "commandstats"):
        assert "rejected_calls" in str(r.info(section))
    assert r.info("stats")["migrate_cached_sockets"] == 0


def _monitor_lines(conn: RawConnection, count: int) -> list[bytes]:
    data = b""
    for _ in range(20):
        data += conn.read_some(0.2)
        if data.count(b"\r\n") >= count:
            break
    lines = [line.split(b"] ", 1)[1] for line in data.split(b"\r\n") if line]
    return [line for line in lines if b"SETINFO" not in line]  # redis-py's (re)connection handshake


def test_monitor_shows_commands_after_they_ran_and_hides_admin_commands(server, r):
    r.ping()
    mon = RawConnection(server.port)
    mon.cmd("MONITOR")
    assert mon.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    with r.pipeline(transaction=True) as pipe:
        pipe.set("foo", "bar").execute()
    r.config_get("maxmemory")  # admin: never shown
    r.execute_command("CLIENT", "ID")
    other = RawConnection(server.port)
    other.cmd("AUTH", "not-real")  # no password set: an error, still shown (redacted)
    assert other.read_some().startswith(b"-")
    other.cmd("HELLO", "2", "AUTH", "someone", "secret")
    other.read_some()
    other.close()
    lines = _monitor_lines(mon, 6)
    assert lines[:6] == [b'"MULTI"', b'"SET" "foo" "bar"', b'"EXEC"', b'"CLIENT" "ID"',
                     b'"AUTH" "(redacted)"', b'"HELLO" "2" "AUTH" "(redacted)" "(redacted)"']
    mon.close()


def test_client_list_counts_the_running_request_in_qbuf(r):
    line = r.execute_command("CLIENT", "INFO")
    assert " qbuf=26 " in (line.decode() if isinstance(line, bytes) else line)
    mine = [c for c in r.client_list() if c["cmd"] == "client|list"]
    assert mine[0]["qbuf"] == "26"


def test_command_getkeysandflags_marks_the_sort_store_key_overwritten(raw):
    raw.cmd("COMMAND", "GETKEYSANDFLAGS", "SORT", "k1", "STORE", "k2")
    expected = b"*2\r\n*2\r\n$2\r\nk1\r\n*2\r\n+RO\r\n+access\r\n*2\r\n$2\r\nk2\r\n*2\r\n+OW\r\n+update\r\n"
    assert raw.read_exactly(expected) == expected


def test_cluster_commands_exist_and_are_refused_outside_a_cluster(r):
    for cmd in (("CLUSTER", "INFO"), ("CLUSTER", "SLOTS"), ("CLUSTER", "HELP"), ("READONLY",), ("ASKING",)):
        with pytest.raises(redis.ResponseError, match="^This instance has cluster support disabled$"):
            r.execute_command(*cmd)
    listed = r.command_list(pattern="cl*help")
    assert {name.encode() if isinstance(name, str) else name for name in listed} == {b"client|help", b"cluster|help"}
