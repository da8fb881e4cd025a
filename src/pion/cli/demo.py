"""Run the demo: start a server on a temp dir and drive a short scripted session through redis-py."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0, help="port for the demo server (default: a free one)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args: argparse.Namespace) -> int:
    import redis

    port = args.port or _free_port()
    with tempfile.TemporaryDirectory(prefix="pion-demo-") as datadir:
        proc = subprocess.Popen([sys.executable, "-m", "pion.cli.server_main", "--port", str(port), "--dir", datadir])
        try:
            client = redis.Redis(port=port)
            for _ in range(200):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            steps = [("SET", "greeting", "hello"), ("GET", "greeting"), ("PING",)]
            for step in steps:
                print(f"> {' '.join(step)}\n{client.execute_command(*step)!r}")
        finally:
            proc.terminate()
            proc.wait(10)
    return 0
