"""Test servers: Pion in a background thread (fast, per test), Pion as a subprocess (for kill -9),
and Debian's redis-server as the reference for differential tests."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from pion.config import Settings, settings_from_pairs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {port}")


class ThreadServer:
    """A Pion server on its own event loop in a daemon thread; ``port`` is bound at start."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import uvloop

        self.loop = uvloop.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            from pion.server.run import make_server

            self.server = make_server(self.settings)
            self.loop.run_until_complete(self.server.start())
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.stop())
        self.loop.close()

    def start(self) -> ThreadServer:
        self._thread.start()
        if not self._ready.wait(120):  # imports and start-up take over 30 s at load average 15+
            raise TimeoutError("the server thread did not start within 120 s")
        if self._error is not None:
            raise self._error
        return self

    @property
    def port(self) -> int:
        return self.server.bound_port

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the server's loop thread and return its result."""
        done = threading.Event()
        box: list = []

        def run() -> None:
            try:
                box.append((True, fn(*args)))
            except BaseException as exc:
                box.append((False, exc))
            done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(30)
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        if self.loop is not None and self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)


def make_settings(datadir: Path, **overrides: object) -> Settings:
    pairs = [("port", str(free_port())), ("dir", str(datadir)), ("hz", "50")]
    base = settings_from_pairs(pairs)
    return base.with_changes(**overrides) if overrides else base


def _exit_cleanly_on_sigterm() -> None:
    """A process that starts servers (a benchmark, a test run) and is sent SIGTERM raises
    SystemExit instead of dying at once, so the ``finally`` blocks that stop its servers run."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_exit)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


class ProcessServer:
    """``pion-server`` as a child process, for tests that kill -9 and restart it."""

    def __init__(self, datadir: Path, *extra: str, port: int | None = None) -> None:
        self.datadir = datadir
        self.extra = list(extra)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = datadir / "server.log"

    def start(self, timeout: float = 30.0) -> ProcessServer:
        _exit_cleanly_on_sigterm()
        self.datadir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pion.cli.server_main", "--port", str(self.port),
               "--dir", str(self.datadir), *self.extra]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, timeout, self.proc)
        except BaseException:
            self.kill9()  # never leave a server that did not come up (or was interrupted) running
            raise
        return self

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode if self.proc else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class RedisServer:
    """Debian's redis-server on a free loopback port, no persistence, for differential tests."""

    def __init__(self, workdir: Path, *extra: str) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(self.workdir), "--daemonize", "no", *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
        wait_for_port(self.port, 20, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
