"""Authentication: requirepass gating in RESP2 and RESP3 (HELLO AUTH), redis-py with
username/password, error texts, the delay a failed guess costs, what never shows a password,
and the start-time refusals (exposed bind, bad tenant specs, --requirepass-file)."""

from __future__ import annotations

import logging
import pathlib
import socket
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pion.cli.server_main import build_settings
from pion.config import ConfigError
from pion.server.run import StartupError
from tests.conftest import RawConnection
from tests.support.servers import ThreadServer, make_settings

PW = "s3cret-admin"
NO_RETRY = Retry(NoBackoff(), 0)


def client(srv, protocol: int = 2, **kw) -> redis.Redis:
    return redis.Redis(port=srv.port, protocol=protocol, socket_timeout=10, retry=NO_RETRY, **kw)


@pytest.fixture
def locked(make_server):
    return make_server(requirepass=PW)


@pytest.fixture
def raw_locked(locked):
    conn = RawConnection(locked.port)
    yield conn
    conn.close()


# -- gating ---------------------------------------------------------------------------------------


def test_every_command_needs_auth_first_resp2(raw_locked):
    raw = raw_locked
    for command in (("PING",), ("GET", "k"), ("SET", "k", "v"), ("CONFIG", "GET", "port"), ("KEYS", "*")):
        raw.cmd(*command)
        assert raw.read_exactly(b"-NOAUTH Authentication required.\r\n") == b"-NOAUTH Authentication required.\r\n"
    raw.send(b"PING\r\n")  # inline commands too
    assert raw.read_exactly(b"-NOAUTH Authentication required.\r\n") == b"-NOAUTH Authentication required.\r\n"
    raw.cmd("AUTH", "nope")
    wrong = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    assert raw.read_exactly(wrong) == wrong
    raw.cmd("AUTH", PW)
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    raw.cmd("PING")
    assert raw.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"


def test_hello_needs_auth_or_authenticates_resp3(raw_locked):
    raw = raw_locked
    raw.cmd("HELLO", "3")
    assert raw.read_some().startswith(b"-NOAUTH HELLO must be called with the client already authenticated")
    raw.cmd("HELLO", "3", "AUTH", "default", "bad")
    assert raw.read_some(2.0) == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    raw.cmd("HELLO", "3", "AUTH", "default", PW)
    reply = raw.read_some()
    assert reply.startswith(b"%7\r\n") and b"proto\r\n:3" in reply
    raw.cmd("GET", "missing")
    assert raw.read_exactly(b"_\r\n") == b"_\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_with_password_and_username(locked, protocol):
    with client(locked, protocol, password=PW) as c:
        assert c.set("k", "v") and c.get("k") == b"v"
        assert c.acl_whoami() in (b"default", "default")
    with client(locked, protocol, username="default", password=PW) as c:
        assert c.get("k") == b"v"
    with client(locked, protocol, password="wrong") as c, pytest.raises(redis.AuthenticationError):
        c.ping()
    with client(locked, protocol) as c, pytest.raises(redis.AuthenticationError):
        c.get("k")


def test_auth_without_a_password_configured(server):
    r = client(server)
    with pytest.raises(redis.AuthenticationError, match="AUTH <password> called without any password configured"):
        r.execute_command("AUTH", "x")
    assert r.execute_command("AUTH", "default", "anything") is True  # the nopass default user, as Redis
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        r.execute_command("AUTH", "nobody", "x")
    r.close()


def test_reset_forgets_the_authentication(raw_locked):
    raw = raw_locked
    raw.cmd("AUTH", PW)
    raw.read_exactly(b"+OK\r\n")
    raw.cmd("RESET")
    assert raw.read_exactly(b"+RESET\r\n") == b"+RESET\r\n"
    raw.cmd("PING")
    assert raw.read_some().startswith(b"-NOAUTH")


# -- the cost of a failed guess --------------------------------------------------------------------


def test_failed_auth_delay_grows_without_blocking_others(locked):
    other = client(locked, password=PW)
    assert other.ping() is True  # authenticated before the guessing starts (an AUTH now would queue)
    raw = RawConnection(locked.port)
    times = []
    for _ in range(4):
        start = time.perf_counter()
        raw.cmd("AUTH", "guess")
        assert raw.read_some(5).startswith(b"-WRONGPASS")
        times.append(time.perf_counter() - start)
    assert times[0] >= 0.02 and times[3] >= 0.15 and times[3] > times[0]
    raw.cmd("AUTH", "guess")  # held 0.4 s: meanwhile others are served at once
    assert other.ping() is True
    assert raw.read_some(0.05) == b""  # the guesser is still waiting
    assert raw.read_some(5).startswith(b"-WRONGPASS")
    raw.cmd("AUTH", PW)
    assert raw.read_some(5) == b"+OK\r\n"  # a right password is answered without delay
    raw.close()
    other.close()


