"""Fixtures of the client tests: ``url``, the test server's address in Pion's URL form."""

from __future__ import annotations

import pytest


@pytest.fixture
def url(server):
    return f"pion://127.0.0.1:{server.port}"
