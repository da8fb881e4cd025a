"""redis-py's asyncio ``RedisCluster`` under a burst: ``asyncio.gather`` of 300 GETs through a
fresh client against three Pion nodes (processes, so the client does not share their GIL), ten
times, with no error and every value right (issue 27 reported ``Connection closed by server``).

The client is initialized before the burst: a burst on an uninitialized client races inside
redis-py itself (``'NoneType' object has no attribute 'writelines'`` on a connection its own
initialization closed), against redis-server's cluster just the same, so it says nothing of the
server. ``max_connections`` is raised above redis-py's default of 100 per node, past which the
client refuses (``MaxConnectionsError``) before anything reaches a server.
"""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from tests.support.clusters import PionProcessCluster

RUNS, BURST = 10, 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = PionProcessCluster(tmp_path_factory.mktemp("burst"), 3)
    yield nodes
    nodes.stop()


@pytest.mark.parametrize("protocol", [2, 3])
def test_burst_of_gets_through_a_fresh_client(cluster, protocol):
    seed = redis.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    for i in range(BURST):
        seed.set(f"key{i}", f"value{i}")
    seed.close()

    async def burst() -> list:
        client = RedisCluster(host="127.0.0.1", port=cluster.ports[0], max_connections=1000, protocol=protocol)
        try:
            await client.initialize()
            return await asyncio.gather(*(client.get(f"key{i}") for i in range(BURST)), return_exceptions=True)
        finally:
            await client.aclose()

    errors = []
    for _ in range(RUNS):
        replies = asyncio.run(burst())
        errors += [r for r in replies if isinstance(r, Exception)]
        assert [r for r in replies if not isinstance(r, Exception)] == [
            f"value{i}".encode() for i, r in enumerate(replies) if not isinstance(r, Exception)]
    assert errors == [], f"{len(errors)} errors over {RUNS} bursts of {BURST}: {sorted({repr(e) for e in errors})}"
