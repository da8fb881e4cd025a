"""Vector search over RESP: ingest, recall@10 and QPS of FT.SEARCH KNN on an HNSW index.

Data: N x D float32 vectors from a Gaussian mixture (unit-normalised, COSINE), plus held-out
queries drawn from the same mixture; exact ground truth comes from a numpy scan in this run.
Measured against a fresh ``pion-server`` subprocess (default durability: the log, fsync always):

- ingest: pipelined HSETs until acknowledged, and until the HNSW graph holds every vector
  (FT.INFO indexing and INFO search ``search_hnsw_backlog`` reach 0)
- recall@10 and QPS at EF_RUNTIME 10 (Redis's default) and at tuned EFs, with 1 and 8 client
  processes, p50/p99 latency per query
- filtered KNN at 10% and 1% TAG selectivity (how often all k come back, and recall)
- brute force: the same queries scanned exactly with numpy in one thread (the baseline ratio)

Prints a table with the load average and writes JSON and a recall-vs-QPS plot.
``--smoke`` is the CI size (1,000 x 32). Usage: ``python benchmarks/bench_vector.py [--n 100000]``.

``--peer redis-stack`` is the side-by-side run instead (defaults 20,000 x 128, 50 clusters, HNSW
M 16 EF_CONSTRUCTION 200, KNN 10 at EF_RUNTIME 64): the same data ingested into a fresh Pion and a
fresh Redis Stack (tests/support/stack.py; both stopped on every exit path), then each load run on
Pion and on the peer one after the other (interleaved, the order alternating), with the same
redis-py client code: recall@10, QPS, p50/p99 from 1 and 8 client processes, for plain KNN and for
TAG and NUMERIC prefilters keeping 10% and 1% of the documents, and the ingest rate of each;
and each server's CPU time per query (``/proc``, all its threads), which the box's other load
moves far less than QPS. ``--peer redis-stack --smoke`` is its CI size (2,000 x 32).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
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


def make_data(n: int, dim: int, queries: int, clusters: int, seed: int = 7):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)

    def draw(count: int) -> np.ndarray:
        labels = rng.integers(0, clusters, count)
        points = centers[labels] + 0.35 * rng.standard_normal((count, dim)).astype(np.float32)
        return points / np.linalg.norm(points, axis=1, keepdims=True)

    return draw(n), draw(queries)


def exact_top(data: np.ndarray, queries: np.ndarray, k: int, subset: np.ndarray | None = None) -> np.ndarray:
    """Indices of the k nearest rows by cosine (data are unit vectors), in chunks."""
    rows = data if subset is None else data[subset]
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 64):
        sims = queries[start:start + 64] @ rows.T
        top = np.argpartition(-sims, min(k, sims.shape[1] - 1), axis=1)[:, :k]
        order = np.take_along_axis(sims, top, axis=1).argsort(axis=1)[:, ::-1]
        best = np.take_along_axis(top, order, axis=1)
        out[start:start + 64] = best if subset is None else subset[best]
    return out


def start_server(datadir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    log = open(datadir / "server.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "pion.cli.server_main", "--port", str(port), "--dir", str(datadir)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            redis.Redis(port=port).ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")


def ingest(port: int, data: np.ndarray, batch: int = 500) -> tuple[float, float]:
    r = redis.Redis(port=port, protocol=2)
    r.execute_command(
        "FT.CREATE", "vec", "ON", "HASH", "PREFIX", "1", "v:", "SCHEMA", "decile", "TAG", "centile", "TAG",
        "emb", "VECTOR", "HNSW", "10", "TYPE", "FLOAT32", "DIM", str(data.shape[1]), "DISTANCE_METRIC", "COSINE",
        "M", "16", "EF_CONSTRUCTION", "200")
    started = time.perf_counter()
    for lo in range(0, len(data), batch):
        pipe = r.pipeline(transaction=False)
        for i in range(lo, min(lo + batch, len(data))):
            pipe.hset(f"v:{i}", mapping={"decile": f"d{i % 10}", "centile": f"c{i % 100}", "emb": data[i].tobytes()})
        pipe.execute()
        if lo and lo % (batch * 40) == 0:
            print(f"  ingested {lo:,} vectors ({time.perf_counter() - started:.1f} s)", flush=True)
    acked = time.perf_counter() - started
    while True:
        info = r.ft("vec").info()
        backlog = int(r.info("search").get("search_hnsw_backlog", 0))
        if int(info["indexing"]) == 0 and backlog == 0:
            break
        time.sleep(0.2)
    return acked, time.perf_counter() - started


def _query_args(vec: np.ndarray, k: int, ef: int, flt: str) -> list:
    return ["FT.SEARCH", "vec", f"{flt}=>[KNN {k} @emb $B EF_RUNTIME {ef}]", "NOCONTENT", "LIMIT", "0", str(k),
            "PARAMS", "2", "B", vec.tobytes(), "DIALECT", "2"]


def _worker(port: int, part: int, queries: np.ndarray, k: int, ef: int, flt: str, out, go=None) -> None:
    r = redis.Redis(port=port, protocol=2)
    r.ping()  # connected before the clock starts
    ids, lat = [], []
    if go is not None:
        go.wait()
    for vec in queries:
        t = time.perf_counter()
        res = r.execute_command(*_query_args(vec, k, ef, flt))
        lat.append(time.perf_counter() - t)
        ids.append([int(key.split(b":")[1]) for key in res[1:]])
    out.put((part, ids, lat))


def run_queries(port: int, queries: np.ndarray, k: int, ef: int, clients: int, flt: str = "*"):
    """(result ids per query, in query order; qps; p50 ms; p99 ms) with ``clients`` processes."""
    ids, wall, ms = run_queries_raw(port, queries, k, ef, clients, flt)
    return ids, len(queries) / wall, float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def run_queries_raw(port: int, queries: np.ndarray, k: int, ef: int, clients: int, flt: str = "*"):
    """(result ids per query, in query order; wall seconds; latencies in ms) with ``clients`` processes."""
    parts = np.array_split(np.arange(len(queries)), clients)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    go = ctx.Barrier(clients + 1)  # the clock starts once every client process is connected
    procs = [ctx.Process(target=_worker, args=(port, i, queries[p], k, ef, flt, out, go)) for i, p in enumerate(parts)]
    for p in procs:
        p.start()
    go.wait()
    started = time.perf_counter()
    results = [out.get() for _ in procs]
    wall = time.perf_counter() - started
    for p in procs:
        p.join()
    ids: list = [None] * len(queries)
    lat: list[float] = []
    for part, part_ids, part_lat in results:
        for q, got in zip(parts[part].tolist(), part_ids, strict=True):
            ids[q] = got
        lat += part_lat
    return ids, wall, np.array(lat) * 1000.0


def recall(truth: np.ndarray, ids: list, k: int) -> tuple[float, float]:
    """Mean recall@k and the fraction of queries that got all k results."""
    hits = sum(len(set(got) & set(want[:k].tolist())) for got, want in zip(ids, truth, strict=True))
    full = sum(len(got) == k for got in ids)
    return hits / (k * len(ids)), full / len(ids)


def brute_force_qps(data: np.ndarray, queries: np.ndarray, k: int) -> float:
    """Exact scan, one query at a time, the faster of numpy's two matrix-vector paths."""
    count = min(len(queries), 200)
    best = 0.0
    for product in (lambda v: data @ v, lambda v: np.einsum("ij,j->i", data, v)):
        started = time.perf_counter()
        for vec in queries[:count]:
            np.argpartition(-product(vec), k)[:k]
        best = max(best, count / (time.perf_counter() - started))
    return best


