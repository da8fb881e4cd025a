"""RESP throughput: Pion vs Debian's redis-server, side by side, with redis-benchmark.

Starts both servers (Pion without persistence so both do the same work, unless --durable),
runs redis-benchmark for each test, pipeline depth and value size, and prints one JSON line per
result plus a table with the ratio Pion/Redis.

    python benchmarks/bench_resp.py              # full matrix (a few minutes)
    python benchmarks/bench_resp.py --smoke      # CI-sized
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.servers import ProcessServer, RedisServer  # noqa: E402

TESTS = "set,get,incr,lpush,lpop,sadd,hset,zadd,lrange_100,mset"


def run_benchmark(port: int, tests: str, pipeline: int, size: int, requests: int, clients: int) -> dict[str, float]:
    cmd = ["redis-benchmark", "-p", str(port), "-t", tests, "-P", str(pipeline), "-d", str(size),
           "-n", str(requests), "-c", str(clients), "--csv", "-r", "10000"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout
    results = {}
    for row in csv.reader(io.StringIO(out)):
        if len(row) >= 2 and row[0] != "test":
            try:
                results[row[0].split(" ")[0]] = float(row[1])
            except ValueError:
                continue
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    parser.add_argument("--tests", default=TESTS)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--sizes", default="3,1024,65536")
    parser.add_argument("--pipelines", default="1,16")
    parser.add_argument("--durable", action="store_true", help="Pion with its default durable log (appendfsync always)")
    args = parser.parse_args()
    if not shutil.which("redis-benchmark") or not shutil.which("redis-server"):
        print("needs redis-server and redis-benchmark (apt-get install redis-server redis-tools)", file=sys.stderr)
        return 2
    if args.smoke:
        args.requests, args.sizes, args.tests = 2000, "3", "set,get"
    work = Path(tempfile.mkdtemp(prefix="bench-resp-"))
    pion_flags = [] if args.durable else ["--appendonly", "no"]
    pion = ProcessServer(work / "pion", *pion_flags, "--loglevel", "warning").start()
    redis = RedisServer(work / "redis").start()
    rows = []
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            for pipeline in [int(p) for p in args.pipelines.split(",")]:
                requests = args.requests if size < 10_000 else max(args.requests // 10, 1000)
                ours = run_benchmark(pion.port, args.tests, pipeline, size, requests, args.clients)
                theirs = run_benchmark(redis.port, args.tests, pipeline, size, requests, args.clients)
                for test, ops in ours.items():
                    ref = theirs.get(test, 0.0)
                    row = {"test": test, "pipeline": pipeline, "size": size, "pion_ops": ops,
                           "redis_ops": ref, "ratio": round(ops / ref, 3) if ref else None}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        pion.stop()
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{time.strftime('%Y-%m-%d')} {platform.machine()} {os.cpu_count()} cores, "
          f"{args.clients} clients, {args.requests} requests; Pion {'durable' if args.durable else 'no log'}")
    print(f"{'test':<12}{'-P':>4}{'size':>7}{'pion ops/s':>14}{'redis ops/s':>14}{'ratio':>8}")
    for row in rows:
        print(f"{row['test']:<12}{row['pipeline']:>4}{row['size']:>7}{row['pion_ops']:>14,.0f}"
              f"{row['redis_ops']:>14,.0f}{row['ratio'] or 0:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
