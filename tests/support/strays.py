"""No process outlives the test session.

Every process a test starts (a server, a worker, a benchmark child, their children) inherits the
session's environment, so a marker variable set at the start names them all, even after a
crashed parent left them re-parented to init. At the end of the session the ones still alive are
listed, killed, and the session fails.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

MARKER = "PION_TEST_SESSION"


def mark_session() -> str:
    """Set the marker for this process and everything it starts (once per session)."""
    token = os.environ.get(MARKER) or uuid.uuid4().hex
    os.environ[MARKER] = token
    return token


def _marked(token: str) -> dict[int, str]:
    needle = f"{MARKER}={token}".encode()
    found = {}
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if needle not in handle.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if cmdline:  # a zombie has none: it is dead, only not reaped yet
            found[int(name)] = cmdline
    return found


def strays(token: str, grace: float = 5.0) -> dict[int, str]:
    """The marked processes still alive after ``grace`` seconds (servers shutting down get that)."""
    deadline = time.monotonic() + grace
    found = _marked(token)
    while found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = _marked(token)
    return found


def kill(pids: dict[int, str]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
