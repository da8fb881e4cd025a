"""Operator breadcrumbs in the data directory: the lock, the status file and the crash log.

- ``pion.lock``: held with ``flock`` for the server's life, so a second server pointed at the
  same directory refuses to start (two writers would interleave one log).
- ``pion.status``: ``key=value`` lines rewritten every second (temp file + rename, so a reader
  never sees half of one). A SIGKILL or OOM kill cannot run any code, so this file is what is
  left: ``state=running`` with a stale ``heartbeat_unix_s`` means the process was killed, and
  ``rss_bytes`` near the machine's memory means the OOM killer.
- ``pion.crash.log``: one line per start and exit; on an uncaught exception or a fatal signal a
  ``PION CRASH`` line with the time, the cause and the last command; faults (SIGSEGV, ...) add
  faulthandler's traceback.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pion import __version__
from pion.server.info import rss_bytes

if TYPE_CHECKING:
    from pion.server.app import Server

LOCK_NAME = "pion.lock"
STATUS_NAME = "pion.status"
CRASH_NAME = "pion.crash.log"
#: signals that end the process which Python can still see (faults go through faulthandler)
_FATAL_SIGNALS = ("SIGHUP", "SIGQUIT", "SIGXCPU", "SIGXFSZ")


class DirLockedError(Exception):
    """Another server holds the data directory."""


class DataDirLock:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK_NAME)
        self.fd = -1

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DirLockedError(
                f"data directory {os.path.dirname(self.path) or '.'} is in use by another Pion server "
                f"(pid {holder}, lock {self.path}); stop that server or start this one with another --dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
                os.close(self.fd)
            self.fd = -1


def last_command(server: Server) -> str:
    """The command most recently run by any client (best effort: per-client last command)."""
    best = None
    for client in list(server.clients.values()):
        if best is None or client.last_interaction > best.last_interaction:
            best = client
    return best.last_cmd if best is not None else "NULL"


class StatusFile:
    """Rewrites ``pion.status`` at most once a second from the cron."""

    def __init__(self, directory: str, fields: Callable[[], dict[str, Any]]) -> None:
        self.path = os.path.join(directory, STATUS_NAME)
        self.fields = fields
        self.last = 0.0
        self.rss_peak = 0

    def tick(self, force: bool = False, state: str = "running") -> None:
        now = time.time()
        if not force and now - self.last < 1.0:
            return
        self.last = now
        rss = rss_bytes()
        self.rss_peak = max(self.rss_peak, rss)
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        lines = {
            "pion_status_version": 1, "state": state, "pid": os.getpid(), "version": __version__,
            "heartbeat_unix_s": int(now), "rss_bytes": rss, "rss_peak_bytes": self.rss_peak,
            "total_ram_bytes": total, "rss_pct": "%.1f" % (100.0 * rss / total if total else 0),
        }
        lines.update(self.fields())
        text = "".join(f"{key}={_clean(value)}\n" for key, value in lines.items())
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a full disk must not stop the server; the log says the rest


def _clean(value: Any) -> str:
    return str(value).replace("\n", " ").replace("\r", " ")


class CrashLog:
    """Appends start/exit/crash lines; installs the hooks only in the process's main thread
    (a server run inside a test thread must not take over the test runner's handlers)."""

    def __init__(self, directory: str, server: Server) -> None:
        self.path = os.path.join(directory, CRASH_NAME)
        self.server = server
        self.handle: Any = None
        self.installed = False
        self._previous_excepthook: Any = None

    def line(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        try:
            if self.handle is None:
                self.handle = open(self.path, "a", encoding="utf-8", buffering=1)
            self.handle.write(f"{stamp} {text}\n")
            self.handle.flush()
        except OSError:
            pass

    def start(self) -> None:
        server = self.server
        self.line(f"PION START: pid={os.getpid()} version={__version__} port={server.settings.port} "
                  f"dir={os.path.abspath(server.settings.dir)}")
        if threading.current_thread() is not threading.main_thread():
            return
        self.installed = True
        if self.handle is not None:
            faulthandler.enable(file=self.handle, all_threads=True)
        self._previous_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        threading.excepthook = self._thread_excepthook
        for name in _FATAL_SIGNALS:
            number = getattr(signal, name, None)
            if number is not None:
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(number, self._on_signal)

    def crash(self, cause: str, command: str | None = None) -> None:
        """The crash line; ``command`` is the one running, if the caller knows it."""
        running = f" command={command}" if command else ""
        self.line(f"PION CRASH: {cause} pid={os.getpid()} uptime_s={int(time.time() - self.server.start_time)}"
                  f"{running} last_command={last_command(self.server)} rss_bytes={rss_bytes()}")

    def _excepthook(self, exc_type: type, exc: BaseException, tb: Any) -> None:
        if not issubclass(exc_type, KeyboardInterrupt):
            self.crash(f"exception {exc_type.__name__}: {exc}")
        (self._previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)

    def _thread_excepthook(self, args: Any) -> None:
        self.crash(f"exception in thread {args.thread.name if args.thread else '?'}: "
                   f"{args.exc_type.__name__}: {args.exc_value}")
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)

    def _on_signal(self, number: int, frame: Any) -> None:
        name = signal.Signals(number).name
        self.crash(f"signal {name} ({number})")
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)

    def stop(self, how: str = "clean shutdown") -> None:
        self.line(f"PION EXIT: {how} pid={os.getpid()}")
        if self.installed:
            with contextlib.suppress(Exception):
                faulthandler.disable()
            if self._previous_excepthook is not None:
                sys.excepthook = self._previous_excepthook
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            self.handle = None
