"""MoE expert paging: hit rate vs cache size on real and synthetic traces, tokens/s paged vs in memory,
and FETCH latency at a 10 MB expert.

1. **Hit rate vs cache fraction.** Traces: routing recorded from a seeded Mixtral-architecture
   MoE (16 experts x 6 layers, top-2; weights written as shards) over this repository's own
   docs (bytes as tokens); synthetic uniform and Zipf(1.1)+Markov(stay 0.5) traces of the same
   shape; and the field's reference shape (64 experts x 24 layers, top-8). Each is replayed
   through plain LRU, Pion's policy (``nextuse``) and Belady's offline optimum (MIN with bypass)
   at 5/10/25/50/75% of all experts. The same ``pion.paging`` code runs in the server's tier.
2. **Tokens/s.** Greedy decode with the model all in memory (``from_pretrained``) and paged from
   a Pion server in its own process (client budget 25% and 50% of the experts, local lane and
   RESP, prefetch on), tokens checked equal; the ratio to in-memory is the number that matters.
3. **FETCH latency**, 10 MB expert: hit (resident on the server) and miss (evicted first; warm =
   the shard in the page cache, cold = dropped from it with ``fadvise DONTNEED``), p50/p99, for
   the local lane (``MOE.EXPERT.LOCAL`` + map with populate) and RESP (``MOE.EXPERT.FETCH``).

Prints one JSON line per result, then markdown tables, the load average, and writes the plot.

    python benchmarks/bench_moe.py                 # the full run (~10 min on 2 shared cores)
    python benchmarks/bench_moe.py --smoke         # CI-sized
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.moe_models import hf_moe, save_hf, write_checkpoint  # noqa: E402
from tests.support.servers import ProcessServer  # noqa: E402

from pion.client import PionClient  # noqa: E402
from pion.client.moe import ExpertSource  # noqa: E402
from pion.paging import LRUPolicy, NextUsePolicy, belady_hits, replay_hits  # noqa: E402
from pion.paging.traces import uniform, zipf_markov  # noqa: E402

FRACTIONS = (0.05, 0.10, 0.25, 0.50, 0.75)
SERVER_MIB = 512  # the server holds every expert: the budgets under test are the client's
FULL = dict(hidden_size=256, inter=512, num_hidden_layers=6, n_experts=16, top_k=2, vocab_size=512,
            num_attention_heads=8, num_key_value_heads=4, head_dim=32, trace_tokens=3000, field_tokens=500,
            prompt=32, new_tokens=32, reps=5, latency=(1024, 848), hits=60, misses=30)
SMOKE = dict(hidden_size=64, inter=96, num_hidden_layers=3, n_experts=8, top_k=2, vocab_size=512,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, trace_tokens=200, field_tokens=20,
             prompt=8, new_tokens=6, reps=1, latency=(256, 128), hits=6, misses=4)


def emit(kind: str, **fields) -> dict:
    row = {"bench": "moe", "kind": kind, **fields}
    print(json.dumps(row), flush=True)
    return row


def repo_text(n_bytes: int) -> bytes:
    parts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return b"\n".join(p.read_bytes() for p in parts if p.is_file())[:n_bytes]


def make_model(size: dict):
    fields = {k: size[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                                   "num_key_value_heads", "head_dim")}
    return hf_moe("mixtral", seed=7, n_experts=size["n_experts"], top_k=size["top_k"], inter=size["inter"],
                  max_position_embeddings=4096, **fields)


def record_trace(model, text: bytes, window: int = 256) -> np.ndarray:
    """Routing of every token of ``text`` (bytes as token ids), token-major then layer: keys
    ``layer * n_experts + expert``, each layer's top-k sorted."""
    import torch

    routed: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: routed.append(out[-1].detach().clone()))
             for name, m in model.named_modules() if name.endswith("mlp.gate")]
    ids = torch.tensor(list(text), dtype=torch.long)
    n_layers, n_experts = len(hooks), model.config.num_local_experts
    tokens = []
    with torch.no_grad():
        for start in range(0, len(ids), window):
            routed.clear()
            model(ids[start:start + window][None], use_cache=False)
            per_layer = torch.stack(routed)  # [layers, tokens, k]
            tokens.append(per_layer.sort(dim=-1).values.permute(1, 0, 2))
    for hook in hooks:
        hook.remove()
    offsets = torch.arange(n_layers)[None, :, None] * n_experts
    return (torch.cat(tokens) + offsets).reshape(-1).numpy().astype(np.int64)


