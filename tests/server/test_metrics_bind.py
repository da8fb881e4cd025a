"""``--metrics-bind`` off loopback is protected like the server's port: without a password on
the server it refuses to start unless ``--protected-mode no``; with one, every scrape must send
HTTP Basic credentials of an enabled user with a password (401 otherwise)."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import pytest
import redis
from tests.support.servers import ThreadServer, free_port, make_settings

from pion.server.errors import StartupError


def status(srv, user: str | None = None, password: str | None = None, header: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{srv.settings.metrics_port}/metrics")
    if user is not None:
        header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    if header is not None:
        request.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            assert b"pion_uptime_seconds" in response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("bind", ["0.0.0.0", "::"])
def test_non_loopback_without_password_is_refused(tmp_path, bind):
    with pytest.raises(StartupError, match=f"refusing to serve metrics on {bind} without a password") as refused:
        ThreadServer(make_settings(tmp_path, metrics_port=free_port(), metrics_bind=bind)).start()
    assert "--protected-mode no" in str(refused.value)


def test_protected_mode_no_serves_without_password(tmp_path):
    srv = ThreadServer(make_settings(tmp_path, metrics_port=free_port(), metrics_bind="0.0.0.0",
                                     protected_mode=False)).start()
    try:
        assert status(srv) == 200
    finally:
        srv.stop()


def test_with_a_password_every_scrape_needs_credentials(tmp_path):
    srv = ThreadServer(make_settings(tmp_path, metrics_port=free_port(), metrics_bind="0.0.0.0",
                                     requirepass="s3cret")).start()
    try:
        assert status(srv) == 401
        assert status(srv, "default", "wrong") == 401
        assert status(srv, "default", "s3cret") == 200
        assert status(srv, header="Bearer s3cret") == 401
        assert status(srv, header="Basic !!!notbase64") == 401
        r = redis.Redis(port=srv.port, password="s3cret")
        r.execute_command("ACL", "SETUSER", "prom", "on", ">scrape-pw", "+ping")
        r.execute_command("ACL", "SETUSER", "open", "on", "nopass", "+ping")
        r.execute_command("ACL", "SETUSER", "off", "off", ">pw")
        assert status(srv, "prom", "scrape-pw") == 200
        assert status(srv, "open", "anything") == 401  # nopass opens no door here
        assert status(srv, "off", "pw") == 401
        r.close()
    finally:
        srv.stop()


def test_loopback_needs_no_credentials(tmp_path):
    srv = ThreadServer(make_settings(tmp_path, metrics_port=free_port(), requirepass="s3cret")).start()
    try:
        assert status(srv) == 200
    finally:
        srv.stop()