def canary(port: int, n: int, dim: int) -> dict:
    """A second HNSW index created over the n stored keys (a background scan plus a graph build)
    while another client PINGs every 10 ms: how long the event loop was held at worst."""
    r = redis.Redis(port=port, protocol=2)
    stop = mp.get_context("fork").Event()
    out = mp.get_context("fork").Queue()

    def ping() -> None:
        c = redis.Redis(port=port, protocol=2)
        lat = []
        while not stop.is_set():
            t = time.perf_counter()
            c.ping()
            lat.append(time.perf_counter() - t)
            time.sleep(0.01)
        out.put(lat)

    proc = mp.get_context("fork").Process(target=ping)
    proc.start()
    time.sleep(0.5)
    started = time.perf_counter()
    r.execute_command("FT.CREATE", "vec2", "ON", "HASH", "PREFIX", "1", "v:", "SCHEMA", "emb", "VECTOR", "HNSW", "6",
                      "TYPE", "FLOAT32", "DIM", str(dim), "DISTANCE_METRIC", "COSINE")
    create_ms = (time.perf_counter() - started) * 1000
    while int(r.ft("vec2").info()["indexing"]) or int(r.info("search").get("search_hnsw_backlog", 0)):
        time.sleep(0.2)
    built = time.perf_counter() - started
    stop.set()
    lat = np.array(out.get()) * 1000
    proc.join()
    r.execute_command("FT.DROPINDEX", "vec2")
    return {"create_reply_ms": create_ms, "built_s": built, "ping_p50_ms": float(np.percentile(lat, 50)),
            "ping_p99_ms": float(np.percentile(lat, 99)), "ping_max_ms": float(lat.max()), "pings": len(lat)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", choices=("redis-stack",), help="the side-by-side run against Redis Stack")
    parser.add_argument("--clusters", type=int, default=None, help="mixture components (peer run: 50)")
    parser.add_argument("--rounds", type=int, default=8, help="peer run: alternating rounds per load")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--efs", default="10,32,64,128")
    parser.add_argument("--smoke", action="store_true", help="CI size: 1,000 x 32, 100 queries")
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    if args.peer:
        return peer_main(args)
    if args.smoke:
        args.n, args.dim, args.queries, args.efs = 1000, 32, 100, "10,64"
    k = 10
    efs = [int(e) for e in args.efs.split(",")]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"bench_vector: {args.n:,} x {args.dim} COSINE HNSW(M 16, EF_CONSTRUCTION 200), {args.queries} queries, "
          f"cores {os.cpu_count()}, load {os.getloadavg()}", flush=True)
    data, queries = make_data(args.n, args.dim, args.queries, clusters=max(10, args.n // 1000))
    truth = exact_top(data, queries, k)
    ids_all = np.arange(args.n)
    truth10 = exact_top(data, queries, k, ids_all[ids_all % 10 == 3])
    truth1 = exact_top(data, queries, k, ids_all[ids_all % 100 == 37])
    bf_qps = brute_force_qps(data, queries, k)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(Path(tmp))
        try:
            acked, built = ingest(port, data)
            print(f"ingest: {args.n:,} vectors acknowledged in {acked:.1f} s, graph complete in {built:.1f} s "
                  f"({args.n / built:,.0f} vectors/s), load {os.getloadavg()}", flush=True)
            for ef in efs:
                for clients in (1, 8):
                    ids, qps, p50, p99 = run_queries(port, queries, k, ef, clients)
                    rec, full = recall(truth, ids, k)
                    rows.append({"filter": "none", "ef": ef, "clients": clients, "recall": rec, "all_k": full,
                                 "qps": qps, "p50_ms": p50, "p99_ms": p99, "x_brute_force": qps / bf_qps,
                                 "load": os.getloadavg()[0]})
                    print(f"  ef {ef:>4} clients {clients}: recall@10 {rec:.3f}  {qps:7.0f} QPS  p50 {p50:.2f} ms  "
                          f"p99 {p99:.2f} ms  {qps / bf_qps:5.1f}x brute force", flush=True)
            stall = canary(port, args.n, args.dim)
            print(f"canary: FT.CREATE of a second HNSW index over {args.n:,} keys answered in "
                  f"{stall['create_reply_ms']:.0f} ms, built in {stall['built_s']:.1f} s; meanwhile PING p50 "
                  f"{stall['ping_p50_ms']:.2f} ms, p99 {stall['ping_p99_ms']:.2f} ms, max {stall['ping_max_ms']:.1f} ms "
                  f"({stall['pings']} pings)", flush=True)
            ef_best = max(efs)
            for label, flt, gt in (("10%", "@decile:{d3}", truth10), ("1%", "@centile:{c37}", truth1)):
                ids, qps, p50, p99 = run_queries(port, queries, k, ef_best, 8, flt)
                rec, full = recall(gt, ids, k)
                rows.append({"filter": label, "ef": ef_best, "clients": 8, "recall": rec, "all_k": full, "qps": qps,
                             "p50_ms": p50, "p99_ms": p99, "x_brute_force": qps / bf_qps, "load": os.getloadavg()[0]})
                print(f"  filter {label:>3} ef {ef_best} clients 8: recall@10 {rec:.3f}  all k returned {full:.0%}  "
                      f"{qps:7.0f} QPS  p50 {p50:.2f} ms  p99 {p99:.2f} ms", flush=True)
        except redis.ConnectionError:
            print("the server went away; its log ends:\n" + (Path(tmp) / "server.log").read_text()[-4000:])
            raise
        finally:
            proc.terminate()
            proc.wait(30)
    result = {"n": args.n, "dim": args.dim, "queries": args.queries, "ingest_acked_s": acked, "ingest_built_s": built,
              "canary": stall,
              "brute_force_qps": bf_qps, "rows": rows, "load_end": os.getloadavg(), "cores": os.cpu_count()}
    name = "vector_smoke" if args.smoke else f"vector_{args.n}x{args.dim}"
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2))
    print(f"brute force (numpy, 1 thread): {bf_qps:.0f} QPS")
    print(table(result))
    plot(result, out_dir / f"{name}.png")
    return 0


