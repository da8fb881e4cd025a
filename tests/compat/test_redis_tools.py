"""Debian's redis-cli and redis-benchmark work against Pion unchanged."""

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-tools not installed (make test installs it)")


def _cli(port, *args, stdin=None):
    proc = subprocess.run(
        ["redis-cli", "-p", str(port), *args], input=stdin, capture_output=True, text=True, timeout=30
    )
    return proc.stdout.strip()


def test_redis_cli_basic_commands(server):
    assert _cli(server.port, "PING") == "PONG"
    assert _cli(server.port, "SET", "k", "hello world") == "OK"
    assert _cli(server.port, "GET", "k") == "hello world"
    assert _cli(server.port, "--no-raw", "GET", "missing") == "(nil)"


def test_redis_cli_reports_errors(server):
    out = _cli(server.port, "--no-raw", "NOSUCH", "x")
    assert out == "(error) ERR unknown command 'NOSUCH', with args beginning with: 'x'"


def test_redis_cli_pipe_mode(server):
    commands = "".join(f"SET key:{i} {i}\r\n" for i in range(200))
    proc = subprocess.run(
        ["redis-cli", "-p", str(server.port), "--pipe"], input=commands, capture_output=True, text=True, timeout=30
    )
    assert "errors: 0, replies: 200" in proc.stdout
    assert _cli(server.port, "GET", "key:199") == "199"


def test_redis_cli_resp3(server):
    assert _cli(server.port, "-3", "PING") == "PONG"


def test_redis_benchmark_runs_clean(server):
    proc = subprocess.run(
        ["redis-benchmark", "-p", str(server.port), "-t", "set,get", "-n", "2000", "-c", "10", "-q"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.replace("\r", "\n").splitlines() if "requests per second" in line]
    assert any(line.startswith("SET") for line in lines) and any(line.startswith("GET") for line in lines)
