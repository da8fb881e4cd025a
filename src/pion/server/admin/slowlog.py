"""SLOWLOG: the last N commands slower than ``slowlog-log-slower-than`` microseconds."""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

from pion.server.redaction import slowlog_argv

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client

MAX_ARGS = 32
MAX_ARG_LEN = 128


class SlowLog:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.entries: deque[list[Any]] = deque()
        self.next_id = 0

    def observe(self, client: Client, argv: list[bytes], usec: int) -> None:
        threshold = self.server.settings.slowlog_log_slower_than
        if threshold < 0 or usec < threshold:
            return
        self.add(client, argv, usec)

    def add(self, client: Client, argv: list[bytes], usec: int) -> None:
        shown = _shown_args(argv)
        entry = [self.next_id, int(time.time()), usec, shown, client.addr.encode(), client.name]
        self.next_id += 1
        self.entries.appendleft(entry)
        while len(self.entries) > max(self.server.settings.slowlog_max_len, 0):
            self.entries.pop()

    def reset(self) -> None:
        self.entries.clear()


def _shown_args(argv: list[bytes]) -> list[bytes]:
    argv = slowlog_argv(argv)  # AUTH, CONFIG SET requirepass ...: credentials hidden
    shown = []
    for i, arg in enumerate(argv):
        if i == MAX_ARGS - 1 and len(argv) > MAX_ARGS:
            shown.append(b"... (%d more arguments)" % (len(argv) - MAX_ARGS + 1))
            break
        if len(arg) > MAX_ARG_LEN:  # bytes() too: a large argument may be a memoryview (zero_copy)
            arg = bytes(arg[:MAX_ARG_LEN]) + b"... (%d more bytes)" % (len(arg) - MAX_ARG_LEN)
        shown.append(arg)
    return shown
