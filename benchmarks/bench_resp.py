"""RESP throughput: Pion vs Debian's redis-server, side by side, with redis-benchmark.

Starts both servers (Pion without persistence so both do the same work, unless --durable),
runs redis-benchmark for each test, pipeline depth and value size, and prints one JSON line per
result plus a table with the ratio Pion/Redis.

    python benchmarks/bench_resp.py              # full matrix (a few minutes)
    python benchmarks/bench_resp.py --smoke      # CI-sized
    python benchmarks/bench_resp.py --shapes     # EVAL, redis-cli --pipe, -P 16: issue 21's shapes
    python benchmarks/bench_resp.py --shapes --baseline-src /tmp/base/src   # and another tree's Pion

``--shapes`` runs each shape against Pion twice (``appendonly no``, then the default durable
config) and against redis-server in the same run, and prints wall-clock ops/s and the server's
own CPU time per operation (from /proc/PID/stat): on a shared machine the CPU time is the steadier
number, the wall-clock one depends on what else runs.
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


EVAL_ONE = ("eval", "return redis.call('set',KEYS[1],'x')", "1", "key")
EVAL_TEN = ("eval", "for i=1,10 do redis.call('incr',KEYS[1]) end return 1", "1", "counter")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, in seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, ops: int, run) -> dict[str, float]:
    """Run ``run()``; its wall-clock ops/s and the server's CPU microseconds per operation."""
    cpu, start = cpu_seconds(pid), time.perf_counter()
    run()
    wall = time.perf_counter() - start
    return {"ops_s": round(ops / wall), "cpu_us_op": round((cpu_seconds(pid) - cpu) * 1e6 / ops, 2)}


def pipe_file(path: Path, commands: int) -> Path:
    """``commands`` SETs in RESP, as ``redis-cli --pipe`` users feed a bulk load."""
    with open(path, "wb") as out:
        for i in range(commands):
            key, value = b"key:%d" % i, b"value:%d" % i
            out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value))
    return path


