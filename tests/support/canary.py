"""A canary client: its own connection sends PING every 20 ms while a test runs a hostile command
on another, and records how long each PING waited. The longest wait is what every other client
of the server would have waited: one command that holds the event loop shows up here.

``with Canary(port) as canary: ...`` then ``canary.longest`` (seconds); ``canary.pings`` counts
the answers, so a test can check the canary really ran while the command did.
"""

from __future__ import annotations

import socket
import threading
import time


class Canary:
    def __init__(self, port: int, interval: float = 0.02, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.interval = interval
        self.longest = 0.0
        self.pings = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sock: socket.socket | None = None

    def __enter__(self) -> Canary:
        self._sock = socket.create_connection((self.host, self.port), timeout=60)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ping()  # connected and answering before the hostile command starts
        self._thread.start()
        time.sleep(self.interval * 3)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
        if self._sock is not None:
            self._sock.close()

    def _ping(self) -> float:
        assert self._sock is not None
        start = time.perf_counter()
        self._sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            chunk = self._sock.recv(64)
            if not chunk:
                raise ConnectionError("the server closed the canary's connection")
            got += chunk
        if got != b"+PONG\r\n":
            raise AssertionError(f"canary got {got!r}")
        return time.perf_counter() - start

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                waited = self._ping()
                self.pings += 1
                self.longest = max(self.longest, waited)
                self._stop.wait(self.interval)
        except BaseException as exc:  # reported by check()
            self.error = exc

    def check(self, bound: float) -> float:
        """Fail unless the canary answered throughout with no wait over ``bound``; the longest wait."""
        if self.error is not None:
            raise self.error
        assert self.pings >= 1, "the canary never pinged while the command ran"
        assert self.longest < bound, f"the canary waited {self.longest:.3f} s (bound {bound} s)"
        return self.longest
