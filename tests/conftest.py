"""Shared fixtures: ``server`` (Pion in a thread, fresh per test), ``r``/``r3`` (redis-py in RESP2
and RESP3), ``rr`` (both, parametrized), ``make_server`` for custom settings, ``redis_ref``
(Debian's redis-server, skipped if absent) and ``raw`` (a raw socket speaking bytes)."""

from __future__ import annotations

import os
import socket

import pytest
import redis

from tests.support import strays
from tests.support.servers import RedisServer, ThreadServer, make_settings

_SESSION = strays.mark_session()


def pytest_sessionfinish(session, exitstatus):
    """Fail the session when a process a test started is still alive (then kill it)."""
    if not os.path.isdir("/proc") or os.environ.get("PION_ALLOW_STRAYS"):
        return
    left = strays.strays(_SESSION)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) started by the tests outlived them (killed now):"]
    lines += [f"  pid {pid}: {cmdline[:200]}" for pid, cmdline in sorted(left.items())]
    for line in lines:
        reporter.write_line(line, red=True) if reporter is not None else print(line)
    strays.kill(left)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def make_server(tmp_path):
    started: list[ThreadServer] = []

    def start(**overrides: object) -> ThreadServer:
        datadir = tmp_path / f"data{len(started)}"
        datadir.mkdir(exist_ok=True)
        srv = ThreadServer(make_settings(datadir, **overrides)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def server(make_server):
    return make_server()


def _client(srv: ThreadServer, protocol: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=srv.port, protocol=protocol, socket_timeout=10)


@pytest.fixture
def r(server):
    client = _client(server, 2)
    yield client
    client.close()


@pytest.fixture
def r3(server):
    client = _client(server, 3)
    yield client
    client.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def rr(request, server):
    client = _client(server, request.param)
    client.protocol_version = request.param
    yield client
    client.close()


class RawConnection:
    """Bytes in, bytes out: for exact-reply tests."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def cmd(self, *args: bytes | str) -> None:
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg.encode() if isinstance(arg, str) else arg
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.send(b"".join(parts))

    def read_exactly(self, expected: bytes) -> bytes:
        """Read until ``len(expected)`` bytes arrived and return them."""
        while len(self.buf) < len(expected):
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        data, self.buf = self.buf[: len(expected)], self.buf[len(expected):]
        return data

    def read_some(self, timeout: float = 1.0) -> bytes:
        self.sock.settimeout(timeout)
        try:
            data = self.buf + self.sock.recv(65536)
        except TimeoutError:
            data = self.buf
        self.buf = b""
        self.sock.settimeout(5)
        return data

    def is_closed(self, timeout: float = 2.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except TimeoutError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(server):
    conn = RawConnection(server.port)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def redis_ref(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server not installed (make test installs it)")
    srv = RedisServer(tmp_path_factory.mktemp("redis-ref")).start()
    yield srv
    srv.stop()
