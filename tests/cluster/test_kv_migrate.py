"""``KV.PREFIX.MIGRATE``: resharding a slot of K/V prefixes between two Pion nodes, with the
prompt cache (``pion+cluster://``, a tiny transformers Llama) reading through the whole move:
served by the source until its prefix moved, by the target (-ASK followed) after, a hit equal to
the cold answer everywhere; a failed or cut transfer leaves the prefix whole on the source and
nothing on the target (a miss there, never a wrong cache)."""

from __future__ import annotations

import socket

import pytest
import redis

from pion.client import PionPromptCache
from pion.protocol.keyslot import key_slot
from tests.client.models import hf_llama, prompt
from tests.client.test_fail_closed import same_cache
from tests.support.clusters import PionThreadCluster
from tests.support.servers import free_port

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.hf


def _hit(pc: PionPromptCache, ids: list[int], cold) -> bool:
    """One request: True if it was a hit (and then equal to ``cold``, asserted)."""
    before = pc.stats()["hits"]
    warm = pc.get_or_prefill(ids)
    assert same_cache(warm, cold)  # a hit or a recomputation: the answer is the cold one either way
    return pc.stats()["hits"] == before + 1


def _cut_import(port: int, artifact: bytes) -> None:
    """A KV.PREFIX.IMPORT whose artifact stops half way, then the connection closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"*2\r\n$16\r\nKV.PREFIX.IMPORT\r\n$%d\r\n" % len(artifact) + artifact[: len(artifact) // 2])


def test_migrate_a_slot_of_prefixes_while_the_prompt_cache_reads(tmp_path):
    cluster = PionThreadCluster(tmp_path, 2)
    a_port, b_port = cluster.ports
    a, b = (redis.Redis(port=p) for p in cluster.ports)
    url = f"pion+cluster://127.0.0.1:{a_port},127.0.0.1:{b_port}"
    model = hf_llama()
    pc = PionPromptCache(model, url=url)
    try:
        prompts = [prompt(20 + i, offset=i) for i in range(8)]
        colds = [pc.get_or_prefill(ids) for ids in prompts]
        on_a = [i for i, ids in enumerate(prompts) if key_slot(pc.namespace(ids)) <= 8191]
        assert on_a and len(on_a) < len(prompts)  # the slot ranges of tests.support.clusters.join
        i = on_a[0]
        ns = pc.namespace(prompts[i]).encode()
        slot = key_slot(ns)
        b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", a.execute_command("CLUSTER", "MYID"))
        a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", b.execute_command("CLUSTER", "MYID"))
        assert _hit(pc, prompts[i], colds[i])  # still on the source: served there

        with pytest.raises(redis.ResponseError, match="IOERR"):  # nobody listens: nothing changes
            a.execute_command("KV.PREFIX.MIGRATE", "127.0.0.1", free_port(), 1000, "SLOT", slot)
        _cut_import(b_port, a.execute_command("KV.PREFIX.EXPORT", ns))
        pipe = b.pipeline(transaction=False)
        pipe.execute_command("ASKING").execute_command("KV.PREFIX.LOOKUP", ns)
        assert pipe.execute()[1] != b"HIT"  # the cut transfer left nothing on the target
        assert _hit(pc, prompts[i], colds[i])

        moved = a.execute_command("KV.PREFIX.MIGRATE", "127.0.0.1", b_port, 5000, "SLOT", slot)
        assert ns in moved and all(key_slot(m) == slot for m in moved)
        with pytest.raises(redis.exceptions.AskError):  # gone from the source, which sends clients on
            a.execute_command("KV.PREFIX.MANIFEST", ns)
        assert _hit(pc, prompts[i], colds[i])  # -ASK to the target, followed: the same rows

        for node in (a, b):
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", b.execute_command("CLUSTER", "MYID"))
        fresh = PionPromptCache(model, url=url)
        try:
            assert _hit(fresh, prompts[i], colds[i])  # -MOVED to the new owner, a hit there
            assert fresh.client.nodes.owner[slot][1] == b_port
            assert all(_hit(fresh, prompts[j], colds[j]) for j in range(len(prompts)))  # the others untouched
        finally:
            fresh.close()
        assert pc.stats()["errors"] == 0
    finally:
        pc.close()
        cluster.stop()


def test_migrate_arguments_and_refusals(tmp_path):
    cluster = PionThreadCluster(tmp_path, 2)
    try:
        a, b = (redis.Redis(port=p) for p in cluster.ports)
        b_port = cluster.ports[1]
        for args, message in [((b_port, 100, "COPY"), "SLOT slot or NAMESPACES"),
                              ((b_port, 100, "SLOT", 16384), "out of range slot"),
                              ((b_port, 100, "BOGUS", 1), "syntax error"),
                              ((b_port, 100, "NAMESPACES", "{nope}"), "not a prefix registered")]:
            with pytest.raises(redis.ResponseError, match=message):
                a.execute_command("KV.PREFIX.MIGRATE", "127.0.0.1", *args)
        assert a.execute_command("KV.PREFIX.MIGRATE", "127.0.0.1", b_port, 100, "SLOT", 5) == []
    finally:
        cluster.stop()
