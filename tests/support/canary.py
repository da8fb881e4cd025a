"""The canary: while one command runs, a second connection sends PING every 20 ms and records
how long each PONG took. Its longest wait is how long the server stopped serving everyone else:
one command that holds the event loop shows up here.

Two ways to use it:
- ``with Canary(port) as canary: ...`` then ``canary.check(bound)`` (raises if the canary failed,
  never answered, or waited ``bound`` seconds or more; returns the longest wait);
- ``watch(port, action)`` runs ``action()`` (on the calling thread) with the canary on a thread of
  its own and returns (what the action returned, the longest wait in seconds, the PINGs
  answered). ``command(port, *args)`` is an action's usual body: one command on its own raw
  connection, the reply parsed by hiredis as it arrives (C, in pieces), so parsing a large reply
  holds this process's GIL only briefly and the canary's figure is the server's.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import hiredis

INTERVAL = 0.02


class Canary:
    """PING every ``interval`` seconds on its own connection; ``longest`` is the longest wait."""

    def __init__(self, port: int, interval: float = INTERVAL, host: str = "127.0.0.1") -> None:
        self.port = port
        self.interval = interval
        self.longest = 0.0
        self.pings = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._sock = socket.create_connection((host, port), timeout=60)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ping()  # connected and answered before the watched command starts
        self.longest = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True, name="canary")

    def _ping(self) -> float:
        started = time.perf_counter()
        self._sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = self._sock.recv(64)
            if not chunk:
                raise ConnectionError("the server closed the canary's connection")
            data += chunk
        if data != b"+PONG\r\n":
            raise AssertionError(f"canary got {data!r}")
        return time.perf_counter() - started

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                waited = self._ping()
                self.pings += 1
                self.longest = max(self.longest, waited)
                self._stop.wait(self.interval)
        except BaseException as exc:  # reported by stop() / check()
            self.error = exc

    def start(self) -> Canary:
        self._thread.start()
        return self

    def _halt(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(120)
        self._sock.close()

    def stop(self) -> float:
        """Stop pinging; raise what went wrong in the canary; the longest wait."""
        self._halt()
        if self.error is not None:
            raise self.error
        return self.longest

    def __enter__(self) -> Canary:
        self.start()
        time.sleep(self.interval * 3)
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt()

    def check(self, bound: float) -> float:
        """Fail unless the canary answered throughout with no wait over ``bound``; the longest wait."""
        if self.error is not None:
            raise self.error
        assert self.pings >= 1, "the canary never pinged while the command ran"
        assert self.longest < bound, f"the canary waited {self.longest:.3f} s (bound {bound} s)"
        return self.longest


def watch(port: int, action: Callable[[], Any]) -> tuple[Any, float, int]:
    """Run ``action()`` under the canary: (its result, the canary's longest wait, PINGs answered)."""
    canary = Canary(port).start()
    try:
        time.sleep(2 * INTERVAL)  # a PING or two before the command starts
        result = action()
        time.sleep(2 * INTERVAL)
    finally:
        longest = canary.stop()
    return result, longest, canary.pings


def command(port: int, *args: Any, timeout: float = 120.0) -> Any:
    """One command on a raw connection of its own; the reply as hiredis gives it (an error
    reply comes back as a ``hiredis.ReplyError`` value, not raised)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(hiredis.pack_command(tuple(args)))
        reader = hiredis.Reader()
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection before the reply was whole")
            reader.feed(chunk)
            reply = reader.gets()
            if reply is not False:
                return reply
    finally:
        sock.close()
