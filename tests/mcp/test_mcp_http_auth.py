"""``pion mcp`` over streamable HTTP is protected like the server: a non-loopback ``--host``
refuses to start without a bearer token (``--auth-token-file``) or an explicit ``--insecure``; a
configured token is checked on every request (401 otherwise); the Host allow-list stays on."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request

import pytest

from pion.client.mcp import http
from tests.mcp.conftest import mcp_argv
from tests.support.servers import free_port, wait_for_port

INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3"])
def test_non_loopback_without_token_is_refused(host):
    # refused before it even connects to Pion (the URL points nowhere)
    done = subprocess.run(mcp_argv("pion://127.0.0.1:9", "--transport", "streamable-http", "--host", host),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"refusing to listen on {host} without authentication" in done.stderr
    assert "--auth-token-file" in done.stderr and "--insecure" in done.stderr


def test_empty_token_file_is_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text("\n")
    done = subprocess.run(mcp_argv("pion://127.0.0.1:9", "--transport", "http", "--host", "0.0.0.0",
                                   "--auth-token-file", str(path)), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "is empty" in done.stderr, done.stderr


def test_http_flags_with_stdio_are_refused(tmp_path):
    done = subprocess.run(mcp_argv("pion://127.0.0.1:9", "--insecure"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "streamable-http only" in done.stderr, done.stderr


def test_rules():
    assert http.startup_refusal("127.0.0.1", None, False) is None
    assert http.startup_refusal("::1", None, False) is None
    assert http.startup_refusal("0.0.0.0", "t", False) is None
    assert http.startup_refusal("0.0.0.0", None, True) is None
    assert "without authentication" in http.startup_refusal("192.168.1.5", None, False)
    assert "not a valid" in http.startup_refusal("example.com", None, False)
    hosts, origins = http.allowed_hosts("0.0.0.0", ["mcp.internal", "box:8443"])
    assert "0.0.0.0" not in " ".join(hosts)  # a wildcard bind is no Host name
    assert {"127.0.0.1:*", "localhost:*", "mcp.internal:*", "box:8443"} <= set(hosts)
    assert "http://mcp.internal:*" in origins and "https://box:8443" in origins


class _Served:
    def __init__(self, url: str, *extra: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(mcp_argv(url, "--transport", "streamable-http", "--port", str(self.port), *extra),
                                     env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self) -> _Served:
        wait_for_port(self.port, 60, self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def post(self, headers: dict[str, str]) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/mcp", data=INIT, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read(1)
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_token_checked_on_every_request(make_server, tmp_path, host):
    srv = make_server(embed_provider="hash")
    path = tmp_path / "token"
    path.write_text("s3cret-token\n")
    with _Served(f"pion://127.0.0.1:{srv.port}", "--host", host, "--auth-token-file", str(path)) as mcp:
        assert mcp.post({}) == 401
        assert mcp.post({"Authorization": "Bearer wrong"}) == 401
        assert mcp.post({"Authorization": "Basic czNjcmV0LXRva2Vu"}) == 401
        assert mcp.post({"Authorization": "Bearer s3cret-token"}) == 200
        # the token does not switch the Host allow-list off
        assert mcp.post({"Authorization": "Bearer s3cret-token", "Host": "evil.example"}) in (400, 421)


def test_insecure_starts_without_token_and_keeps_the_allow_list(make_server):
    srv = make_server(embed_provider="hash")
    with _Served(f"pion://127.0.0.1:{srv.port}", "--host", "0.0.0.0", "--insecure",
                 "--allowed-host", "mcp.internal") as mcp:
        assert mcp.post({}) == 200
        assert mcp.post({"Host": "mcp.internal"}) == 200
        assert mcp.post({"Host": "evil.example"}) in (400, 421)


def test_loopback_default_unchanged(make_server):
    srv = make_server(embed_provider="hash")
    with _Served(f"pion://127.0.0.1:{srv.port}") as mcp:
        assert mcp.post({}) == 200
        assert mcp.post({"Host": "evil.example"}) in (400, 421)