# -- the side-by-side run (--peer redis-stack) -------------------------------------------------------

#: (label, query filter, which documents it keeps: a function of the document number)
PEER_FILTERS = [
    ("none", "*", None),
    ("TAG 10%", "@decile:{d3}", lambda i: i % 10 == 3),
    ("TAG 1%", "@centile:{c37}", lambda i: i % 100 == 37),
    ("NUMERIC 10%", "@num:[30 39]", lambda i: (i % 100 >= 30) & (i % 100 <= 39)),
    ("NUMERIC 1%", "@num:[37 37]", lambda i: i % 100 == 37),
]


def peer_create_args(dim: int, ef: int) -> list:
    return ["FT.CREATE", "vec", "ON", "HASH", "PREFIX", "1", "v:", "SCHEMA", "decile", "TAG", "centile", "TAG",
            "num", "NUMERIC", "emb", "VECTOR", "HNSW", "12", "TYPE", "FLOAT32", "DIM", str(dim),
            "DISTANCE_METRIC", "COSINE", "M", "16", "EF_CONSTRUCTION", "200", "EF_RUNTIME", str(ef)]


def peer_ingest(port: int, data: np.ndarray, ef: int, batch: int = 500) -> tuple[float, float]:
    """(seconds until every HSET was acknowledged, seconds until the index and graph are complete)."""
    r = redis.Redis(port=port, protocol=2)
    r.execute_command(*peer_create_args(data.shape[1], ef))
    started = time.perf_counter()
    for lo in range(0, len(data), batch):
        pipe = r.pipeline(transaction=False)
        for i in range(lo, min(lo + batch, len(data))):
            pipe.hset(f"v:{i}", mapping={"decile": f"d{i % 10}", "centile": f"c{i % 100}", "num": i % 100,
                                        "emb": data[i].tobytes()})
        pipe.execute()
    acked = time.perf_counter() - started
    while True:
        info = r.ft("vec").info()
        backlog = int(r.info("search").get("search_hnsw_backlog", 0) or 0)
        if int(info["indexing"]) == 0 and backlog == 0 and int(info["num_docs"]) >= len(data):
            break
        time.sleep(0.05)
    built = time.perf_counter() - started
    r.close()
    return acked, built


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads (``/proc``; 0.0 where there is none). The
    server's CPU per query is the figure the box's load moves least: QPS on a shared 2-core box
    is the share of the cores a server got, its CPU is what a query cost it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peer_main(args) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.support.stack import StackServer

    why = StackServer.missing()
    if why is not None:
        print(f"--peer redis-stack: {why}")
        return 2
    if args.smoke:
        args.rounds = 2
    n, dim, nq = (2000, 32, 200) if args.smoke else (args.n if args.n != 100_000 else 20_000,
                                                     args.dim if args.dim != 384 else 128, args.queries)
    clusters = args.clusters or (10 if args.smoke else 50)
    ef, k = 64, 10
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"bench_vector --peer redis-stack: {n:,} x {dim} ({clusters} clusters) COSINE HNSW M 16 EF_CONSTRUCTION 200, "
          f"KNN {k} EF_RUNTIME {ef}, {nq} queries, cores {os.cpu_count()}, load {os.getloadavg()}", flush=True)
    data, queries = make_data(n, dim, nq, clusters=clusters)
    ids_all = np.arange(n)
    truths = {label: exact_top(data, queries, k, None if keep is None else ids_all[keep(ids_all)])
              for label, _, keep in PEER_FILTERS}
    rows: list[dict] = []
    ingest_rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pion_dir = Path(tmp) / "pion"
        pion_dir.mkdir()
        stack = StackServer(Path(tmp) / "stack")
        proc = None
        try:
            proc, pion_port = start_server(pion_dir)
            stack.start()
            ports = {"pion": pion_port, "redis-stack": stack.port}
            pids = {"pion": proc.pid, "redis-stack": stack.proc.pid if stack.proc is not None else 0}
            for name in ("pion", "redis-stack"):
                acked, built = peer_ingest(ports[name], data, ef)
                ingest_rows[name] = {"acked_s": acked, "built_s": built, "rate": n / built}
                print(f"ingest {name:>11}: {n:,} vectors acknowledged in {acked:.2f} s, index complete in {built:.2f} s "
                      f"({n / built:,.0f} vectors/s)", flush=True)
            for name in ports:  # warm both (first-query allocations, page cache)
                run_queries(ports[name], queries[:50], k, ef, 1)
            # each load runs in rounds, Pion and the peer alternating (the order flipping each round),
            # so that a burst of other work on the machine falls on both sides alike
            chunks = np.array_split(np.arange(nq), args.rounds)
            turn = 0
            for label, flt, _ in PEER_FILTERS:
                for clients in (1, 8):
                    acc = {name: {"ids": [None] * nq, "wall": 0.0, "lat": [], "cpu": 0.0} for name in ports}
                    for chunk in chunks:
                        order = ("pion", "redis-stack") if turn % 2 == 0 else ("redis-stack", "pion")
                        turn += 1
                        for name in order:
                            cpu = cpu_seconds(pids[name])
                            ids, wall, ms = run_queries_raw(ports[name], queries[chunk], k, ef, clients, flt)
                            acc[name]["cpu"] += cpu_seconds(pids[name]) - cpu
                            for q, found in zip(chunk.tolist(), ids, strict=True):
                                acc[name]["ids"][q] = found
                            acc[name]["wall"] += wall
                            acc[name]["lat"].append(ms)
                    got = {}
                    for name, a in acc.items():
                        rec, full = recall(truths[label], a["ids"], k)
                        ms = np.concatenate(a["lat"])
                        got[name] = {"recall": rec, "all_k": full, "qps": nq / a["wall"],
                                     "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                                     "cpu_us": a["cpu"] / nq * 1e6}
                    row = {"filter": label, "clients": clients, "load": os.getloadavg()[0], **{
                        f"{name}_{key}": value for name, res in got.items() for key, value in res.items()}}
                    row["ratio"] = row["pion_qps"] / row["redis-stack_qps"]
                    rows.append(row)
                    print(peer_line(row), flush=True)
        except redis.ConnectionError:
            print("a server went away; Pion's log ends:\n" + (pion_dir / "server.log").read_text()[-4000:])
            raise
        finally:
            stack.stop()
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
    for name in ("pion", "redis-stack"):
        ones = {r["filter"]: r[f"{name}_qps"] for r in rows if r["clients"] == 1}
        eights = {r["filter"]: r[f"{name}_qps"] for r in rows if r["clients"] == 8}
        print(f"{name}: 8 clients / 1 client QPS: " + ", ".join(f"{f} {eights[f] / ones[f]:.2f}x" for f in ones))
    result = {"n": n, "dim": dim, "clusters": clusters, "queries": nq, "ef_runtime": ef, "k": k,
              "ingest": ingest_rows, "rows": rows, "load_end": os.getloadavg(), "cores": os.cpu_count()}
    name = "vector_peer_smoke" if args.smoke else f"vector_peer_{n}x{dim}"
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2))
    print(peer_table(result))
    peer_plot(result, out_dir / f"{name}.png")
    return 0


