"""Vector sets over RESP: ingest, recall@10 against an exact scan, latency and QPS, filtered
search, and how long other clients wait meanwhile.

A Gaussian mixture of ``--n`` vectors (``--dim``) plus held-out queries; the ground truth is a
numpy brute-force cosine scan in the same run. One ``pion-server`` process (``--appendfsync``
as given, default ``everysec``), VADDs pipelined from one client. Then, per EF (Redis's
default 100 and the ones in ``--ef``), VSIM COUNT 10 from 1 and ``--clients`` clients:
recall@10, QPS, p50/p99 latency; VSIM TRUTH (the server's own linear scan) as the baseline;
FILTER at 10% and 1% selectivity (recall against a filtered exact scan, and how many of the 10
asked come back); and a PING canary's p50/p99 while the searchers run, against idle and
against the same searches with NOTHREAD (run on the event loop). Prints
the load average with the results (the machine is shared), a markdown table, a JSON line, and
writes ``benchmarks/results/vsets_<n>x<dim>.json`` (+ a recall-vs-QPS plot if matplotlib is
installed; not with ``--smoke``).

    python benchmarks/bench_vsets.py                 # 20,000 x 128
    python benchmarks/bench_vsets.py --smoke         # CI-sized
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.support.servers import ProcessServer  # noqa: E402


def mixture(n: int, dim: int, seed: int, centers: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(centers), n)
    return (centers[picks] + 0.6 * rng.normal(size=(n, dim))).astype(np.float32)


def exact_top(data_unit: np.ndarray, queries: np.ndarray, k: int, mask: np.ndarray | None = None) -> list[set[int]]:
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    sims = q @ data_unit.T
    if mask is not None:
        sims[:, ~mask] = -np.inf
    return [set(np.argsort(-row)[:k].tolist()) for row in sims]


def ingest(port: int, data: np.ndarray, quant: str, batch: int = 500) -> float:
    r = redis.Redis(port=port, socket_timeout=600)
    start = time.perf_counter()
    for lo in range(0, len(data), batch):
        pipe = r.pipeline(transaction=False)
        for i in range(lo, min(lo + batch, len(data))):
            attr = json.dumps({"c": i % 10, "r": i % 100})
            pipe.execute_command("VADD", "vs", "FP32", data[i].tobytes(), f"e{i}", quant, "SETATTR", attr)
        pipe.execute()
        done = min(lo + batch, len(data))
        if done % (batch * 10) == 0 or done == len(data):
            print(f"  ingested {done}/{len(data)} ({done / (time.perf_counter() - start):.0f}/s)", flush=True)
    return time.perf_counter() - start


def run_queries(port: int, queries: np.ndarray, clients: int, extra: list) -> tuple[list, list[float], float]:
    """Each client takes every ``clients``-th query; returns per-query results, latencies, wall."""
    results: list = [None] * len(queries)
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        r = redis.Redis(port=port, socket_timeout=600, protocol=2)
        mine = []
        for i in range(offset, len(queries), clients):
            t0 = time.perf_counter()
            results[i] = r.execute_command("VSIM", "vs", "FP32", queries[i].tobytes(), "COUNT", 10, *extra)
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, latencies, time.perf_counter() - start


def recall(results: list, truth: list[set[int]]) -> float:
    scores = [len({int(name[1:]) for name in got} & want) / max(1, len(want)) for got, want in zip(results, truth, strict=True)]
    return float(np.mean(scores))


def canary(port: int, stop: threading.Event) -> list[float]:
    r = redis.Redis(port=port, socket_timeout=60)
    out = []
    while not stop.is_set():
        t0 = time.perf_counter()
        r.ping()
        out.append(time.perf_counter() - t0)
        time.sleep(0.01)
    return out


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q) * 1000) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--ef", type=int, nargs="*", default=[10, 40, 200, 400])
    ap.add_argument("--quant", default="Q8", choices=["Q8", "NOQUANT", "BIN"])
    ap.add_argument("--appendfsync", default="everysec", choices=["always", "everysec", "no"])
    ap.add_argument("--smoke", action="store_true", help="CI size: 1,500 x 16, 30 queries, EF 10 only")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.dim, args.queries, args.clients, args.ef = 1500, 16, 30, 2, [10]
    load_before = os.getloadavg()
    centers = np.random.default_rng(0).normal(size=(64, args.dim))
    data = mixture(args.n, args.dim, 1, centers)
    queries = mixture(args.queries, args.dim, 2, centers)
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    truth = exact_top(unit, queries, 10)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        srv = ProcessServer(Path(tmp) / "data", "--appendfsync", args.appendfsync, "--loglevel", "warning").start()
        try:
            seconds = ingest(srv.port, data, args.quant)
            rows.append({"case": "ingest", "seconds": round(seconds, 1), "per_s": round(args.n / seconds)})
            idle_stop = threading.Event()
            timer = threading.Timer(1.0, idle_stop.set)
            timer.start()
            idle = canary(srv.port, idle_stop)
            for ef in [None, *args.ef, "NOTHREAD"]:
                extra = [] if ef is None else ["NOTHREAD"] if ef == "NOTHREAD" else ["EF", ef]
                for clients in (1, args.clients) if ef != "NOTHREAD" else (args.clients,):
                    stop = threading.Event()
                    box: list = []
                    pinger = threading.Thread(target=lambda s=stop, b=box: b.append(canary(srv.port, s)))
                    pinger.start()
                    res, lat, wall = run_queries(srv.port, queries, clients, extra)
                    stop.set()
                    pinger.join()
                    case = "VSIM EF default(100) NOTHREAD" if ef == "NOTHREAD" else f"VSIM EF {ef or 'default(100)'}"
                    rows.append({"case": case, "clients": clients,
                                 "recall@10": round(recall(res, truth), 4), "qps": round(len(queries) / wall),
                                 "p50_ms": round(pct(lat, 50), 2), "p99_ms": round(pct(lat, 99), 2),
                                 "ping_p50_ms": round(pct(box[0], 50), 2), "ping_p99_ms": round(pct(box[0], 99), 2)})
                    print(rows[-1], flush=True)
            res, lat, wall = run_queries(srv.port, queries[: max(10, len(queries) // 5)], 1, ["TRUTH"])
            rows.append({"case": "VSIM TRUTH (server linear scan)", "clients": 1,
                         "recall@10": round(recall(res, truth[: len(res)]), 4), "qps": round(len(res) / wall),
                         "p50_ms": round(pct(lat, 50), 2), "p99_ms": round(pct(lat, 99), 2)})
            print(rows[-1], flush=True)
            ids = np.arange(args.n)
            for label, expr, mask in (("10%", ".c == 3", ids % 10 == 3), ("1%", ".r == 7", ids % 100 == 7)):
                want = exact_top(unit, queries, 10, mask)
                res, lat, wall = run_queries(srv.port, queries, 1, ["FILTER", expr])
                rows.append({"case": f"VSIM FILTER {label} ({expr})", "clients": 1,
                             "recall@10": round(recall(res, want), 4), "qps": round(len(queries) / wall),
                             "p50_ms": round(pct(lat, 50), 2), "p99_ms": round(pct(lat, 99), 2),
                             "returned_of_10": round(float(np.mean([len(r) for r in res])), 2)})
                print(rows[-1], flush=True)
            usage = redis.Redis(port=srv.port).memory_usage("vs")  # the set's own estimate
            rows.append({"case": "memory", "memory_usage_mb": round(usage / 2**20, 1),
                         "bytes_per_element": round(usage / args.n)})
        finally:
            srv.stop()
    load_after = os.getloadavg()
    brute = next(r for r in rows if r["case"].startswith("VSIM TRUTH"))["qps"]
    default1 = next(r for r in rows if r["case"] == "VSIM EF default(100)" and r["clients"] == 1)
    summary = {"n": args.n, "dim": args.dim, "quant": args.quant, "queries": args.queries,
               "idle_ping_p50_ms": round(pct(idle, 50), 2), "idle_ping_p99_ms": round(pct(idle, 99), 2),
               "graph_vs_truth_qps_ratio": round(default1["qps"] / max(1, brute), 1),
               "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
               "rows": rows}
    print(json.dumps(summary))
    print(f"\nvector sets, {args.n} x {args.dim} {args.quant}, load average {load_before[0]:.1f} -> {load_after[0]:.1f}"
          f" (2 cores, shared)\n")
    print("| case | clients | recall@10 | QPS | p50 ms | p99 ms | PING p99 ms meanwhile |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "qps" in r:
            print(f"| {r['case']} | {r['clients']} | {r['recall@10']} | {r['qps']} | {r['p50_ms']} | {r['p99_ms']} | "
                  f"{r.get('ping_p99_ms', '')} |")
    ingest_row = rows[0]
    print(f"\ningest {args.n} in {ingest_row['seconds']} s ({ingest_row['per_s']}/s); graph (EF 100, 1 client) "
          f"{summary['graph_vs_truth_qps_ratio']}x the server's linear scan; idle PING p99 {summary['idle_ping_p99_ms']} ms")
    if args.smoke:
        return  # a CI-sized run leaves the published results alone
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    name = f"vsets_{args.n}x{args.dim}"
    (out / f"{name}.json").write_text(json.dumps(summary, indent=1))
    _plot(rows, out / f"{name}.png")


def _ef_of(case: str) -> int:
    label = case.split("EF ")[1]
    return 100 if label.startswith("default") else int(label)


def _curve(case: str) -> bool:
    return case.startswith("VSIM EF") and not case.endswith("NOTHREAD")


def _plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for clients in sorted({r.get("clients") for r in rows if _curve(r["case"])}):
        pts = sorted((_ef_of(r["case"]), r["qps"], r["recall@10"]) for r in rows
                     if _curve(r["case"]) and r["clients"] == clients)
        ax.plot([p[1] for p in pts], [p[2] for p in pts], marker="o", label=f"{clients} client(s)")
        for ef, qps, rec in pts:
            ax.annotate(f"EF {ef}", (qps, rec), fontsize=7, xytext=(4, -10 if clients > 1 else 4),
                        textcoords="offset points")
    ax.set_xlabel("VSIM per second")
    ax.set_ylabel("recall@10")
    ax.set_title("Pion vector sets: recall vs throughput")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
