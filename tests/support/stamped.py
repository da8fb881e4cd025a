"""A raw connection whose replies are read on a thread of their own and stamped with their
arrival time, so a test can see in which order replies reached it across connections (used by
``tests/server/test_query_slices.py`` and ``test_no_freeze.py``)."""

from __future__ import annotations

import socket
import threading
import time

import hiredis


class Conn:
    """A raw connection whose replies are read on a thread and stamped as they arrive."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.replies: list[tuple[float, object]] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        reader = hiredis.Reader()
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                with self._cond:
                    self.replies.append((time.perf_counter(), reply))
                    self._cond.notify_all()

    def send(self, *commands: tuple) -> float:
        self.sock.sendall(b"".join(hiredis.pack_command(tuple(c)) for c in commands))
        return time.perf_counter()

    def wait(self, count: int, timeout: float = 60.0) -> list[tuple[float, object]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.replies) >= count, timeout), self.replies
            return list(self.replies)

    def close(self) -> None:
        self.sock.close()
