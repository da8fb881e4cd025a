"""Operator breadcrumbs in the data directory: the lock, the status file and the crash log.

- ``pion.lock``: held with ``flock`` for the server's life, so a second server pointed at the
  same directory refuses to start (two writers would interleave one log).
- ``pion.status`` (``--status-file``): ``key=value`` lines rewritten every second (temp file +
  rename, so a reader never sees half of one). ``state`` is ``running``, ``stopped`` (a clean
  stop) or ``crashed`` with ``signal``, ``signal_name`` and ``exit_unix_s`` (SIGHUP, SIGQUIT...,
  SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE) or ``exception``. A SIGKILL or OOM kill cannot run
  any code, so it leaves ``state=running`` with a stale ``heartbeat_unix_s``, and ``rss_bytes``
  near the machine's memory means the OOM killer.
- ``pion.crash.log`` (``--crash-log``): one line per start and exit; on an uncaught exception or a
  fatal signal a ``PION CRASH`` line with the time, the cause and the last command; faults add
  faulthandler's traceback; RSS over ``--rss-warn-pct`` of the machine's memory a ``PION WARN``.

Faults (SIGSEGV, SIGABRT...) cannot run Python code. So faulthandler writes its traceback into a
pipe read by a small watcher process started with the server; when the server dies, the watcher
appends the traceback to the crash log and marks the status file ``state=crashed`` with the
signal. A clean stop closes the pipe with nothing in it and the watcher exits.
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
from pion.server.admin.info import rss_bytes

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
    """Rewrites the status file at most once a second from the cron (``path`` None: off)."""

    def __init__(self, path: str | None, fields: Callable[[], dict[str, Any]], warn_pct: int = 70,
                 warn: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.fields = fields
        self.last = 0.0
        self.rss_peak = 0
        self.warn_pct = warn_pct
        self.warn = warn
        self.warned = False

    def tick(self, force: bool = False, state: str = "running", extra: dict[str, Any] | None = None) -> None:
        now = time.time()
        if not force and now - self.last < 1.0:
            return
        self.last = now
        rss = rss_bytes()
        self.rss_peak = max(self.rss_peak, rss)
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        pct = 100.0 * rss / total if total else 0.0
        if pct >= self.warn_pct and self.warn_pct <= 100 and not self.warned and self.warn is not None:
            self.warned = True
            self.warn(f"rss_bytes={rss} is {pct:.0f}% of total_ram_bytes={total}: the OS may kill this process "
                      "(OOM) without a catchable signal")
        if self.path is None:
            return
        lines = {
            "pion_status_version": 1, "state": state, "pid": os.getpid(), "version": __version__,
            "heartbeat_unix_s": int(now), "rss_bytes": rss, "rss_peak_bytes": self.rss_peak,
            "total_ram_bytes": total, "rss_pct": "%.1f" % pct,
        }
        lines.update(extra or {})
        try:
            lines.update(self.fields())
        except Exception:  # a crash report must not fail on a half-torn-down server
            pass
        text = "".join(f"{key}={_clean(value)}\n" for key, value in lines.items())
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a full disk must not stop the server; the log says the rest


def breadcrumbs(settings: Any, directory: str, server: Server, fields: Callable[[], dict[str, Any]],
                ) -> tuple[StatusFile, CrashLog]:
    """The status file and crash log the settings ask for (``--status-file``, ``--crash-log``,
    ``--no-crash-log``, ``--rss-warn-pct``); relative paths are under the data directory."""
    on = settings.breadcrumbs
    status_path = os.path.join(directory, settings.status_file or STATUS_NAME) if on else None
    crash_path = os.path.join(directory, settings.crash_log or CRASH_NAME) if on else None
    status = StatusFile(status_path, fields, settings.rss_warn_pct)
    crash = CrashLog(crash_path, server, status)
    status.warn = crash.warn
    return status, crash


def _clean(value: Any) -> str:
    return str(value).replace("\n", " ").replace("\r", " ")


class CrashLog:
    """Appends start/exit/crash lines; installs the hooks only in the process's main thread
    (a server run inside a test thread must not take over the test runner's handlers).
    ``path`` None: no crash log, no hooks."""

    def __init__(self, path: str | None, server: Server, status: StatusFile | None = None) -> None:
        self.path = path
        self.server = server
        self.status = status
        self.handle: Any = None
        self.installed = False
        self.watcher: Any = None
        self._previous_excepthook: Any = None

    def line(self, text: str) -> None:
        if self.path is None:
            return
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
        if self.path is None or threading.current_thread() is not threading.main_thread():
            return
        self.installed = True
        self.watcher = start_watcher(self.status.path if self.status is not None else None, self.path)
        target = self.watcher.stdin if self.watcher is not None else self.handle
        if target is not None:
            faulthandler.enable(file=target, all_threads=True)
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

    def warn(self, text: str) -> None:
        self.line(f"PION WARN: {text}")
        import logging

        logging.getLogger("pion.server").warning("%s", text)

    def _mark(self, extra: dict[str, Any]) -> None:
        if self.status is not None:
            self.status.tick(force=True, state="crashed", extra={**extra, "exit_unix_s": int(time.time())})

    def _excepthook(self, exc_type: type, exc: BaseException, tb: Any) -> None:
        if not issubclass(exc_type, KeyboardInterrupt):
            self.crash(f"exception {exc_type.__name__}: {exc}")
            self._mark({"exception": exc_type.__name__})
        (self._previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)

    def _thread_excepthook(self, args: Any) -> None:
        self.crash(f"exception in thread {args.thread.name if args.thread else '?'}: "
                   f"{args.exc_type.__name__}: {args.exc_value}")
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)

    def _on_signal(self, number: int, frame: Any) -> None:
        name = signal.Signals(number).name
        self.crash(f"signal {name} ({number})")
        self._mark({"signal": number, "signal_name": name})
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)

    def stop(self, how: str = "clean shutdown") -> None:
        self.line(f"PION EXIT: {how} pid={os.getpid()}")
        if self.installed:
            with contextlib.suppress(Exception):
                faulthandler.disable()
            if self._previous_excepthook is not None:
                sys.excepthook = self._previous_excepthook
        stop_watcher(self.watcher)
        self.watcher = None
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            self.handle = None


#: the watcher: reads faulthandler's traceback until the server's end of the pipe closes; if
#: there is one, the server died of a fault: append it to the crash log, mark the status file
_WATCHER = r"""
import os, signal, sys, time
for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGPIPE"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
status_path, crash_path = sys.argv[1], sys.argv[2]
data = sys.stdin.buffer.read()
if not data:
    sys.exit(0)
text = data.decode("utf-8", "replace")
faults = (("Segmentation fault", "SIGSEGV"), ("Aborted", "SIGABRT"), ("Bus error", "SIGBUS"),
          ("Illegal instruction", "SIGILL"), ("Floating-point exception", "SIGFPE"),
          ("Floating point exception", "SIGFPE"))
name = next((sig for words, sig in faults if "Fatal Python error: " + words in text), "")
number = int(getattr(signal, name, 0)) if name else 0
now = time.time()
stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
with open(crash_path, "a", encoding="utf-8") as f:
    f.write(f"{stamp} PION CRASH: signal {name or 'unknown'} ({number}) pid={os.getppid()}; faulthandler:\n{text}")
if status_path and name:
    try:
        with open(status_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    drop = ("signal=", "signal_name=", "exit_unix_s=")
    out = ["state=crashed" if line.startswith("state=") else line for line in lines if not line.startswith(drop)]
    if not any(line.startswith("state=") for line in out):
        out.append("state=crashed")
    out += [f"signal={number}", f"signal_name={name}", f"exit_unix_s={int(now)}"]
    with open(status_path + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    os.replace(status_path + ".tmp", status_path)
"""


def start_watcher(status_path: str | None, crash_path: str) -> Any:
    """The fault watcher process (its stdin is faulthandler's file), or None if it cannot start."""
    import subprocess

    try:
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, status_path or "", crash_path],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True)
    except OSError:
        return None


def stop_watcher(watcher: Any) -> None:
    """A clean stop: close the pipe empty, so the watcher exits without a word."""
    if watcher is None:
        return
    with contextlib.suppress(OSError, ValueError):
        watcher.stdin.close()
    with contextlib.suppress(Exception):
        watcher.wait(5)
