"""FT.SEARCH KNN on two Pion trees side by side: this one and another checkout (``--other-src``).

Why: on a shared 2-core machine QPS moves by 2x from run to run with the other load, so a change
to the query path is judged by running both versions at once, interleaved: the same data
(ingested once, then the data directory copied for each server, the graph loaded at start), the
same queries from the same redis-py client code, in rounds that alternate which server goes first.
Prints QPS and each server's CPU per query (``/proc``, all threads) per load; the ratio is this
tree over the other.

Usage: ``python benchmarks/bench_vector_ab.py --other-src /path/to/other/checkout/src
[--filters '*' '@num:[30 39]'] [--clients 1 8]`` (defaults as ``bench_vector.py --peer``:
20,000 x 128, 50 clusters, KNN 10 at EF_RUNTIME 64, 2,000 queries in 8 rounds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vector as bv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _start(src: Path, datadir: Path) -> tuple[subprocess.Popen, int]:
    port = bv.free_port()
    env = dict(os.environ, PYTHONPATH=str(src))
    log = open(datadir.parent / f"{datadir.name}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "pion.cli.server_main", "--port", str(port), "--dir", str(datadir)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            redis.Redis(port=port).ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server from {src} did not start")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other-src", required=True, help="the other tree's src/ folder")
    parser.add_argument("--filters", nargs="+", default=["*", "@decile:{d3}", "@num:[30 39]"])
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    srcs = {"this": ROOT / "src", "other": Path(args.other_src).resolve()}
    data, queries = bv.make_data(args.n, args.dim, args.queries, clusters=50)
    k, ef = 10, 64
    print(f"bench_vector_ab: {args.n:,} x {args.dim}, KNN {k} EF_RUNTIME {ef}, {args.queries} queries, "
          f"this {srcs['this']} vs other {srcs['other']}, load {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / "seed"
        seed.mkdir()
        proc, port = _start(srcs["this"], seed)
        try:
            bv.peer_ingest(port, data, ef)
        finally:
            _stop(proc)
        procs: dict[str, subprocess.Popen] = {}
        ports: dict[str, int] = {}
        try:
            for name, src in srcs.items():
                datadir = Path(tmp) / name
                shutil.copytree(seed, datadir)
                procs[name], ports[name] = _start(src, datadir)
            for port in ports.values():
                bv.run_queries(port, queries[:50], k, ef, 1)  # warm
            chunks = np.array_split(np.arange(len(queries)), args.rounds)
            turn = 0
            for flt in args.filters:
                for clients in args.clients:
                    acc = {name: [0.0, 0.0] for name in srcs}
                    for chunk in chunks:
                        order = ("this", "other") if turn % 2 == 0 else ("other", "this")
                        turn += 1
                        for name in order:
                            cpu = bv.cpu_seconds(procs[name].pid)
                            _, wall, _ = bv.run_queries_raw(ports[name], queries[chunk], k, ef, clients, flt)
                            acc[name][0] += wall
                            acc[name][1] += bv.cpu_seconds(procs[name].pid) - cpu
                    n = len(queries)
                    print(f"  {flt:>14} clients {clients}: " + "  ".join(
                        f"{name} {n / wall:6,.0f} QPS, CPU {cpu / n * 1e6:4.0f} us/query"
                        for name, (wall, cpu) in acc.items())
                        + f"  | this / other {acc['other'][0] / acc['this'][0]:.2f}x  load {os.getloadavg()[0]:.1f}",
                        flush=True)
        finally:
            for proc in procs.values():
                _stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
