"""Fixtures for the search tests: ``client2``/``client3`` are redis-py in RESP2 and in redis-py
8's default (RESP3 on the wire, checked with CLIENT INFO); ``any_client`` runs a test in both."""

from __future__ import annotations

import pytest
import redis


def _default_resp3(port: int, **kwargs) -> redis.Redis:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=20, **kwargs)
    assert client.client_info()["resp"] == "3"  # redis-py 8 speaks RESP3 by default
    return client


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def any_client(request, server):
    if request.param == 2:
        client = redis.Redis(host="127.0.0.1", port=server.port, protocol=2, socket_timeout=20)
    else:
        client = _default_resp3(server.port)
    client.protocol_version = request.param
    yield client
    client.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def url_and_client(request, server):
    url = f"redis://127.0.0.1:{server.port}"
    if request.param == 2:
        client = redis.Redis.from_url(url, protocol=2, socket_timeout=20)
    else:
        client = redis.Redis.from_url(url, socket_timeout=20)
        assert client.client_info()["resp"] == "3"
    client.protocol_version = request.param
    yield url, client
    client.close()