def shapes(port: int, pid: int, requests: int, pipe: Path, pipe_commands: int) -> dict[str, dict[str, float]]:
    """Issue 21's shapes against one server."""
    bench = ["redis-benchmark", "-p", str(port), "-r", "10000"]

    def rb(*args: str) -> None:
        subprocess.run([*bench, *args], capture_output=True, timeout=900, check=True)

    def load() -> None:
        with open(pipe, "rb") as feed:
            out = subprocess.run(["redis-cli", "-p", str(port), "--pipe"], stdin=feed, capture_output=True,
                                 timeout=900, check=True, text=True).stdout
        if f"replies: {pipe_commands}" not in out or "errors: 0" not in out:
            raise RuntimeError(f"redis-cli --pipe: {out.strip()}")

    subprocess.run(["redis-cli", "-p", str(port), "set", "counter", "0"], capture_output=True, check=True)
    evals = max(requests // 5, 1000)
    return {
        "eval_1_call": measured(pid, evals, lambda: rb("-n", str(evals), "-c", "10", *EVAL_ONE)),
        "eval_10_calls": measured(pid, evals // 4, lambda: rb("-n", str(evals // 4), "-c", "10", *EVAL_TEN)),
        "set_P16": measured(pid, requests, lambda: rb("-n", str(requests), "-c", "50", "-P", "16", "-t", "set")),
        "get_P16": measured(pid, requests, lambda: rb("-n", str(requests), "-c", "50", "-P", "16", "-t", "get")),
        "set_P1": measured(pid, evals, lambda: rb("-n", str(evals), "-c", "10", "-t", "set")),
        "pipe": measured(pid, pipe_commands, load),
    }


def _pion(work: Path, name: str, flags: list[str], src: str | None) -> ProcessServer:
    """A Pion server; ``src``: from another source tree (its ``src`` folder first on the path)."""
    saved = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        return ProcessServer(work / name, *flags, "--loglevel", "warning").start()
    finally:
        if src is not None:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def run_shapes(args: argparse.Namespace, work: Path) -> int:
    """Each shape against Pion (and, with ``--baseline-src``, a second Pion from another tree:
    before/after in one run) and redis-server, for both Pion configs."""
    pipe = pipe_file(work / "pipe.resp", args.pipe_commands)
    redis = RedisServer(work / "redis").start()
    pions = [("pion", None)] + ([("baseline", args.baseline_src)] if args.baseline_src else [])
    rows = []
    try:
        for config, flags in (("appendonly no", ["--appendonly", "no"]), ("durable default", [])):
            results: dict[str, dict[str, dict[str, float]]] = {}
            load_before = os.getloadavg()
            for label, src in pions:
                pion = _pion(work, f"{label}-{config.replace(' ', '-')}", flags, src)
                try:
                    results[label] = shapes(pion.port, pion.proc.pid, args.requests, pipe, args.pipe_commands)  # type: ignore[union-attr]
                finally:
                    pion.stop()
            redis.stop()
            redis = RedisServer(work / "redis").start()  # a fresh baseline right after, same keys
            theirs = shapes(redis.port, redis.proc.pid, args.requests, pipe, args.pipe_commands)  # type: ignore[union-attr]
            for label, _src in pions:
                for shape, mine in results[label].items():
                    ref = theirs[shape]
                    row = {"shape": shape, "pion": config + (" (baseline)" if label == "baseline" else ""),
                           **{f"pion_{k}": v for k, v in mine.items()},
                           **{f"redis_{k}": v for k, v in ref.items()},
                           "ratio_ops": round(mine["ops_s"] / ref["ops_s"], 3),
                           "ratio_cpu": round(ref["cpu_us_op"] / mine["cpu_us_op"], 3) if mine["cpu_us_op"] else None,
                           "load": [round(x, 2) for x in load_before]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        redis.stop()
    print(f"\n{time.strftime('%Y-%m-%d')} {platform.machine()} {os.cpu_count()} cores; load before "
          f"{rows[0]['load'] if rows else '?'}, {os.getloadavg()[0]:.2f} after; --pipe of {args.pipe_commands} SETs; "
          "cpu ratio = Redis's CPU time per op / Pion's (steadier than the wall-clock ratio on a shared machine)")
    print(f"{'shape':<14}{'pion config':<28}{'pion ops/s':>12}{'redis ops/s':>12}{'ratio':>7}"
          f"{'pion cpu us':>12}{'redis cpu us':>13}{'cpu ratio':>10}")
    for row in rows:
        print(f"{row['shape']:<14}{row['pion']:<28}{row['pion_ops_s']:>12,}{row['redis_ops_s']:>12,}"
              f"{row['ratio_ops']:>7.2f}{row['pion_cpu_us_op']:>12.2f}{row['redis_cpu_us_op']:>13.2f}"
              f"{row['ratio_cpu'] or 0:>10.2f}")
    for row in rows:
        if row["shape"] == "pipe":
            print(f"--pipe {row['pion']}: Pion {args.pipe_commands / row['pion_ops_s']:.2f} s, Redis "
                  f"{args.pipe_commands / row['redis_ops_s']:.2f} s ({row['redis_ops_s'] / row['pion_ops_s']:.1f}x Redis's time)")
    by = {(row["shape"], row["pion"]): row for row in rows}
    for config in dict.fromkeys(row["pion"] for row in rows):
        one, ten = by.get(("eval_1_call", config)), by.get(("eval_10_calls", config))
        if one and ten:  # 9 more calls (INCR instead of SET, about the same work)
            print(f"redis.call {config}: ~{(ten['pion_cpu_us_op'] - one['pion_cpu_us_op']) / 9:.1f} us CPU per call "
                  f"(Redis ~{(ten['redis_cpu_us_op'] - one['redis_cpu_us_op']) / 9:.1f} us)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    parser.add_argument("--tests", default=TESTS)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--sizes", default="3,1024,65536")
    parser.add_argument("--pipelines", default="1,16")
    parser.add_argument("--durable", action="store_true", help="Pion with its default durable log (appendfsync always)")
    parser.add_argument("--shapes", action="store_true", help="EVAL, redis-cli --pipe and -P 16, both Pion configs")
    parser.add_argument("--pipe-commands", type=int, default=200_000)
    parser.add_argument("--baseline-src", metavar="DIR",
                        help="with --shapes: also run a Pion from this source folder (its 'src', e.g. of "
                             "'git worktree add /tmp/base main'), same run: before/after")
    args = parser.parse_args()
    if not shutil.which("redis-benchmark") or not shutil.which("redis-server"):
        print("needs redis-server and redis-benchmark (apt-get install redis-server redis-tools)", file=sys.stderr)
        return 2
    if args.smoke:
        args.requests, args.sizes, args.tests = 2000, "3", "set,get"
    work = Path(tempfile.mkdtemp(prefix="bench-resp-"))
    if args.shapes:
        if args.smoke:
            args.requests, args.pipe_commands = 2000, 2000
        try:
            return run_shapes(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
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