def test_guesses_inside_multi_each_cost_time(locked):
    raw = RawConnection(locked.port)
    raw.cmd("AUTH", PW)
    raw.read_exactly(b"+OK\r\n")
    start = time.perf_counter()
    raw.send(b"MULTI\r\n" + b"AUTH a\r\nAUTH b\r\nAUTH c\r\nAUTH d\r\nAUTH e\r\n" + b"EXEC\r\n")
    data = b""
    while data.count(b"WRONGPASS") < 5:
        chunk = raw.read_some(5)
        assert chunk, data
        data += chunk
    assert data.startswith(b"+OK\r\n+QUEUED\r\n") and b"*5\r\n-WRONGPASS" in data
    assert time.perf_counter() - start >= 0.7  # every guess was paid for (0.025 + 0.05 + 0.1 + 0.2 + 0.4 s, timer slack)
    raw.cmd("PING")  # still the admin: a failed AUTH does not log a client out
    assert raw.read_some() == b"+PONG\r\n"
    raw.close()


def test_failed_auth_is_logged_without_the_password(locked, caplog):
    caplog.set_level(logging.WARNING, logger="pion.auth")
    with client(locked, username="mallory", password="hunter2-guess") as c, pytest.raises(redis.AuthenticationError):
        c.ping()
    text = caplog.text
    assert "AUTH failed for user 'mallory'" in text and "hunter2-guess" not in text


# -- credentials never shown -------------------------------------------------------------------------


def test_slowlog_monitor_and_client_list_hide_credentials(locked):
    admin = client(locked, password=PW)
    admin.config_set("slowlog-log-slower-than", 0)
    mon_conn = RawConnection(locked.port)
    mon_conn.cmd("AUTH", PW)
    mon_conn.read_exactly(b"+OK\r\n")
    mon_conn.cmd("MONITOR")
    mon_conn.read_exactly(b"+OK\r\n")
    other = client(locked, password=PW)
    other.execute_command("CONFIG", "SET", "requirepass", "n3w-secret")
    other.execute_command("AUTH", "n3w-secret")
    other.set("after", "1")
    time.sleep(0.2)
    shown = mon_conn.read_some()
    assert b"after" in shown and b"n3w-secret" not in shown and b"(redacted)" in shown
    log = admin.slowlog_get(128)
    flat = repr(log)
    assert "n3w-secret" not in flat and PW not in flat and "(redacted)" in flat
    assert "n3w-secret" not in repr(admin.client_list()) and PW not in repr(admin.client_list())
    mon_conn.close()
    admin.close()
    other.close()


def test_status_and_crash_files_hold_no_password(locked):
    with client(locked, password=PW) as c:
        c.set("k", "v")
    time.sleep(1.2)  # the status file is rewritten once a second
    found = [p for p in pathlib.Path(locked.settings.dir).rglob("*") if p.is_file()]
    assert found
    for path in found:
        assert PW.encode() not in path.read_bytes(), path


# -- pre-auth limits ------------------------------------------------------------------------------


def test_unauthenticated_frames_are_capped(locked):
    raw = RawConnection(locked.port)
    raw.send(b"*11\r\n")
    assert raw.read_some() == b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    assert raw.is_closed()
    raw = RawConnection(locked.port)
    raw.send(b"*2\r\n$3\r\nSET\r\n$16385\r\n")
    assert raw.read_some() == b"-ERR Protocol error: unauthenticated bulk length\r\n"
    assert raw.is_closed()
    raw = RawConnection(locked.port)  # after AUTH the same frames are fine, in the same pipeline
    big = b"x" * 100000
    raw.send(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(PW), PW.encode())
             + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n" % (len(big), big))
    assert raw.read_exactly(b"+OK\r\n+OK\r\n") == b"+OK\r\n+OK\r\n"
    raw.cmd("RESET")  # unauthenticated again: the caps are back
    raw.read_exactly(b"+RESET\r\n")
    raw.send(b"*12\r\n")
    assert raw.read_some() == b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    raw.close()


# -- refusing an unsafe start -------------------------------------------------------------------------


def refused(tmp_path, **settings) -> str:
    """The StartupError text of a server that must not start."""
    with pytest.raises(StartupError) as exc:
        ThreadServer(make_settings(tmp_path, **settings)).start()
    return str(exc.value)


def test_non_loopback_bind_without_password_is_refused(make_server, tmp_path):
    assert "--protected-mode no" in refused(tmp_path, bind=("0.0.0.0",))
    assert "not a valid IPv4 or IPv6 address" in refused(tmp_path, bind=("999.999.1.1",))
    srv = make_server(bind=("127.0.0.1", "0.0.0.0"), requirepass=PW)
    with client(srv, password=PW) as c:
        assert c.ping()
    srv = make_server(bind=("0.0.0.0",), protected_mode=False)
    with client(srv) as c:
        assert c.ping()


def local_address() -> str | None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_config_set_cannot_expose_the_server(r):
    address = local_address()
    if address is None:
        pytest.skip("no non-loopback address on this machine")
    with pytest.raises(redis.ResponseError, match="without a password"):
        r.config_set("bind", f"127.0.0.1 {address}")
    assert r.config_get("bind") == {"bind": "127.0.0.1"}
    assert r.ping()


