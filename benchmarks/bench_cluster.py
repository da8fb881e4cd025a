"""Scale-out benchmarks (issue 22): Pion cluster nodes against Redis Cluster, and the prompt cache
over many nodes.

1. ``redis-benchmark --cluster`` (SET, GET) against 3 Pion nodes and against 3 redis-server
   7.0.15 nodes, same client count and request count, run back to back.
2. Warm TTFT through ``pion+cluster://`` (3 nodes) against one Pion node directly
   (``pion://``): a tiny transformers Llama, the rows through the socket in both cases
   (``local_lane=False``), interleaved runs, medians. Goal: cluster <= 5 % slower.
3. Hit rate after ``kill -9`` of one of three nodes, for ``pion+cluster://`` and
   ``redis+cluster://``: N prefixes stored, one node killed, a fresh process-like cache asks
   for all of them; every answer is compared with a cold prefill (wrong = a cache that differs).
   Goal: about 2/3 hit, 0 wrong.

Load average is printed with the results (the machine is shared); numbers are ratios measured
in the same run.

    python benchmarks/bench_cluster.py                 # all three, JSON to benchmarks/results/cluster.json
    python benchmarks/bench_cluster.py --smoke         # small counts
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.support.clusters import PionProcessCluster, RedisCluster  # noqa: E402
from tests.support.servers import ProcessServer  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def redis_benchmark(port: int, requests: int, clients: int) -> dict[str, float]:
    done = subprocess.run(["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get",
                           "-n", str(requests), "-c", str(clients), "-q"], capture_output=True, text=True, timeout=600)
    out = {}
    for name, rps in re.findall(r"(SET|GET): ([\d.]+) requests per second", done.stdout):
        out[name] = float(rps)
    if not out:
        raise RuntimeError(f"redis-benchmark gave no numbers: {done.stdout[-500:]} {done.stderr[-500:]}")
    return out


def bench_throughput(root: Path, requests: int, clients: int) -> dict:
    log(f"redis-benchmark --cluster: {requests} requests, {clients} clients, 3 Pion vs 3 Redis nodes")
    pion = PionProcessCluster(root / "pion-rb", 3)
    redis = RedisCluster(root / "redis-rb", 3)
    try:
        result = {"pion": redis_benchmark(pion.ports[0], requests, clients),
                  "redis": redis_benchmark(redis.ports[0], requests, clients)}
    finally:
        pion.stop()
        redis.stop()
    result["ratio_pion_over_redis"] = {k: round(result["pion"][k] / result["redis"][k], 3) for k in result["pion"]}
    return result


def _model(layers: int, hidden: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    heads = max(hidden // 64, 2)
    config = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, head_dim=64,
                         max_position_embeddings=4096)
    return LlamaForCausalLM(config).eval()


def _prompt(n: int, offset: int) -> list[int]:
    return [(7 * i + 3 + 11 * offset) % 500 + 5 for i in range(n)]


def bench_ttft(root: Path, tokens: int, runs: int, prefixes: int) -> dict:
    import torch

    from pion.client import PionPromptCache

    log(f"warm TTFT: {prefixes} prefixes of {tokens} tokens, {runs} rounds, cluster vs one node")
    model = _model(8, 512)
    single = ProcessServer(root / "single").start()
    cluster = PionProcessCluster(root / "pion-ttft", 3)
    try:
        caches = {
            "one node": PionPromptCache(model, url=f"pion://127.0.0.1:{single.port}", local_lane=False),
            "cluster": PionPromptCache(model, url="pion+cluster://" + ",".join(f"127.0.0.1:{p}" for p in cluster.ports),
                                       local_lane=False),
        }
        prompts = [_prompt(tokens, i) for i in range(prefixes)]
        for cache in caches.values():
            for ids in prompts:
                cache.get_or_prefill(ids[:-1])
        times: dict[str, list[float]] = {name: [] for name in caches}
        names = list(caches)
        for round_no in range(runs):
            for ids in prompts:
                for name in names if round_no % 2 == 0 else names[::-1]:  # alternate who goes first
                    cache = caches[name]
                    time.sleep(0.05)
                    start = time.perf_counter()
                    kv = cache.get_or_prefill(ids[:-1])
                    with torch.no_grad():
                        model(torch.tensor([ids[-1:]]), cache=kv, use_cache=True)
                    times[name].append((time.perf_counter() - start) * 1000)
        for name, cache in caches.items():
            assert cache.stats()["misses"] == prefixes, f"{name}: warm runs must all hit ({cache.stats()})"
        medians = {name: round(statistics.median(values), 3) for name, values in times.items()}
        paired = [c / o for c, o in zip(times["cluster"], times["one node"], strict=True)]
        return {"tokens": tokens, "runs": runs * prefixes, "median_ms": medians,
                "cluster_over_one_node": round(medians["cluster"] / medians["one node"], 4),
                "paired_ratio_median": round(statistics.median(paired), 4), "loadavg": os.getloadavg()}
    finally:
        single.stop()
        cluster.stop()


def bench_kill(root: Path, kind: str, prefixes: int) -> dict:
    import torch

    from pion.client import PionPromptCache
    from pion.protocol.keyslot import key_slot

    log(f"hit rate after kill -9 of one of three {kind} nodes: {prefixes} prefixes")
    model = _model(2, 128)
    cluster = PionProcessCluster(root / f"kill-{kind}", 3) if kind == "pion" else RedisCluster(root / "kill-redis", 3)
    url = f"{kind}+cluster://" + ",".join(f"127.0.0.1:{p}" for p in cluster.ports)
    try:
        writer = PionPromptCache(model, url=url)
        prompts = [_prompt(24 + i % 7, i) for i in range(prefixes)]
        for ids in prompts:
            writer.get_or_prefill(ids)
        dead = ("127.0.0.1", cluster.ports[2])
        expected_lost = sum(writer.client.nodes.owner[key_slot(writer.namespace(ids))] == dead for ids in prompts)
        if kind == "pion":
            cluster.nodes[2].kill9()
        else:
            cluster.kill9(2)
        reader = PionPromptCache(model, url=url)
        wrong = 0
        start = time.perf_counter()
        for ids in prompts:
            got = reader.get_or_prefill(ids)
            cold = reader.adapter.prefill(ids)
            wrong += not all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
                             for a, b in zip(got.layers, cold.layers, strict=True))
        elapsed = time.perf_counter() - start
        stats = reader.stats()
        return {"prefixes": prefixes, "hits": stats["hits"], "misses": stats["misses"], "wrong": wrong,
                "hit_rate": round(stats["hits"] / prefixes, 3), "expected_hit_rate": round(1 - expected_lost / prefixes, 3),
                "errors": stats["errors"], "seconds": round(elapsed, 2)}
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", choices=["throughput", "ttft", "kill"], action="append")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cluster.json"))
    args = parser.parse_args()
    only = set(args.only or ["throughput", "ttft", "kill"])
    results: dict = {"loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "throughput" in only:
            results["redis_benchmark"] = bench_throughput(root, 5000 if args.smoke else 50000, 20)
        if "ttft" in only:
            results["warm_ttft"] = bench_ttft(root, 256 if args.smoke else 1024, 2 if args.smoke else 5,
                                              3 if args.smoke else 6)
        if "kill" in only:
            results["kill_one_of_three"] = {k: bench_kill(root, k, 15 if args.smoke else 60) for k in ("pion", "redis")}
    results["loadavg_after"] = os.getloadavg()
    text = json.dumps(results, indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