def peer_line(r: dict) -> str:
    return (f"  {r['filter']:>11} clients {r['clients']}: "
            f"pion recall {r['pion_recall']:.3f} {r['pion_qps']:7.0f} QPS p50 {r['pion_p50_ms']:.2f} p99 {r['pion_p99_ms']:.2f} ms"
            f" | redis-stack recall {r['redis-stack_recall']:.3f} {r['redis-stack_qps']:7.0f} QPS "
            f"p50 {r['redis-stack_p50_ms']:.2f} p99 {r['redis-stack_p99_ms']:.2f} ms | {r['ratio']:.2f}x  load {r['load']:.1f}"
            f" | server CPU per query: pion {r['pion_cpu_us']:.0f} us, redis-stack {r['redis-stack_cpu_us']:.0f} us")


def peer_table(result: dict) -> str:
    ing = result["ingest"]
    lines = [f"ingest: Pion {ing['pion']['rate']:,.0f} vectors/s (acknowledged in {ing['pion']['acked_s']:.2f} s), "
             f"Redis Stack {ing['redis-stack']['rate']:,.0f} vectors/s "
             f"(acknowledged in {ing['redis-stack']['acked_s']:.2f} s)", "",
             "| filter | clients | Pion recall@10 | Pion QPS | Pion p50 / p99 ms | Redis Stack recall@10 | "
             "Redis Stack QPS | Redis Stack p50 / p99 ms | Pion / Stack | server CPU us/query (Pion / Stack) | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['filter']} | {r['clients']} | {r['pion_recall']:.3f} | {r['pion_qps']:,.0f} | "
                     f"{r['pion_p50_ms']:.2f} / {r['pion_p99_ms']:.2f} | {r['redis-stack_recall']:.3f} | "
                     f"{r['redis-stack_qps']:,.0f} | {r['redis-stack_p50_ms']:.2f} / {r['redis-stack_p99_ms']:.2f} | "
                     f"{r['ratio']:.2f}x | {r['pion_cpu_us']:.0f} / {r['redis-stack_cpu_us']:.0f} | {r['load']:.1f} |")
    return "\n".join(lines)


