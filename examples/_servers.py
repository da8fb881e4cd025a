"""Throwaway Pion servers for the examples: started as child processes, always stopped.

Every example that is not given ``--url`` starts the server it needs with ``pion_server()``
(or three cluster nodes with ``pion_cluster(3)``) in a ``with`` block: the server runs in a
temporary data directory, and leaving the block by any path (the end, an exception, Ctrl-C)
sends SIGTERM, waits, kills it if it does not exit, and removes the directory. A server that
does not start within ``timeout`` seconds is killed and its log printed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is valid and free too."""
    while True:
        port = free_port()
        if port + 10000 >= 65536:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def _wait(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pion-server exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"pion-server did not listen on {port} within {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def pion_server(*args: str, timeout: float = 90.0, port: int | None = None) -> Iterator[str]:
    """A ``pion-server`` child with ``args`` on a free loopback port; yields ``pion://127.0.0.1:PORT``."""
    with contextlib.ExitStack() as stack:
        yield stack.enter_context(_servers([list(args)], timeout, [port]))[0]


@contextlib.contextmanager
def pion_cluster(nodes: int = 3, *args: str, timeout: float = 90.0) -> Iterator[list[str]]:
    """``nodes`` servers with ``cluster-enabled yes``; yields their URLs (slots are not assigned yet)."""
    extra = ["--cluster-enabled", "yes", *args]
    with _servers([extra] * nodes, timeout, [cluster_port() for _ in range(nodes)]) as urls:
        yield urls


@contextlib.contextmanager
def _servers(arg_lists: list[list[str]], timeout: float, ports: list[int | None]) -> Iterator[list[str]]:
    workdir = Path(tempfile.mkdtemp(prefix="pion-example-"))
    procs: list[tuple[subprocess.Popen, Path]] = []
    try:
        urls = []
        for i, (args, port) in enumerate(zip(arg_lists, ports, strict=True)):
            port = port or free_port()
            datadir = workdir / f"node{i}"
            datadir.mkdir()
            log_path = datadir / "server.log"
            with open(log_path, "wb") as log:
                proc = subprocess.Popen([sys.executable, "-m", "pion.cli.server_main", "--port", str(port),
                                         "--dir", str(datadir), *args],
                                        stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=datadir)
            procs.append((proc, log_path))
            urls.append(f"pion://127.0.0.1:{port}")
        for (proc, log_path), url in zip(procs, urls, strict=True):
            try:
                _wait(int(url.rsplit(":", 1)[1]), proc, timeout)
            except (RuntimeError, TimeoutError):
                sys.stderr.write(log_path.read_text(errors="replace")[-3000:])
                raise
        yield urls
    finally:
        for proc, _ in procs:
            _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def run_child(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` (a second process of an example) with a timeout; killed if it runs past it."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT)
