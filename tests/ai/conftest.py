"""Fixtures for the AI.* tests: ``hashed`` is a server whose embeddings come from the deterministic
``hash`` provider (instant, not semantic: texts are close when they share words), ``ai``/``ai3``
are redis-py clients of it in RESP2 and RESP3, ``both`` runs a test in each. Tests that need real
semantics use the packaged all-MiniLM-L6-v2 (``minilm_server``, one per module: it loads once)."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def connect(port: int, protocol: int = 2, **kwargs) -> redis.Redis:
    # no retries: a test must see the first answer, and a slow first embedding is not a lost connection
    return redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=120,
                       retry=Retry(NoBackoff(), 0), **kwargs)


@pytest.fixture
def hashed(make_server):
    return make_server(embed_provider="hash")


@pytest.fixture
def ai(hashed):
    client = connect(hashed.port, 2)
    yield client
    client.close()


@pytest.fixture
def ai3(hashed):
    client = connect(hashed.port, 3)
    yield client
    client.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def both(request, hashed):
    client = connect(hashed.port, request.param)
    client.protocol_version = request.param
    yield client
    client.close()


@pytest.fixture(scope="module")
def minilm_server(tmp_path_factory):
    from tests.support.servers import ThreadServer, make_settings

    srv = ThreadServer(make_settings(tmp_path_factory.mktemp("minilm"), embed_provider="minilm")).start()
    yield srv
    srv.stop()


@pytest.fixture
def minilm(minilm_server):
    client = connect(minilm_server.port, 3)
    yield client
    client.close()
