"""Restart of an FT HNSW index: the saved graph loaded (this tree) against the graph rebuilt.

One ``pion-server`` subprocess (the log on, fsync always) gets an HNSW index (COSINE, M 16,
EF_CONSTRUCTION 200) of N x D vectors from a Gaussian mixture, waits until the graph holds every
vector, answers Q held-out queries at EF_RUNTIME 64 (their recall@10 against an exact numpy scan
is the reference), then BGSAVE (which writes the graph file) and kill -9. Two restarts follow:

- **load**: started again on the same directory (the graph file is there);
- **rebuild**: killed again, the graph files deleted, started again: what every restart did
  before graphs were saved (or ``--rebuild-src`` runs another tree's server, e.g. the tree
  before this change, for that restart).

For each: seconds from spawn to the port answering, to the first query answering, to **full
recall** (the first of ``--window`` consecutive queries, the Q queries round-robin one at a time,
each answering with at least the recall it had before the restart: while a graph is rebuilt the
rows not in it yet are scanned exactly, so recall is reached early but slowly), and to
**settled** (FT.INFO ``indexing`` and ``search_hnsw_backlog`` at 0: the graph complete, queries
at their normal cost); the query latency p50/p99 of the queries sent before it settled; INFO's
graph counters; the share of queries (one pass after it settled) whose ids equal the answer
before the restart; and the server's log lines on the graph load and the recovery.

``--smoke`` is a CI size (2,000 x 32). Usage: ``python benchmarks/bench_vector_restart.py --n 50000``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_data(n: int, dim: int, queries: int, clusters: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)

    def draw(count: int) -> np.ndarray:
        labels = rng.integers(0, clusters, count)
        points = centers[labels] + 0.35 * rng.standard_normal((count, dim)).astype(np.float32)
        return points / np.linalg.norm(points, axis=1, keepdims=True)

    return draw(n), draw(queries)


def exact_top(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 64):
        sims = queries[start:start + 64] @ data.T
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.take_along_axis(sims, top, axis=1).argsort(axis=1)[:, ::-1]
        out[start:start + 64] = np.take_along_axis(top, order, axis=1)
    return out


class Server:
    def __init__(self, datadir: Path, src: Path) -> None:
        self.datadir, self.src = datadir, src
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def spawn(self) -> float:
        """Start the process; returns the spawn time (perf_counter)."""
        self.port = free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.src) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.datadir / "server.log", "ab")
        started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "pion.cli.server_main", "--port", str(self.port),
                                      "--dir", str(self.datadir)], stdout=log, stderr=subprocess.STDOUT, env=env)
        return started

    def wait_port(self, timeout: float = 300.0) -> redis.Redis:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"server exited: see {self.datadir / 'server.log'}")
            try:
                client = redis.Redis(port=self.port, protocol=2, socket_timeout=600)
                client.ping()
                return client
            except (redis.ConnectionError, redis.BusyLoadingError):
                time.sleep(0.02)
        raise RuntimeError("server did not come up")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def query(client: redis.Redis, vec: np.ndarray, k: int, ef: int) -> list[int]:
    res = client.execute_command("FT.SEARCH", "vec", f"*=>[KNN {k} @emb $B EF_RUNTIME {ef}]", "NOCONTENT", "LIMIT",
                                 "0", str(k), "PARAMS", "2", "B", vec.tobytes(), "DIALECT", "2")
    return [int(key.split(b":")[1]) for key in res[1:]]


def settled(client: redis.Redis) -> bool:
    return int(client.ft("vec").info()["indexing"]) == 0 and int(client.info("search")["search_hnsw_backlog"]) == 0


def ingest(client: redis.Redis, data: np.ndarray, batch: int = 500) -> tuple[float, float]:
    client.execute_command("FT.CREATE", "vec", "ON", "HASH", "PREFIX", "1", "v:", "SCHEMA", "emb", "VECTOR", "HNSW",
                           "10", "TYPE", "FLOAT32", "DIM", str(data.shape[1]), "DISTANCE_METRIC", "COSINE", "M", "16",
                           "EF_CONSTRUCTION", "200")
    started = time.perf_counter()
    for lo in range(0, len(data), batch):
        pipe = client.pipeline(transaction=False)
        for i in range(lo, min(lo + batch, len(data))):
            pipe.hset(f"v:{i}", "emb", data[i].tobytes())
        pipe.execute()
    acked = time.perf_counter() - started
    while not settled(client):
        time.sleep(0.2)
    return acked, time.perf_counter() - started


def recall_of(truth: np.ndarray, ids: list[int]) -> float:
    return len(set(ids) & set(truth.tolist())) / len(truth)


def measure_restart(server: Server, queries: np.ndarray, truth: np.ndarray, reference: list[float],
                    before_ids: list[list[int]], k: int, ef: int, window: int, limit: float) -> dict:
    spawned = server.spawn()
    client = server.wait_port()
    t_port = time.perf_counter() - spawned
    lat: list[float] = []  # queries sent before the index settled
    good_since: float | None = None
    run = 0
    t_first = t_full = t_settled = None
    same = 0
    answered = 0
    i = 0
    last_poll = 0.0
    while True:
        q = i % len(queries)
        sent = time.perf_counter()
        ids = query(client, queries[q], k, ef)
        now = time.perf_counter()
        if t_settled is None:
            lat.append(now - sent)
        if t_first is None:
            t_first = now - spawned
        ok = recall_of(truth[q], ids) >= reference[q] - 1e-9
        if ok:
            if run == 0:
                good_since = sent - spawned
            run += 1
        else:
            run = 0
        if t_full is None and run >= window:
            t_full = good_since
        if t_settled is None and now - last_poll > 0.25:
            last_poll = now
            if settled(client):
                t_settled = time.perf_counter() - spawned
        if t_full is not None and t_settled is not None:
            answered += 1
            same += int(ids == before_ids[q])
            if answered >= len(queries):
                break
        i += 1
        if now - spawned > limit:
            break
    info = client.info("search")
    lat_ms = np.asarray(lat or [0.0]) * 1000
    log = (server.datadir / "server.log").read_text(errors="replace").splitlines()
    notes = [line.split(": ", 1)[-1] for line in log[-400:] if "HNSW graph" in line or "data loaded" in line]
    return {
        "port_s": round(t_port, 2), "first_answer_s": round(t_first or -1, 2),
        "full_recall_s": None if t_full is None else round(t_full, 2),
        "settled_s": None if t_settled is None else round(t_settled, 2),
        "queries_before_settled": len(lat), "p50_ms": round(float(np.percentile(lat_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(lat_ms, 99)), 2), "server_log": notes[-3:],
        "same_ids": round(same / max(answered, 1), 4),
        "graphs_loaded": info.get("search_hnsw_graphs_loaded"), "graphs_rebuilt": info.get("search_hnsw_graphs_rebuilt"),
        "vectors_restored": info.get("search_hnsw_vectors_restored"), "vectors_built": info.get("search_hnsw_vectors_built"),
    }


def bgsave(client: redis.Redis) -> float:
    started = time.perf_counter()
    client.bgsave()
    while client.info("persistence")["rdb_bgsave_in_progress"]:
        time.sleep(0.05)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--ef", type=int, default=64)
    parser.add_argument("--window", type=int, default=50, help="consecutive queries at full recall")
    parser.add_argument("--limit", type=float, default=900.0, help="give up a restart after this many seconds")
    parser.add_argument("--rebuild-src", type=Path, default=None, help="src/ of the tree for the rebuild restart")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args()
    if args.smoke:
        args.n, args.dim, args.queries, args.window, args.clusters = 2000, 32, 50, 20, 10
    k = 10
    data, queries = make_data(args.n, args.dim, args.queries, args.clusters)
    truth = exact_top(data, queries, k)
    workdir = Path(tempfile.mkdtemp(prefix="pion-restart-"))
    server = Server(workdir, ROOT / "src")
    result: dict = {"n": args.n, "dim": args.dim, "queries": args.queries, "ef_runtime": args.ef,
                    "load_average": os.getloadavg()}
    try:
        server.spawn()
        client = server.wait_port()
        acked, built = ingest(client, data)
        result["ingest_acked_s"], result["graph_complete_s"] = round(acked, 1), round(built, 1)
        before_ids = [query(client, q, k, args.ef) for q in queries]
        reference = [recall_of(truth[i], ids) for i, ids in enumerate(before_ids)]
        result["recall_before"] = round(float(np.mean(reference)), 4)
        result["bgsave_s"] = round(bgsave(client), 2)
        graph_files = sorted((workdir / "search").glob("*.hnsw")) if (workdir / "search").is_dir() else []
        result["graph_file_bytes"] = sum(p.stat().st_size for p in graph_files)
        server.kill9()
        print(f"ingest {acked:.1f} s acked, graph complete {built:.1f} s; recall@10 {result['recall_before']}; "
              f"BGSAVE {result['bgsave_s']} s; graph file {result['graph_file_bytes'] / 1e6:.1f} MB", flush=True)
        result["load"] = measure_restart(server, queries, truth, reference, before_ids, k, args.ef, args.window,
                                         args.limit)
        print("load:", result["load"], flush=True)
        server.kill9()
        shutil.rmtree(workdir / "search", ignore_errors=True)
        if args.rebuild_src is not None:
            server.src = args.rebuild_src.resolve()
        result["rebuild"] = measure_restart(server, queries, truth, reference, before_ids, k, args.ef, args.window,
                                            args.limit)
        print("rebuild:", result["rebuild"], flush=True)
        result["load_average_after"] = os.getloadavg()
    finally:
        server.kill9()
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print("| restart | port open s | first answer s | full recall s | settled s | queries before settled | "
          "their p50 ms | their p99 ms | same ids after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("load", "rebuild"):
        r = result[name]
        print(f"| {name} | {r['port_s']} | {r['first_answer_s']} | {r['full_recall_s']} | {r['settled_s']} | "
              f"{r['queries_before_settled']} | {r['p50_ms']} | {r['p99_ms']} | {r['same_ids']} |")
    print(f"load average {result['load_average']} -> {result['load_average_after']}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    ok = result["load"]["full_recall_s"] is not None and result["load"]["graphs_loaded"] == 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
