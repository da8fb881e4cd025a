"""Cluster fixtures: one and three Pion nodes (threads), a real 3-node redis-server cluster."""

from __future__ import annotations

import pytest

from tests.support.clusters import PionThreadCluster, RedisCluster
from tests.support.servers import RedisServer


@pytest.fixture
def pion1(tmp_path):
    cluster = PionThreadCluster(tmp_path, 1)
    yield cluster
    cluster.stop()


@pytest.fixture
def pion3(tmp_path):
    cluster = PionThreadCluster(tmp_path, 3)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def redis3(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server not installed (make test installs it)")
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"), 3)
    yield cluster
    cluster.stop()
