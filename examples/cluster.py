"""A 3-node Pion cluster: Redis Cluster's protocol for any cluster client, and the prompt cache over it.

Prerequisites: the base install for the keys (redis-py's ``RedisCluster``); the ``[hf]`` extra
for the prompt-cache part (a tiny seeded Llama: the point is where its prefixes go). About 30 s;
``--smoke`` skips the prompt cache (a few seconds).

    python examples/cluster.py                 # starts three throwaway nodes
    python examples/cluster.py --smoke

Three ``pion-server --cluster-enabled yes`` nodes are joined as an operator would (``CLUSTER
ADDSLOTSRANGE`` on each, ``CLUSTER MEET`` from the first; ``redis-cli --cluster create`` works as
well), then redis-py's ``RedisCluster`` writes keys that land on every node by slot and reads them
back through any node. With the prompt cache, ``PionPromptCache(model,
url="pion+cluster://h1:p1,h2:p2,h3:p3")`` stores each prefix on the node owning its namespace's
slot, and a second cache (another process would do the same) gets hits for every one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import pion_cluster  # noqa: E402

SLOTS = 16384


def _text(reply) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def join(ports: list[int], timeout: float = 60.0) -> None:
    """Even slot ranges, MEET from the first node, then wait until every node sees the same map."""
    import redis

    clients = [redis.Redis(port=p, socket_timeout=10) for p in ports]
    try:
        per = SLOTS / len(ports)
        for i, client in enumerate(clients):
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", round(i * per), round((i + 1) * per) - 1)
        for port in ports[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        deadline = time.monotonic() + timeout
        while True:
            views = [sorted((s[0], s[1], s[2][1]) for s in c.execute_command("CLUSTER", "SLOTS")) for c in clients]
            states = ["cluster_state:ok" in _text(c.execute_command("CLUSTER", "INFO")) for c in clients]
            if all(states) and all(v == views[0] for v in views) and len(views[0]) == len(ports):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the nodes did not agree: {views}")
            time.sleep(0.2)
    finally:
        for client in clients:
            client.close()


def keys_part(ports: list[int]) -> bool:
    import redis
    from redis.cluster import RedisCluster

    rc = RedisCluster(host="127.0.0.1", port=ports[0], socket_timeout=10)
    try:
        for i in range(60):
            rc.set(f"user:{i}", f"value {i}")
        back = [rc.get(f"user:{i}") for i in range(60)]
    finally:
        rc.close()
    counts = []
    for port in ports:
        with redis.Redis(port=port) as node:
            counts.append(node.dbsize())
    print(f"60 keys through RedisCluster: {counts} on the three nodes, all read back: "
          f"{back == [f'value {i}'.encode() for i in range(60)]}")
    return back == [f"value {i}".encode() for i in range(60)] and all(counts) and sum(counts) == 60


def prompt_cache_part(urls: list[str]) -> bool:
    import redis
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pion.client import PionPromptCache

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         max_position_embeddings=1024)).eval()
    url = "pion+cluster://" + ",".join(u.removeprefix("pion://") for u in urls)
    prompts = [list(f"system prompt number {i}: be brief and exact. ".encode()) for i in range(6)]
    writer = PionPromptCache(model, url=url)
    for ids in prompts:
        writer.get_or_prefill(ids)
    reader = PionPromptCache(model, url=url)
    for ids in prompts:
        reader.get_or_prefill(ids)
    w, r = writer.stats(), reader.stats()
    per_node = []
    for u in urls:
        with redis.Redis.from_url(u.replace("pion://", "redis://", 1)) as node:
            per_node.append(int(node.info("pion")["registered_prefixes"]))
    print(f"prompt cache over {url}: the writer {w['misses']} misses, prefixes per node {per_node}; "
          f"the reader {r['hits']} hits, {r['misses']} misses")
    return w["misses"] == 6 and r["hits"] == 6 and r["misses"] == 0 and sum(per_node) == 6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="keys only, no model")
    args = parser.parse_args(argv)
    with pion_cluster(3, "--appendonly", "no") as urls:
        ports = [int(u.rsplit(":", 1)[1]) for u in urls]
        join(ports)
        print(f"3 nodes agree on the slot map: {urls}")
        ok = keys_part(ports)
        if not args.smoke:
            ok = prompt_cache_part(urls) and ok
    print(f"cluster works: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
