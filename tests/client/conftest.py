"""Fixtures of the client tests: ``url``, the test server's address in Pion's URL form."""

from __future__ import annotations

import pytest


@pytest.fixture
def url(server):
    return f"pion://127.0.0.1:{server.port}"


@pytest.fixture(autouse=True)
def _worker_state_dir(tmp_path, monkeypatch):
    """Each test's own cache dir (``pion.client.worker_state``): no prefix sizes from other tests or runs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