def peer_plot(result: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (the plot extra): no plot")
        return
    labels = [f"{r['filter']}\n{r['clients']} cl" for r in result["rows"]]
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(x - 0.2, [r["pion_qps"] for r in result["rows"]], 0.4, label="Pion")
    ax.bar(x + 0.2, [r["redis-stack_qps"] for r in result["rows"]], 0.4, label="Redis Stack 7.4")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("FT.SEARCH KNN 10 per second")
    ax.set_title(f"{result['n']:,} x {result['dim']} COSINE, HNSW M 16, EF_RUNTIME {result['ef_runtime']} "
                 f"(load {result['rows'][0]['load']:.1f}, {result['cores']} cores)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def table(result: dict) -> str:
    lines = ["| filter | EF_RUNTIME | clients | recall@10 | all k | QPS | p50 ms | p99 ms | x brute force | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['filter']} | {r['ef']} | {r['clients']} | {r['recall']:.3f} | {r['all_k']:.0%} | "
                     f"{r['qps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['x_brute_force']:.1f} | "
                     f"{r['load']:.1f} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (the plot extra): no plot")
        return
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for clients, marker in ((1, "o"), (8, "s")):
        pts = [r for r in result["rows"] if r["filter"] == "none" and r["clients"] == clients]
        ax.plot([r["recall"] for r in pts], [r["qps"] for r in pts], marker=marker, label=f"{clients} client(s)")
        for r in pts:
            ax.annotate(f"ef {r['ef']}", (r["recall"], r["qps"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axhline(result["brute_force_qps"], color="grey", linestyle=":", label="numpy brute force (1 thread)")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second (FT.SEARCH over RESP)")
    ax.set_title(f"Pion HNSW, {result['n']:,} x {result['dim']} COSINE")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