def test_tenants_need_requirepass_and_valid_specs(tmp_path):
    assert "--tenant needs --requirepass" in refused(tmp_path, tenants=("alice:pw",))
    for bad in ("alice", "Zq9pw", "bad name:Zq9pw", "default:Zq9pw", "alice:", "alice:Zq9pw:quota=lots",
                "alice:Zq9pw,alice:Zq9pw"):
        message = refused(tmp_path, requirepass=PW, tenants=tuple(bad.split(",")))
        assert message and "Zq9pw" not in message


def test_requirepass_file_and_environment(tmp_path, monkeypatch):
    secret = tmp_path / "pass"
    secret.write_text("from-file\n")
    assert build_settings(["--requirepass-file", str(secret)]).requirepass == "from-file"
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        build_settings(["--requirepass-file", str(tmp_path / "empty")])
    monkeypatch.setenv("PION_REQUIREPASS", "from-env")
    assert build_settings([]).requirepass == "from-env"
    assert build_settings(["--requirepass", "flag"]).requirepass == "flag"
    settings = build_settings(["--tenant", "a:x", "--tenant", "b:y:quota=1mb"])
    assert settings.tenants == ("a:x", "b:y:quota=1mb")


def test_config_get_never_shows_tenant_passwords(make_server):
    srv = make_server(requirepass=PW, tenants=("alice:tenant-pw",))
    with client(srv, password=PW) as c:
        assert "tenant-pw" not in repr(c.config_get("*"))



def test_a_config_set_refused_for_exposure_binds_nothing_first(r, monkeypatch):
    """Issue #13: ``CONFIG SET port P2 bind 0.0.0.0`` was refused only after P2 had been bound on
    every address (a probe connected once); the protected-mode check now runs before binding."""
    from pion.server.admin import config_rewrite
    from tests.support.servers import free_port

    calls: list = []
    real = config_rewrite._bind_all
    monkeypatch.setattr(config_rewrite, "_bind_all", lambda *args: calls.append(args) or real(*args))
    port = free_port()
    with pytest.raises(redis.ResponseError, match="without a password"):
        r.execute_command("CONFIG", "SET", "port", port, "bind", "0.0.0.0")
    assert calls == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert r.config_get("bind") == {"bind": "127.0.0.1"} and r.ping()


def test_guesses_from_many_connections_of_one_address_wait_in_line(locked):
    """Issue #13: each failed AUTH slowed its own connection only, so 50 connections from one
    address made 27.8 guesses/s. The delays of one address now queue: 8 concurrent guesses are
    answered one after another (25 + 50 + ... + 2000 ms), and a right password sent meanwhile
    from the same address waits its turn too."""
    conns = [RawConnection(locked.port) for _ in range(8)]
    start = time.perf_counter()
    for conn in conns:
        conn.cmd("AUTH", "guess")
    right = RawConnection(locked.port)
    right.cmd("AUTH", PW)
    assert right.read_some(30) == b"+OK\r\n"
    assert time.perf_counter() - start >= 4.0  # behind the queued guesses (5.2 s of delays)
    for conn in conns:
        assert conn.read_some(30).startswith(b"-WRONGPASS")
        conn.close()
    right.close()


def test_an_address_with_a_full_queue_gets_its_auths_refused_unchecked(locked):
    users = locked.server.parts.acl
    guesser = RawConnection(locked.port)
    guesser.cmd("AUTH", "guess")
    assert guesser.read_some(5).startswith(b"-WRONGPASS")
    locked.call(lambda: users.failures["127.0.0.1"].__setitem__(2, time.monotonic() + 30))  # 30 s queued
    right = RawConnection(locked.port)
    right.cmd("AUTH", PW)
    assert right.read_some(5).startswith(b"-ERR too many failed AUTH attempts from this address")
    right.cmd("PING")
    assert right.read_some(5).startswith(b"-NOAUTH")
    guesser.close()
    right.close()


def test_a_preauth_oversize_frame_is_answered_and_logged_once(locked, caplog, monkeypatch):
    """Issue #13: with a password set, a large pre-auth frame arriving in one read was reset with
    no reply and ~1 KiB of traceback per connection in the log (the pre-auth caps were switched on
    only after the first read had been parsed without them)."""
    from pion.server.net import conn_errors
    monkeypatch.setitem(conn_errors._preauth, "next", 0.0)  # the rate limit's window is per process
    caplog.set_level(logging.WARNING)
    for _ in range(20):
        raw = RawConnection(locked.port)
        raw.send(b"*2\r\n$4\r\nAUTH\r\n$1000000\r\n" + b"x" * 200_000)
        assert raw.read_some(5) == b"-ERR Protocol error: unauthenticated bulk length\r\n"
        assert raw.is_closed()
        raw.close()
    lines = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(lines) == 1 and "unauthenticated" in lines[0].getMessage() and lines[0].exc_info is None
