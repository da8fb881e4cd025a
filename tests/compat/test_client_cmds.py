"""CLIENT subcommands through redis-py (RESP2 and RESP3), raw bytes where redis-py hides them."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from tests.conftest import RawConnection

FIELDS_72 = [
    "id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db", "sub", "psub", "ssub", "multi", "qbuf",
    "qbuf-free", "argv-mem", "multi-mem", "rbs", "rbp", "obl", "oll", "omem", "tot-mem", "events", "cmd", "user",
    "redir", "resp", "lib-name", "lib-ver",
]


def test_client_info_has_redis_72_fields_in_order(rr):
    info = rr.client_info()
    assert list(info) == FIELDS_72
    assert int(info["id"]) == rr.client_id()
    assert info["cmd"] == "client|info"
    assert int(info["resp"]) == rr.protocol_version


def test_client_info_is_verbatim_in_resp3(raw):
    raw.cmd("HELLO", "3")
    raw.read_some()
    raw.cmd("CLIENT", "INFO")
    data = raw.read_some()
    assert data.startswith(b"=") and b"\r\ntxt:id=" in data and data.endswith(b" lib-ver=\n\r\n")


def test_client_list_fields_extend_the_reference_in_the_same_order(r, redis_ref):
    ref = redis.Redis(port=redis_ref.port)
    ref_fields = list(ref.client_list()[0])
    ours = list(r.client_list()[0])
    assert ours[: len(ref_fields)] == ref_fields
    assert ours[len(ref_fields):] == ["lib-name", "lib-ver"]


def test_redis_py_sends_setinfo_on_connect_and_lists_it(rr):
    info = rr.client_info()
    assert info["lib-name"] == "redis-py"
    assert info["lib-ver"] == redis.__version__
    assert info["resp"] == str(rr.protocol_version) or info["resp"] == rr.protocol_version


@pytest.mark.parametrize("protocol", [None, 3])
def test_redis_py_8_connects_cleanly_with_its_default_handshake(server, protocol):
    """redis-py 8 sends HELLO 3, CLIENT MAINT_NOTIFICATIONS (refused, as by Redis 7) and CLIENT SETINFO."""
    from redis.utils import DEFAULT_RESP_VERSION

    client = redis.Redis(port=server.port, protocol=protocol)
    assert client.ping() is True
    info = client.client_info()
    assert int(info["resp"]) == (protocol or DEFAULT_RESP_VERSION)
    assert info["lib-name"] == "redis-py"
    assert client.set("k", "v") and client.get("k") == b"v"
    client.close()


def test_maint_notifications_answers_like_redis_7(raw, redis_ref):
    raw.cmd("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip")
    ours = raw.read_some()
    ref = RawConnection(redis_ref.port)
    ref.cmd("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip")
    assert ours == ref.read_some() == b"-ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.\r\n"
    ref.close()


def test_client_list_filters_by_type_and_id(r, server):
    other = redis.Redis(port=server.port)
    other_id = other.client_id()
    pubsub = other.pubsub()
    pubsub.subscribe("chan")
    pubsub.get_message(timeout=1)
    mine = r.client_id()
    listed = {int(c["id"]) for c in r.client_list(_type="normal")}
    assert mine in listed
    pubsub_ids = {int(c["id"]) for c in r.client_list(_type="pubsub")}
    assert len(pubsub_ids) == 1 and mine not in pubsub_ids
    by_id = r.client_list(client_id=[mine, other_id, 99999])
    assert [int(c["id"]) for c in by_id] == [mine, other_id]
    pubsub.close()
    other.close()


@pytest.mark.parametrize(("args", "message"), [
    (("CLIENT", "LIST", "TYPE", "bogus"), "Unknown client type 'bogus'"),
    (("CLIENT", "LIST", "ID", "abc"), "Invalid client ID"),
    (("CLIENT", "LIST", "foo"), "syntax error"),
    (("CLIENT", "KILL", "1.2.3.4:5"), "No such client"),
    (("CLIENT", "KILL", "ID", "abc"), "client-id should be greater than 0"),
    (("CLIENT", "KILL", "TYPE", "bogus"), "Unknown client type 'bogus'"),
    (("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "maybe"), "syntax error"),
    (("CLIENT", "KILL", "foo", "bar"), "syntax error"),
    (("CLIENT", "KILL", "USER", "nouser"), "No such user 'nouser'"),
    (("CLIENT", "REPLY", "maybe"), "syntax error"),
    (("CLIENT", "PAUSE", "abc"), "timeout is not an integer or out of range"),
    (("CLIENT", "PAUSE", "-1"), "timeout is negative"),
    (("CLIENT", "PAUSE", "10", "bogus"), "CLIENT PAUSE mode must be WRITE or ALL"),
    (("CLIENT", "PAUSE", "10", "write", "extra"),
     "unknown subcommand or wrong number of arguments for 'PAUSE'. Try CLIENT HELP."),
    (("CLIENT", "NO-EVICT", "maybe"), "syntax error"),
    (("CLIENT", "UNBLOCK", "abc"), "value is not an integer or out of range"),
    (("CLIENT", "UNBLOCK", "999", "foo"), "CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
    (("CLIENT", "SETNAME", "a b"), "Client names cannot contain spaces, newlines or special characters."),
    (("CLIENT", "ID", "x"), "wrong number of arguments for 'client|id' command"),
    (("CLIENT", "foo"), "unknown subcommand 'foo'. Try CLIENT HELP."),
    (("CLIENT", "CACHING", "yes"),
     "CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"),
])
def test_client_error_texts_match_redis(rr, redis_ref, args, message):
    with pytest.raises(redis.ResponseError) as ours:
        rr.execute_command(*args)
    assert str(ours.value) == message
    ref = redis.Redis(port=redis_ref.port)
    with pytest.raises(redis.ResponseError) as theirs:
        ref.execute_command(*args)
    assert str(theirs.value) == message


def test_client_list_shows_null_cmd_before_the_first_command(r, server):
    idle = RawConnection(server.port)
    r.ping()
    others = [c for c in r.client_list() if int(c["id"]) != r.client_id()]
    assert [c["cmd"] for c in others] == ["NULL"]
    idle.close()


def test_client_setname_getname_and_clear(rr):
    assert rr.client_getname() is None
    assert rr.client_setname("worker-1") is True
    assert rr.client_getname() in ("worker-1", b"worker-1")
    assert rr.client_list()[0]["name"] == "worker-1"
    rr.execute_command("CLIENT", "SETNAME", "")
    assert rr.client_getname() is None


def test_client_setinfo_sets_lib_name_and_refuses_bad_input(r):
    assert r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib") == b"OK"
    assert r.execute_command("CLIENT", "SETINFO", "lib-ver", "1.2") == b"OK"
    info = r.client_info()
    assert (info["lib-name"], info["lib-ver"]) == ("mylib", "1.2")
    with pytest.raises(redis.ResponseError, match="^Unrecognized option 'foo'$"):
        r.execute_command("CLIENT", "SETINFO", "foo", "x")
    with pytest.raises(redis.ResponseError, match="^LIB-NAME cannot contain spaces, newlines or special characters.$"):
        r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "a b")


def test_client_kill_by_id_closes_the_other_connection(r, server):
    victim = RawConnection(server.port)
    victim.cmd("CLIENT", "ID")
    victim_id = int(victim.read_some().strip()[1:])
    assert r.client_kill_filter(_id=victim_id) == 1
    assert victim.is_closed()
    assert r.client_kill_filter(_id=victim_id) == 0
    victim.close()


def test_client_kill_old_form_by_address(r, server):
    victim = RawConnection(server.port)
    victim.cmd("PING")
    victim.read_some()
    addr = "%s:%d" % victim.sock.getsockname()
    assert r.client_kill(addr) is True
    assert victim.is_closed()
    victim.close()


def test_client_kill_skipme_and_laddr_and_maxage(r, server):
    others = [RawConnection(server.port) for _ in range(2)]
    for conn in others:
        conn.cmd("PING")
        conn.read_some()
    laddr = r.client_info()["laddr"]
    assert r.execute_command("CLIENT", "KILL", "MAXAGE", "3600") == 0
    assert r.execute_command("CLIENT", "KILL", "LADDR", laddr) == 2
    assert all(conn.is_closed() for conn in others)
    assert r.ping() is True
    assert r.execute_command("CLIENT", "KILL", "ID", str(r.client_id()), "SKIPME", "no") == 1
    for conn in others:
        conn.close()


def test_client_kill_user_default_counts_other_clients(r, server):
    other = RawConnection(server.port)
    other.cmd("PING")
    other.read_some()
    assert r.execute_command("CLIENT", "KILL", "USER", "default") == 1
    assert other.is_closed()
    other.close()


def test_client_reply_off_skip_on(raw):
    raw.cmd("CLIENT", "REPLY", "OFF")
    raw.cmd("SET", "a", "1")
    raw.cmd("CLIENT", "REPLY", "ON")
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    raw.cmd("CLIENT", "REPLY", "SKIP")
    raw.cmd("PING", "skipped")
    raw.cmd("PING", "shown")
    assert raw.read_some() == b"$5\r\nshown\r\n"


def test_client_pause_write_holds_writes_until_unpause(r, server):
    writer = RawConnection(server.port)
    assert r.client_pause(100_000, all=False) is True
    writer.cmd("GET", "x")
    assert writer.read_some(0.5) == b"$-1\r\n"  # reads go on
    writer.cmd("SET", "x", "1")
    assert writer.read_some(0.3) == b""  # the write waits
    assert r.info("clients")["blocked_clients"] == 1
    assert r.get("x") is None
    assert r.client_unpause() in (True, b"OK")
    assert writer.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    assert r.get("x") == b"1"
    assert r.info("clients")["blocked_clients"] == 0
    writer.close()


def test_client_pause_write_holds_exec_with_queued_writes(r, server):
    conn = RawConnection(server.port)
    r.client_pause(100_000, all=False)
    conn.cmd("MULTI")
    conn.cmd("GET", "x")
    conn.cmd("EXEC")
    expected = b"+OK\r\n+QUEUED\r\n*1\r\n$-1\r\n"
    assert conn.read_exactly(expected) == expected
    conn.cmd("MULTI")
    assert conn.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    conn.cmd("SET", "x", "1")  # a write is held even while queueing, as in Redis 7
    assert conn.read_some(0.3) == b""
    r.client_unpause()
    conn.cmd("EXEC")
    assert conn.read_exactly(b"+QUEUED\r\n*1\r\n+OK\r\n") == b"+QUEUED\r\n*1\r\n+OK\r\n"
    conn.close()


def test_client_pause_all_holds_every_command_until_the_timeout(r, server):
    other = RawConnection(server.port)
    r.client_pause(400)
    start = time.monotonic()
    other.cmd("PING")
    assert other.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"
    assert time.monotonic() - start >= 0.3
    other.close()


def test_client_pause_held_commands_run_in_arrival_order(r, server):
    conns = [RawConnection(server.port) for _ in range(3)]
    r.client_pause(100_000, all=False)
    for i, conn in enumerate(conns):
        conn.cmd("RPUSH", "order", str(i))
        time.sleep(0.05)
    r.client_unpause()
    for conn in conns:
        conn.read_some(1.0)
        conn.close()
    assert r.lrange("order", 0, -1) == [b"0", b"1", b"2"]


def test_client_unblock_timeout_and_error(r, server):
    blocked = RawConnection(server.port)
    blocked.cmd("CLIENT", "ID")
    blocked_id = int(blocked.read_some().strip()[1:])
    blocked.cmd("BLPOP", "nolist", "0")
    time.sleep(0.1)
    assert r.client_unblock(blocked_id) == 1
    assert blocked.read_some() == b"*-1\r\n"
    blocked.cmd("BLPOP", "nolist", "0")
    time.sleep(0.1)
    assert r.client_unblock(blocked_id, error=True) == 1
    assert blocked.read_some() == b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    assert r.client_unblock(blocked_id) == 0
    assert r.client_unblock(99999) == 0
    blocked.close()


def test_client_tracking_on_and_off(rr):
    """The modes and invalidations are in test_tracking.py."""
    assert rr.execute_command("CLIENT", "TRACKING", "ON") in (b"OK", "OK", True)
    assert rr.execute_command("CLIENT", "GETREDIR") == 0
    assert rr.execute_command("CLIENT", "TRACKING", "OFF") in (b"OK", "OK", True)
    assert rr.execute_command("CLIENT", "GETREDIR") == -1


def test_client_trackinginfo_shape(raw):
    raw.cmd("CLIENT", "TRACKINGINFO")
    assert raw.read_some() == b"*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"


def test_client_no_evict_and_no_touch_show_in_flags(r):
    assert r.execute_command("CLIENT", "NO-EVICT", "on") == b"OK"
    assert r.execute_command("CLIENT", "NO-TOUCH", "on") == b"OK"
    assert r.client_info()["flags"] == "eT"
    r.execute_command("CLIENT", "NO-EVICT", "off")
    r.execute_command("CLIENT", "NO-TOUCH", "off")
    assert r.client_info()["flags"] == "N"


def test_client_help_lists_subcommands(rr):
    lines = [line.decode() if isinstance(line, bytes) else line for line in rr.execute_command("CLIENT", "HELP")]
    assert lines[0] == "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert "SETINFO <option> <value>" in lines and lines[-2:] == ["HELP", "    Prints this help."]


def test_client_pause_write_runs_the_held_write_when_it_times_out(server):
    result = []
    admin = redis.Redis(port=server.port)
    admin.client_pause(300, all=False)
    worker = threading.Thread(target=lambda: result.append(redis.Redis(port=server.port).set("t", "1")))
    start = time.monotonic()
    worker.start()
    worker.join(5)
    assert result == [True] and time.monotonic() - start >= 0.2
    admin.close()


def test_unix_socket_client_has_u_flag(make_server, tmp_path):
    path = str(tmp_path / "pion.sock")
    srv = make_server(unixsocket=path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.sendall(b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n")
    time.sleep(0.1)
    data = sock.recv(65536).decode()
    assert " flags=U " in data
    sock.close()
    assert srv.port