def hit_rates(name: str, trace: np.ndarray, n_layers: int, n_experts: int, top_k: int) -> list[dict]:
    rows = []
    total = n_layers * n_experts
    for fraction in FRACTIONS:
        capacity = max(top_k, int(round(fraction * total)))
        n = len(trace)
        rates = {"belady": belady_hits(trace, capacity) / n,
                 "lru": replay_hits(LRUPolicy(), trace, capacity, n_experts, top_k) / n,
                 "nextuse": replay_hits(NextUsePolicy(), trace, capacity, n_experts, top_k) / n}
        rows.append(emit("hit_rate", trace=name, fraction=fraction, capacity=capacity, accesses=n, **rates))
    return rows


def trace_study(model, size: dict) -> list[dict]:
    """Hit rates on the recorded trace and the synthetic ones."""
    n_layers, n_experts, k = size["num_hidden_layers"], size["n_experts"], size["top_k"]
    recorded = record_trace(model, repo_text(size["trace_tokens"]))
    hit = hit_rates(f"recorded: repo docs, {n_experts}x{n_layers} top-{k}", recorded, n_layers, n_experts, k)
    tokens = size["trace_tokens"]
    hit += hit_rates(f"uniform {n_experts}x{n_layers} top-{k}", uniform(tokens, n_layers, n_experts, k), n_layers,
                     n_experts, k)
    hit += hit_rates(f"zipf 1.1+markov {n_experts}x{n_layers} top-{k}",
                     zipf_markov(tokens, n_layers, n_experts, k), n_layers, n_experts, k)
    hit += hit_rates("zipf 1.1+markov 64x24 top-8", zipf_markov(size["field_tokens"], 24, 64, 8), 24, 64, 8)
    return hit


def greedy(model, prompt, n_new: int):
    import torch

    began = time.perf_counter()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                             pad_token_id=0)
    return out[0, len(prompt):].tolist(), time.perf_counter() - began


PAGED_MODES = [("local", 0.25, True), ("local", 0.25, False), ("local", 0.50, True), ("resp", 0.25, True),
               ("resp", 0.50, True)]


def tokens_per_second(size: dict, root: Path, url: str, expert_bytes: int, n_experts_total: int) -> list[dict]:
    """Decode tokens/s, every mode run ``reps`` times interleaved with the in-memory model. Reported:
    the best run of each (the machine is shared: others can only slow a run down) and the median
    of the paired ratios (each paged run against the in-memory run just before it)."""
    from transformers import AutoModelForCausalLM

    from pion.client.adapters.moe_transformers import load_paged_moe

    prompt = list(repo_text(size["prompt"]))
    runners = {"in-memory": AutoModelForCausalLM.from_pretrained(str(root / "mix")).eval()}
    paged = {}
    for lane, fraction, prefetch in PAGED_MODES:
        budget = fraction * n_experts_total * expert_bytes / 2**20 * 1.001
        name = f"paged {int(fraction * 100)}% {lane}{'' if prefetch else ' no-prefetch'}"
        paged[name] = load_paged_moe(root / "mix", url, cache_mib=budget, lane=lane, prefetch=prefetch)
        runners[name] = paged[name].model
    for model in runners.values():
        greedy(model, prompt, 2)  # warm-up (a paged model fills its cache as a running one would)
    want, _ = greedy(runners["in-memory"], prompt, size["new_tokens"])
    best: dict[str, float] = {}
    same: dict[str, bool] = {}
    ratios: dict[str, list[float]] = {}
    for _ in range(size["reps"]):
        for name, model in paged.items():
            _, seconds = greedy(runners["in-memory"], prompt, size["new_tokens"])
            base_rate = size["new_tokens"] / seconds
            best["in-memory"] = max(best.get("in-memory", 0.0), base_rate)
            model.reset_stats()
            got, seconds = greedy(model.model, prompt, size["new_tokens"])
            rate = size["new_tokens"] / seconds
            best[name] = max(best.get(name, 0.0), rate)
            ratios.setdefault(name, []).append(rate / base_rate)
            same[name] = same.get(name, True) and got == want
    base = best["in-memory"]
    rows = [emit("decode", mode="in-memory", tokens_per_s=base, ratio=1.0, same_tokens=True)]
    for (lane, _, prefetch), (name, run) in zip(PAGED_MODES, paged.items(), strict=True):
        s = run.stats()
        rows.append(emit("decode", mode=name, lane=lane, prefetch=prefetch, tokens_per_s=best[name],
                         ratio=float(np.median(ratios[name])), best_ratio=best[name] / base, same_tokens=same[name],
                         hit_rate=s["hit_rate"],
                         stall_ms=s["stall_ms"], prefetches=s["prefetches"], prefetch_hits=s["prefetch_hits"],
                         prediction_accuracy=s["prediction_accuracy"], prefetch_gated=s["prefetch_gated"],
                         mib_fetched=s["bytes_fetched"] / 2**20, client_mib=run.cache.budget / 2**20))
        run.close()
    return rows


