"""``PionPromptCache`` over many nodes: ``pion+cluster://`` (3 Pion nodes) and ``redis+cluster://``
(a real 3-node redis-server 7.0.15 cluster), with a tiny transformers Llama. Warm equals cold,
prefixes spread over the nodes, longest-prefix reuse, and a killed node costs misses (one
warning), never a wrong cache."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import redis

from pion.client import PionPromptCache
from pion.protocol.keyslot import key_slot
from tests.client.models import hf_llama, prompt
from tests.support.clusters import PionProcessCluster, RedisCluster

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.hf


def _url(scheme: str, ports: list[int]) -> str:
    return f"{scheme}+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)


def _same(a, b) -> bool:
    return all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
               for x, y in zip(a.layers, b.layers, strict=True))


@pytest.fixture(params=["pion", "redis"])
def cluster(request, tmp_path):
    if request.param == "pion":
        made = PionProcessCluster(tmp_path, 3)
    else:
        from tests.support.servers import RedisServer

        if not RedisServer.available():
            pytest.skip("redis-server not installed")
        made = RedisCluster(tmp_path, 3)
    made.scheme = request.param
    yield made
    made.stop()


def test_warm_equals_cold_and_prefixes_spread_over_nodes(cluster):
    model = hf_llama()
    pc = PionPromptCache(model, url=_url(cluster.scheme, cluster.ports))
    prompts = [prompt(20 + i, offset=i) for i in range(9)]
    colds = [pc.get_or_prefill(ids) for ids in prompts]
    warms = [pc.get_or_prefill(ids) for ids in prompts]
    stats = pc.stats()
    assert stats["misses"] == 9 and stats["hits"] == 9 and stats["errors"] == 0
    assert all(_same(c, w) for c, w in zip(colds, warms, strict=True))
    namespaces = [pc.namespace(ids) for ids in prompts]
    assert all(ns.startswith("{") and ns.endswith("}") for ns in namespaces)
    owners = {pc.client.nodes.owner[key_slot(ns)] for ns in namespaces}
    assert len(owners) >= 2  # spread by namespace slot
    if cluster.scheme == "pion":  # any PionClient method taking a namespace runs on its node
        assert all(pc.client.kv_lookup(ns) for ns in namespaces)
    pc.close()


def test_fetch_nearest_reuses_a_stored_prefix_on_its_node(cluster):
    model = hf_llama()
    pc = PionPromptCache(model, url=_url(cluster.scheme, cluster.ports), block_size=8)
    stored = prompt(30)
    pc.get_or_prefill(stored)
    request = stored[:21] + prompt(5, offset=9)
    cache, rest = pc.fetch_nearest(request)
    assert cache is not None and cache.get_seq_length() + len(rest) == len(request)
    assert cache.get_seq_length() >= 21
    warm = pc.adapter.forward(rest, cache)
    cold = pc.adapter.forward(request, pc.adapter.new_cache())
    assert np.allclose(warm, cold, atol=1e-4)
    none, rest = pc.fetch_nearest(prompt(12, offset=5))
    assert none is None
    pc.close()


def test_a_killed_node_costs_misses_never_a_wrong_cache(cluster):
    model = hf_llama()
    url = _url(cluster.scheme, cluster.ports)
    pc = PionPromptCache(model, url=url)
    prompts = [prompt(16 + i, offset=i) for i in range(12)]
    for ids in prompts:
        pc.get_or_prefill(ids)
    dead = 2
    dead_addr = ("127.0.0.1", cluster.ports[dead])
    on_dead = [pc.client.nodes.owner[key_slot(pc.namespace(ids))] == dead_addr for ids in prompts]
    if isinstance(cluster, RedisCluster):
        cluster.kill9(dead)
    else:
        cluster.nodes[dead].kill9()
    fresh = PionPromptCache(model, url=url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for ids in prompts:
            warm = fresh.get_or_prefill(ids)
            cold = fresh.adapter.prefill(ids)
            assert _same(warm, cold)  # hit or recompute: always the right cache
    stats = fresh.stats()
    assert stats["hits"] == on_dead.count(False) and stats["misses"] == on_dead.count(True)
    assert len([w for w in caught if "Pion prompt cache" in str(w.message)]) == 1
    assert stats["manifest_mismatches"] == 0


def test_redis_tier_stores_one_hash_per_prefix_written_atomically(tmp_path):
    from tests.support.servers import RedisServer

    if not RedisServer.available():
        pytest.skip("redis-server not installed")
    cluster = RedisCluster(tmp_path, 3)
    try:
        pc = PionPromptCache(hf_llama(), url=_url("redis", cluster.ports), block_size=8)
        ids = prompt(24)
        pc.get_or_prefill(ids)
        ns = pc.namespace(ids)
        node = redis.Redis(*pc.client.nodes.owner[key_slot(ns)])
        assert node.type(ns) == b"hash"
        fields = set(node.hkeys(ns))
        assert {b"manifest", b"tokens", b"k0", b"v0", b"k3", b"v3"} <= fields
        # another prefix under the same namespace is refused unless replace
        other = prompt(24, offset=3)
        pc.get_or_prefill(other, namespace=ns)
        assert pc.stats()["namespace_conflicts"] == 1 and pc.get_or_prefill(ids) is not None
        assert pc.stats()["hits"] == 1
        pc.close()
    finally:
        cluster.stop()
