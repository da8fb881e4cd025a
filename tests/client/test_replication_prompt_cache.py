"""The prompt cache over replication: prefixes stored on a primary (before the replica attached,
so carried by the full resync, and after, by the stream) are hits on the replica once it is
promoted, and the warm caches equal the cold ones tensor for tensor."""

from __future__ import annotations

import time

import pytest
import redis

from pion.client import PionPromptCache
from tests.client.models import hf_lfm2, hf_llama, prompt
from tests.client.test_prompt_cache_hf import assert_same_cache, greedy
from tests.support.servers import ProcessServer

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.hf


def _link_up(r: redis.Redis, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if r.info("replication").get("master_link_status") == "up":
            return
        time.sleep(0.05)
    raise AssertionError("the replica's link did not come up")


@pytest.mark.parametrize("make_model", [hf_llama, hf_lfm2], ids=["llama", "lfm2-hybrid"])
def test_a_promoted_replica_serves_hits_equal_to_the_cold_answer(tmp_path, make_model):
    model = make_model()
    primary = ProcessServer(tmp_path / "a").start()
    replica = None
    try:
        writer = PionPromptCache(model, url=f"pion://127.0.0.1:{primary.port}")
        early, late = prompt(37), prompt(29, offset=3)
        cold_early = writer.get_or_prefill(early)  # on the primary before any replica: full resync
        replica = ProcessServer(tmp_path / "b", "--replicaof", "127.0.0.1", str(primary.port)).start()
        rr = redis.Redis(port=replica.port, socket_timeout=30)
        _link_up(rr)
        cold_late = writer.get_or_prefill(late)  # after: the stream
        assert redis.Redis(port=primary.port, socket_timeout=30).wait(1, 10_000) == 1
        primary.kill9()
        assert rr.replicaof("NO", "ONE")
        reader = PionPromptCache(model, url=f"pion://127.0.0.1:{replica.port}")
        warm_early, warm_late = reader.get_or_prefill(early), reader.get_or_prefill(late)
        assert reader.stats()["hits"] == 2 and reader.stats()["misses"] == 0
        assert_same_cache(cold_early, warm_early)
        assert_same_cache(cold_late, warm_late)
        suffix = prompt(5, offset=9)
        assert greedy(model, warm_late, late + suffix) == greedy(model, cold_late, late + suffix)
    finally:
        primary.stop()
        if replica is not None:
            replica.stop()