def drop_page_cache(directory: Path) -> None:
    for path in directory.glob("*.safetensors"):
        with open(path, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def disk_floor(size: dict, root: Path) -> list[dict]:
    """The same expert's bytes read with plain ``pread`` by this process, page cache warm and
    dropped: what no server can beat on this disk, measured in the same run."""
    rows = []
    shard = next((root / "lat").glob("*.safetensors"))
    nbytes = 3 * size["latency"][0] * size["latency"][1] * 4
    target = memoryview(bytearray(nbytes))
    for case in ("warm read", "cold read"):
        samples = []
        for _ in range(size["misses"]):
            with open(shard, "rb") as handle:
                if case == "cold read":
                    os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                began = time.perf_counter()
                done = 0
                while done < nbytes:
                    done += os.preadv(handle.fileno(), [target[done:]], done)
                samples.append((time.perf_counter() - began) * 1000)
        rows.append(emit("latency", lane="disk (pread)", case=case, expert_mib=nbytes / 2**20,
                         p50_ms=float(np.percentile(samples, 50)), p99_ms=float(np.percentile(samples, 99)),
                         min_ms=min(samples), samples=len(samples)))
    return rows


def fetch_latency(size: dict, root: Path, url: str, budget_mib: int) -> list[dict]:
    """p50/p99 of one 10 MB expert: hit, warm miss and cold miss, per lane."""
    client = PionClient(url)
    rows = disk_floor(size, root)
    for lane in ("local", "resp"):
        source = ExpertSource.load(client, "lat", lane=lane)
        hits = ("hit, map kept", "hit, fresh map") if lane == "local" else ("hit",)
        for case in (*hits, "warm miss", "cold miss"):
            samples = []
            count = size["hits"] if case.startswith("hit") else size["misses"]
            for i in range(count):
                expert = i % 4
                if case.startswith("hit"):
                    source.fetch(0, expert)  # resident from here on
                else:
                    client.execute("CONFIG", "SET", "moe-cache-mib", "0")  # evict everything
                    client.execute("CONFIG", "SET", "moe-cache-mib", budget_mib)
                    if case == "cold miss":
                        drop_page_cache(root / "lat")
                    time.sleep(0.02)  # decode computes between misses: the spare-file refill runs then
                if case != "hit, map kept":
                    source._maps.clear()  # the local lane maps (and populates) the file afresh
                began = time.perf_counter()
                parts = source.fetch(0, expert)
                _ = sum(float(a.reshape(-1)[-1]) for k, a in parts.items() if k != "gate_up")  # the bytes are there
                samples.append((time.perf_counter() - began) * 1000)
            rows.append(emit("latency", lane=lane, case=case, expert_mib=source.info["expert_bytes"] / 2**20,
                             p50_ms=float(np.percentile(samples, 50)), p99_ms=float(np.percentile(samples, 99)),
                             min_ms=min(samples), samples=len(samples)))
        source.close()
    client.close()
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r["trace"] for r in rows))
    fig, axes = plt.subplots(1, len(traces), figsize=(4.2 * len(traces), 3.6), sharey=True)
    for ax, trace in zip(np.atleast_1d(axes), traces, strict=True):
        mine = [r for r in rows if r["trace"] == trace]
        x = [100 * r["fraction"] for r in mine]
        for key, style in (("belady", "k--"), ("nextuse", "o-"), ("lru", "s-")):
            ax.plot(x, [100 * r[key] for r in mine], style, label={"nextuse": "Pion (nextuse)"}.get(key, key))
        ax.plot(x, x, ":", color="grey", label="cache fraction")
        ax.set_title(trace, fontsize=9)
        ax.set_xlabel("cache, % of all experts")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("hit rate, %")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def tables(hit: list[dict], decode: list[dict], latency: list[dict]) -> None:
    if hit:
        print("\n| trace | cache | LRU | Pion (nextuse) | Belady | Pion - LRU | Belady - Pion |\n|---|---|---|---|---|---|---|")
    for r in hit:
        print(f"| {r['trace']} | {r['fraction']:.0%} | {r['lru']:.1%} | {r['nextuse']:.1%} | {r['belady']:.1%} | "
              f"{100 * (r['nextuse'] - r['lru']):+.1f} pt | {100 * (r['belady'] - r['nextuse']):.1f} pt |")
    print("\n| mode | tokens/s (best) | vs in-memory (median of paired runs) | same tokens | client hit rate | stall ms (last run) | "
          "prefetches / used | next-layer prediction right |\n|---|---|---|---|---|---|---|---|")
    for r in decode:
        used = f"{r['prefetches']} / {r['prefetch_hits']}" if "prefetches" in r else "-"
        right = f"{r['prediction_accuracy']:.0%}" if r.get("prefetch") else "-"
        print(f"| {r['mode']} | {r['tokens_per_s']:.1f} | {r['ratio']:.2f} | {r['same_tokens']} | "
              f"{r.get('hit_rate', 1.0):.1%} | {r.get('stall_ms', 0):.0f} | {used} | {right} |")
    print("\n| lane | case | expert MiB | p50 ms | p99 ms | min ms | samples |\n|---|---|---|---|---|---|---|")
    for r in latency:
        print(f"| {r['lane']} | {r['case']} | {r['expert_mib']:.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['min_ms']:.2f} | {r['samples']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CI-sized run")
    parser.add_argument("--out-dir", default=str(ROOT / "docs"), help="where the plot and JSON go")
    parser.add_argument("--skip-traces", action="store_true", help="only tokens/s and latency (no plot)")
    args = parser.parse_args()
    size = SMOKE if args.smoke else FULL
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = "_smoke" if args.smoke else ""
    print(f"# load average at start: {os.getloadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-moe-"))
    root = work / "models"
    model = make_model(size)
    save_hf(model, root / "mix", "original", shard_kb=16 * 1024)
    n_layers, n_experts = size["num_hidden_layers"], size["n_experts"]
    hit = [] if args.skip_traces else trace_study(model, size)
    del model
    hidden, inter = size["latency"]
    write_checkpoint(root / "lat", "per_expert", n_layers=1, n_experts=6, hidden=hidden, inter=inter, shards=1)
    expert_bytes = 3 * size["hidden_size"] * size["inter"] * 4
    server = ProcessServer(work / "data", "--moe-cache", str(root), "--moe-cache-mib", str(SERVER_MIB), "--appendonly",
                           "no", "--save", "").start()
    try:
        url = f"pion://127.0.0.1:{server.port}"
        decode = tokens_per_second(size, root, url, expert_bytes, n_layers * n_experts)
        latency = fetch_latency(size, root, url, SERVER_MIB)
    finally:
        server.stop()
    tables(hit, decode, latency)
    tag += "_timing" if args.skip_traces else ""
    (out_dir / f"moe_bench{tag}.json").write_text(json.dumps({"hit_rate": hit, "decode": decode, "latency": latency,
                                                              "loadavg_end": os.getloadavg()}, indent=1))
    if hit:
        plot(hit, out_dir / f"moe_hit_rate{tag}.png")
    print(f"\n# load average at end: {os.getloadavg()}")
    return 0 if all(r["same_tokens"] for r in decode) else 1


if __name__ == "__main__":
    sys.exit(main())
