"""MONITOR's line for a command leaves after that command's own reply (ioredis's monitor test
closes the writer when the line arrives and fails if the writer's reply is still missing)."""

from __future__ import annotations

import select
import socket

import pytest


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _reply_was_first(port: int, argv: tuple[bytes, ...]) -> bool:
    monitor, writer = _connect(port), _connect(port)
    monitor.sendall(_command(b"MONITOR"))
    assert monitor.recv(100) == b"+OK\r\n"
    writer.sendall(_command(*argv))
    select.select([monitor], [], [], 5)
    line = monitor.recv(65536)
    assert argv[0].lower() in line.lower()
    ready, _, _ = select.select([writer], [], [], 0)  # the writer's reply must already be there
    monitor.close(), writer.close()
    return bool(ready)


@pytest.mark.parametrize("argv", [(b"GET", b"foo"), (b"SET", b"foo", b"bar"), (b"INCR", b"n"),
                                  (b"EVAL", b"return redis.call('set', 'k', 'v')", b"0")])
def test_monitor_line_follows_the_reply(server, argv):
    """Strict in Pion; Redis writes both in one beforeSleep, the monitor's first as often as not."""
    for _ in range(5):
        assert _reply_was_first(server.port, argv)
