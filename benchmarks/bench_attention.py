"""Stage 2 on the CPU: kernel latency, needle recall of the selectors, sparse vs dense, a canary.

One server in its own process (``--appendonly no``: the rows are not what is measured), one
client, everything in one run so the ratios share the machine's load (printed with each part):

- ``kernel``: ``ATTEND.PREFIX.QUERY`` (M=1, over loopback) latency vs N and H/D shapes, the same
  kernel in-process (``pion.attention``), and torch's ``scaled_dot_product_attention`` on the same
  tensors and CPU (the anchor a user has);
- ``needles``: 20 needles per prefix (keys aligned with their query so dense attention gives each
  ~88% of its mass, planted in every kv head, or in one head only) at 8K..64K tokens; recall of
  block-mean and Quest at a budget of max(1% of N, 512) tokens (whole 64-token blocks), by the
  selector the server runs; the server's sparse reply is checked against the in-process one;
- ``speed``: at the largest N, ``QUERY_SPARSE_AUTO`` (Quest) vs the server's own dense ``QUERY``
  over the same warm prefix, and the bytes on the wire per query (goal: >= 20x);
- ``canary``: PING latency from a second client while heavy queries run (kernels are off the loop).

    python benchmarks/bench_attention.py                 # full (2K..64K), writes results + plot
    python benchmarks/bench_attention.py --smoke         # CI-sized
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.servers import ProcessServer  # noqa: E402

from pion.attention.dense import grouped_map  # noqa: E402
from pion.attention.query import Query, Selector, answer  # noqa: E402
from pion.attention.select import (  # noqa: E402
    BLOCK_MEAN,
    BLOCK_MEAN_PER_HEAD,
    QUEST,
    QUEST_PER_HEAD,
    SELECTOR_NAMES,
    select_tokens,
    select_tokens_per_head,
    summarize,
)
from pion.attention.tier import PrefixView  # noqa: E402

BLOCK = 64
NEEDLES = 20


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median_ms(fn, repeats: int) -> float:
    return interleaved({"x": fn}, repeats)["x"]


def interleaved(fns: dict, repeats: int) -> dict:
    """Median ms of each function, timed in rounds (one call of each per round), so a burst of
    load from the other processes on the machine hits every contender alike."""
    for fn in fns.values():
        fn()
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t) * 1000) for name, t in times.items()}


def torch_one_thread(fn):
    """``fn`` run with torch on one thread (the setting that is fastest on a small shared machine)."""
    import torch

    def run():
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)

    return run


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def store(r, sid: str, k: np.ndarray, v: np.ndarray) -> float:
    heads, n, dim = k.shape
    start = time.perf_counter()
    r.execute_command("ATTEND.PREFIX.STORE", sid, 0, heads, n, dim, k.tobytes(), v.tobytes())
    return time.perf_counter() - start


def query(r, sid: str, q: np.ndarray, n: int) -> bytes:
    return r.execute_command("ATTEND.PREFIX.QUERY", sid, 0, q.shape[0], q.shape[2], n, q.tobytes())


def sparse_query(r, sid: str, q: np.ndarray, k_top: int, kv_heads: int, selector: int) -> bytes:
    return r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO", sid, 0, q.shape[0], q.shape[2], BLOCK, k_top,
                             kv_heads, q.tobytes(), b"", -1, selector)


def k_top_for(n: int) -> int:
    """Blocks for a budget of max(1% of N, 512) tokens."""
    return math.ceil(max(0.01 * n, 512) / BLOCK)


# -- kernel ------------------------------------------------------------------------------------------


def bench_kernel(r, sizes: list[int], shapes: list[tuple[int, int, int]], repeats: int) -> list[dict]:
    import threadpoolctl

    threadpoolctl.threadpool_limits(1, user_api="blas")  # as the server runs its kernels
    rows = []
    rng = np.random.default_rng(0)
    for q_heads, kv_heads, dim in shapes:
        for n in sizes:
            if kv_heads * n * dim * 4 > 300e6:
                continue  # keeps one layer's K under ~300 MB on a small shared machine
            rows.append(kernel_row(r, rng, n, q_heads, kv_heads, dim, repeats))
            print(json.dumps(rows[-1]), flush=True)
            r.execute_command("KV.PREFIX.DROP", "kern")
    return rows


def kernel_row(r, rng, n: int, q_heads: int, kv_heads: int, dim: int, repeats: int) -> dict:
    import torch

    k = rng.standard_normal((kv_heads, n, dim), dtype=np.float32)
    v = rng.standard_normal((kv_heads, n, dim), dtype=np.float32)
    q = rng.standard_normal((q_heads, 1, dim), dtype=np.float32)
    store_s = store(r, "kern", k, v)
    view = PrefixView(k, v, 0)
    local = Query(q, grouped_map(q_heads, kv_heads), dim ** -0.5)
    tq, tk, tv = (torch.from_numpy(x).unsqueeze(0) for x in (q, k, v))
    gqa = q_heads != kv_heads

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=gqa)

    timed = interleaved({"server_query_ms": lambda: query(r, "kern", q, n),
                         "inproc_kernel_ms": lambda: answer(view, local),
                         "torch_sdpa_ms": sdpa, "torch_sdpa_1thread_ms": torch_one_thread(sdpa)}, repeats)
    row = {"part": "kernel", "n": n, "q_heads": q_heads, "kv_heads": kv_heads, "dim": dim, **timed,
           "store_s": round(store_s, 3), "torch_threads": torch.get_num_threads(), "loadavg": load()}
    row["server_vs_torch"] = round(row["server_query_ms"] / min(row["torch_sdpa_ms"], row["torch_sdpa_1thread_ms"]), 2)
    return row


# -- needles -----------------------------------------------------------------------------------------


def plant(rng, n: int, kv_heads: int, dim: int, one_head: bool):
    """Keys with 20 needles and the 20 queries that look for them, ``(k, v, queries, positions)``."""
    scales = np.exp(rng.normal(0, 0.5, dim)).astype(np.float32)  # uneven channels, as real keys have
    k = rng.standard_normal((kv_heads, n, dim), dtype=np.float32) * scales
    v = rng.standard_normal((kv_heads, n, dim), dtype=np.float32)
    positions = ((np.arange(NEEDLES) + 0.5) * n / NEEDLES).astype(int)
    logit = math.log(n) + 2  # dense attention gives the needle about 88% of its mass
    queries = []
    for i, pos in enumerate(positions):
        q = rng.standard_normal((kv_heads, dim)).astype(np.float32)
        heads = [i % kv_heads] if one_head else range(kv_heads)
        for h in heads:
            k[h, pos] = q[h] * (logit * math.sqrt(dim) / float(q[h] @ q[h]))
        queries.append(q[:, None, :])
    return k, v, queries, positions


def selected(q, n, view, head_map, k_top, selector, pos, head, one_head) -> float:
    """Did the selector keep the needle? For the per-head selectors: the fraction of the heads
    holding it whose own selection kept it."""
    summary = view.summaries[(BLOCK, 0)]
    if selector in (QUEST_PER_HEAD, BLOCK_MEAN_PER_HEAD):
        per_head = select_tokens_per_head(q[:, 0], n, summary, head_map, k_top, selector)
        heads = [head] if one_head else range(len(head_map))
        return 1.0 if per_head is None else float(np.mean([pos in set(per_head[h].tolist()) for h in heads]))
    tokens = select_tokens(q[:, 0], n, summary, head_map, k_top, selector)
    return float(tokens is None or pos in set(tokens.tolist()))


def needle_mass(view: PrefixView, q: np.ndarray, pos: int, head: int) -> float:
    scores = view.k[head] @ q[head, 0] / math.sqrt(q.shape[2])
    weights = np.exp(scores - scores.max())
    return float(weights[pos] / weights.sum())


def bench_needles(r, sizes: list[int], kv_heads: int = 8, dim: int = 64) -> list[dict]:
    rows = []
    rng = np.random.default_rng(1)
    head_map = grouped_map(kv_heads, kv_heads)
    for n in sizes:
        k_top = k_top_for(n)
        for one_head in (False, True):
            k, v, queries, positions = plant(rng, n, kv_heads, dim, one_head)
            view = PrefixView(k, v, 0, summaries={(BLOCK, 0): summarize(k, BLOCK)})
            store(r, "needles", k, v)
            found = {BLOCK_MEAN: 0.0, QUEST: 0.0, BLOCK_MEAN_PER_HEAD: 0.0, QUEST_PER_HEAD: 0.0}
            parity = 0.0
            for i, (q, pos) in enumerate(zip(queries, positions, strict=True)):
                for selector in found:
                    found[selector] += selected(q, n, view, head_map, k_top, selector, pos, i % kv_heads, one_head)
                if i < 3:  # the server picks the same tokens: its reply equals the in-process one
                    got = np.frombuffer(sparse_query(r, "needles", q, k_top, kv_heads, QUEST), "<f4")
                    want = answer(view, Query(q, head_map, dim ** -0.5, selector=Selector(BLOCK, k_top, QUEST))).out
                    parity = max(parity, float(np.abs(got - want.reshape(-1)).max()))
            attended = k_top * BLOCK + n % BLOCK
            row = {"part": "needles", "n": n, "needle_in": "one head" if one_head else "every head",
                   "budget_tokens": attended, "budget_fraction": round(attended / n, 4),
                   **{f"recall_{SELECTOR_NAMES[sel].replace('-', '_')}": round(count / NEEDLES, 3) for sel, count in found.items()},
                   "dense_needle_mass": round(float(np.mean([needle_mass(view, q, p, (i % kv_heads))
                                                             for i, (q, p) in enumerate(zip(queries, positions, strict=True))])), 3),
                   "server_vs_inproc_max_abs": parity, "loadavg": load()}
            rows.append(row)
            print(json.dumps(row), flush=True)
            r.execute_command("KV.PREFIX.DROP", "needles")
    return rows


# -- speed and canary ----------------------------------------------------------------------------------


def bench_speed(r, n: int, repeats: int, kv_heads: int = 8, dim: int = 64) -> dict:
    rng = np.random.default_rng(2)
    k = rng.standard_normal((kv_heads, n, dim), dtype=np.float32)
    v = rng.standard_normal((kv_heads, n, dim), dtype=np.float32)
    store(r, "speed", k, v)
    qs = [rng.standard_normal((kv_heads, 1, dim), dtype=np.float32) for _ in range(8)]
    cycle = iter(range(1 << 30))
    k_top = k_top_for(n)
    view = PrefixView(k, v, 0, summaries={(BLOCK, 0): summarize(k, BLOCK)})
    head_map = grouped_map(kv_heads, kv_heads)

    def local(selector):
        sel = None if selector is None else Selector(BLOCK, k_top, selector)
        return lambda: answer(view, Query(qs[next(cycle) % 8], head_map, dim ** -0.5, selector=sel))

    timed = interleaved({
        "dense": lambda: query(r, "speed", qs[next(cycle) % 8], n),
        "quest": lambda: sparse_query(r, "speed", qs[next(cycle) % 8], k_top, kv_heads, QUEST),
        "mean": lambda: sparse_query(r, "speed", qs[next(cycle) % 8], k_top, kv_heads, BLOCK_MEAN),
        "local_dense": local(None), "local_quest": local(QUEST), "local_mean": local(BLOCK_MEAN)}, repeats * 2)
    dense, sparse, mean = timed["dense"], timed["quest"], timed["mean"]
    row = {"part": "speed", "n": n, "kv_heads": kv_heads, "dim": dim, "k_top": k_top,
           "dense_query_ms": dense, "sparse_quest_ms": sparse, "sparse_block_mean_ms": mean,
           "speedup_quest": round(dense / sparse, 1), "speedup_block_mean": round(dense / mean, 1),
           "kernel_dense_ms": timed["local_dense"], "kernel_quest_ms": timed["local_quest"],
           "kernel_block_mean_ms": timed["local_mean"],
           "kernel_speedup_quest": round(timed["local_dense"] / timed["local_quest"], 1),
           "kernel_speedup_block_mean": round(timed["local_dense"] / timed["local_mean"], 1),
           "wire_bytes_per_query": {"sent": qs[0].nbytes, "received": kv_heads * dim * 4},
           "prefix_bytes_k_plus_v": k.nbytes + v.nbytes, "loadavg": load()}
    print(json.dumps(row), flush=True)
    return row


def bench_canary(r, port: int, n: int, rows: int, seconds: float) -> dict:
    """PING from a second client every ms while this one runs M-row dense queries over N tokens."""
    rng = np.random.default_rng(3)
    k = rng.standard_normal((8, n, 64), dtype=np.float32)
    store(r, "canary", k, k)
    q = rng.standard_normal((8, rows, 64), dtype=np.float32)

    def pings(duration: float) -> list[float]:
        other = redis.Redis(port=port)
        out, end = [], time.time() + duration
        while time.time() < end:
            start = time.perf_counter()
            other.ping()
            out.append((time.perf_counter() - start) * 1000)
            time.sleep(0.001)
        return out

    idle = pings(min(2.0, seconds))
    during: list[float] = []
    canary = threading.Thread(target=lambda: during.extend(pings(seconds)))
    canary.start()
    heavy, end = [], time.time() + seconds
    while time.time() < end:
        start = time.perf_counter()
        query(r, "canary", q, n)
        heavy.append((time.perf_counter() - start) * 1000)
    canary.join()
    row = {"part": "canary", "n": n, "query_rows": rows, "heavy_query_ms_median": float(np.median(heavy)),
           "heavy_queries": len(heavy), "ping_ms_idle_p50": float(np.percentile(idle, 50)),
           "ping_ms_idle_max": float(max(idle)), "ping_ms_during_p50": float(np.percentile(during, 50)),
           "ping_ms_during_p99": float(np.percentile(during, 99)), "ping_ms_during_max": float(max(during)),
           "pings_during": len(during), "loadavg": load()}
    print(json.dumps(row), flush=True)
    r.execute_command("KV.PREFIX.DROP", "canary")
    return row


# -- report ----------------------------------------------------------------------------------------------


def plot(results: dict, path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for where, style in (("every head", "-"), ("one head", "--")):
        rows = [row for row in results["needles"] if row["needle_in"] == where]
        xs = [row["n"] for row in rows]
        left.plot(xs, [row["recall_quest"] for row in rows], "o" + style, label=f"Quest, needle in {where}")
        left.plot(xs, [row["recall_block_mean"] for row in rows], "s" + style, label=f"block-mean, needle in {where}")
        if where == "one head":
            left.plot(xs, [row["recall_quest_per_head"] for row in rows], "^" + style,
                      label="Quest per head (Pion), needle in one head")
    left.set(xscale="log", xlabel="prefix tokens N", ylabel="needle recall (20 needles)", ylim=(-0.05, 1.05),
             title="Recall at budget max(1% N, 512)")
    left.legend(fontsize=8)
    shape = [row for row in results["kernel"] if (row["q_heads"], row["kv_heads"], row["dim"]) == (8, 8, 64)]
    xs = [row["n"] for row in shape]
    right.plot(xs, [row["server_query_ms"] for row in shape], "o-", label="Pion QUERY dense (loopback)")
    right.plot(xs, [row["inproc_kernel_ms"] for row in shape], "^-", label="pion.attention kernel (in-process)")
    right.plot(xs, [row["torch_sdpa_ms"] for row in shape], "s-", label="torch SDPA (same CPU, 2 threads)")
    right.plot(xs, [row["torch_sdpa_1thread_ms"] for row in shape], "s:", label="torch SDPA (1 thread)")
    if results.get("sparse_by_n"):
        right.plot([row["n"] for row in results["sparse_by_n"]], [row["sparse_quest_ms"] for row in results["sparse_by_n"]],
                   "d-", label="Pion QUERY_SPARSE_AUTO Quest (loopback)")
    right.set(xscale="log", yscale="log", xlabel="prefix tokens N", ylabel="ms per decode query (H=8, D=64)",
              title=f"Latency (load avg {results['loadavg_start'][0]})")
    low, high = right.get_ylim()
    right.set_ylim(low, high * 30)  # room for the legend above the lines
    right.legend(fontsize=8, loc="upper left")
    for axis, sizes in ((left, [row["n"] for row in results["needles"]]), (right, xs)):
        ticks = sorted(set(sizes))
        axis.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        axis.set_xticks(ticks, [f"{n // 1024}K" for n in ticks])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="CI-sized: small N, few repeats")
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--plot", default=str(ROOT / "docs" / "attention.png"))
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    sizes = [1024, 4096] if args.smoke else [2048, 4096, 8192, 16384, 32768, 65536]
    needle_sizes = [2048, 4096] if args.smoke else [8192, 16384, 32768, 65536]
    shapes = [(8, 8, 64)] if args.smoke else [(8, 8, 64), (9, 3, 64), (32, 8, 128)]
    repeats = 3 if args.smoke else args.repeats
    tmp = Path(tempfile.mkdtemp(prefix="bench-attention-"))
    srv = ProcessServer(tmp / "data", "--appendonly", "no", "--save", "", "--attention-warm-bytes", "4gb").start()
    results: dict = {"loadavg_start": load(), "cpus": os.cpu_count()}
    try:
        r = redis.Redis(port=srv.port, socket_timeout=300)
        log(f"kernel sweep {sizes} shapes {shapes} (load {load()})")
        results["kernel"] = bench_kernel(r, sizes, shapes, repeats)
        log(f"needles {needle_sizes} (load {load()})")
        results["needles"] = bench_needles(r, needle_sizes)
        log(f"sparse vs dense (load {load()})")
        results["sparse_by_n"] = [bench_speed(r, n, repeats) for n in needle_sizes]
        results["speed"] = results["sparse_by_n"][-1]
        log(f"canary (load {load()})")
        results["canary"] = bench_canary(r, srv.port, needle_sizes[-1], 16 if args.smoke else 256, 2 if args.smoke else 8)
    finally:
        srv.stop()
    results["loadavg_end"] = load()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = "attention_smoke" if args.smoke else "attention"
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    plot(results, Path(args.plot) if not args.smoke else out / f"{name}.png")
    speed = results["speed"]
    print(f"sparse vs dense at N={speed['n']}: over the wire Quest {speed['speedup_quest']}x, block-mean "
          f"{speed['speedup_block_mean']}x; kernel Quest {speed['kernel_speedup_quest']}x, block-mean "
          f"{speed['kernel_speedup_block_mean']}x (goal >= 20x); load {results['loadavg_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
