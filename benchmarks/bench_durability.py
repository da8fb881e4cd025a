"""Durability benchmarks: durable writes/s against Redis, restart time against cached bytes, and
the longest loop pause during BGSAVE.

    python benchmarks/bench_durability.py [--smoke] [--only writes,restart,bgsave]

1. ``redis-benchmark -t set -c 50`` against Pion and against ``redis-server --appendonly yes``,
   for each ``appendfsync`` policy (always, everysec, no), in the same run; ratio Pion/Redis.
2. Restart time (process start to accepting connections, and the recovery time Pion reports)
   after caching N bytes: as K/V rows (``V.STOREBATCH``, zero-copy: arenas are mapped) and as
   plain large strings (``SET``, copied into the heap on replay).
3. A probe client PINGs in a loop while BGSAVE snapshots K keys; the longest PING round trip is
   the longest loop pause a client saw; Pion's own measurement (INFO) is printed beside it.

Prints one JSON line per result, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.servers import free_port, wait_for_port  # noqa: E402

RESULTS: list[dict] = []


def emit(**fields: object) -> None:
    RESULTS.append(fields)
    print(json.dumps(fields), flush=True)


class Proc:
    def __init__(self, cmd: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.log = open(log, "ab")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_for_port(port, 600, self.proc)
        self.ready_seconds = time.perf_counter() - self.started

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            self.proc.wait(60)
        self.log.close()


def pion(datadir: Path, *extra: str, src: str | None = None) -> Proc:
    """A Pion server process; ``src``: another tree's ``src`` to run (its PYTHONPATH)."""
    port = free_port()
    datadir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pion.cli.server_main", "--port", str(port), "--dir", str(datadir),
           "--save", "", *extra]
    env = dict(os.environ, PYTHONPATH=src) if src else None
    return Proc(cmd, port, datadir / "server.log", env)


def redis_server(datadir: Path, *extra: str) -> Proc:
    port = free_port()
    datadir.mkdir(parents=True, exist_ok=True)
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(datadir), "--save", "",
           "--daemonize", "no", *extra]
    return Proc(cmd, port, datadir / "redis.log")


def redis_benchmark(port: int, requests: int, clients: int = 50) -> float:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-c", str(clients), "-n", str(requests),
         "-r", "100000", "-d", "64", "--csv"],
        capture_output=True, text=True, timeout=1800, check=True,
    ).stdout
    for line in out.splitlines():
        cells = [cell.strip('"') for cell in line.split(",")]
        if cells and cells[0] == "SET":
            return float(cells[1])
    raise RuntimeError(f"no SET line in redis-benchmark output: {out!r}")


def bench_writes(work: Path, requests: int) -> None:
    for policy in ("always", "everysec", "no"):
        p = pion(work / f"pion-{policy}", "--appendfsync", policy)
        try:
            pion_rps = redis_benchmark(p.port, requests)
        finally:
            p.stop()
        r = redis_server(work / f"redis-{policy}", "--appendonly", "yes", "--appendfsync", policy)
        try:
            redis_rps = redis_benchmark(r.port, requests)
        finally:
            r.stop()
        emit(bench="durable_writes", policy=policy, clients=50, requests=requests, pion_rps=round(pion_rps),
             redis_rps=round(redis_rps), ratio=round(pion_rps / redis_rps, 3))


def fill_kv_rows(client: redis.Redis, total: int, chunk: int) -> None:
    dim = 1024  # fp16 rows of 2 KiB
    rows = chunk // (dim * 2)
    blob = os.urandom(rows * dim * 2)
    client.execute_command("V.CREATE", "bench", dim, "VQUANT", "fp16")
    done, layer, start = 0, 0, 0
    while done < total:
        client.execute_command("V.STOREBATCH", "bench", layer, start, rows, blob, "FMT", "RAW")
        done += len(blob)
        layer = (layer + 1) % 32
        if layer == 0:
            start += rows


def fill_strings(client: redis.Redis, total: int, chunk: int) -> None:
    blob = os.urandom(chunk)
    for i in range(total // chunk):
        client.set(f"big:{i}", blob)


def bench_restart(work: Path, sizes: list[int], chunk: int) -> None:
    for kind, fill, extra in (("kv_rows", fill_kv_rows, ["--kvcache"]), ("strings", fill_strings, [])):
        for size in sizes:
            datadir = work / f"restart-{kind}-{size}"
            p = pion(datadir, "--appendfsync", "everysec", *extra)
            try:
                fill(redis.Redis(port=p.port, socket_timeout=600), size, chunk)
            finally:
                p.stop(kill=True)
            subprocess.run(["sync"], check=False)
            p = pion(datadir, *extra)
            try:
                info = redis.Redis(port=p.port, socket_timeout=600).info("persistence")
                emit(bench="restart", kind=kind, cached_bytes=size, restart_seconds=round(p.ready_seconds, 3),
                     recovery_seconds=float(info["pion_recovery_seconds"]), records=info["pion_recovery_records"])
            finally:
                p.stop()
            shutil.rmtree(datadir, ignore_errors=True)


def bench_bgsave(work: Path, keys: int) -> None:
    p = pion(work / "bgsave", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0")
    try:
        client = redis.Redis(port=p.port, socket_timeout=600)
        pipe = client.pipeline(transaction=False)
        for i in range(keys):
            pipe.set(f"key:{i}", "v" * 32)
            if i % 10000 == 9999:
                pipe.execute()
        pipe.execute()
        for load in (False, True):
            baseline, _, _ = probe_during(client, p.port, keys, load, save=False)
            worst, seconds, writes = probe_during(client, p.port, keys, load)
            info = client.info("persistence")
            emit(bench="bgsave_pause", keys=keys, concurrent_writes=load, probe_max_ping_ms=round(worst * 1000, 2),
                 probe_max_ping_without_bgsave_ms=round(baseline * 1000, 2),
                 pion_max_pause_ms=float(info["pion_bgsave_last_max_pause_ms"]),
                 pion_max_pause_cpu_ms=float(info["pion_bgsave_last_max_pause_cpu_ms"]), bgsave_seconds=round(seconds, 2),
                 writes_during=writes, snapshot_bytes=info["pion_snapshot_bytes"])
    finally:
        p.stop()


def probe_during(client: redis.Redis, port: int, keys: int, load: bool, save: bool = True) -> tuple[float, float, int]:
    """The longest PING round trip while one BGSAVE runs (with 20 clients SETting meanwhile if
    ``load``); also the BGSAVE's duration and how many commands were served during it. Without
    ``save``: the same probe for 2.5 s with no BGSAVE (the baseline of this machine)."""
    probe = redis.Redis(port=port, socket_timeout=60)
    worst = 0.0
    stop = threading.Event()

    def loop() -> None:
        nonlocal worst
        while not stop.is_set():
            start = time.perf_counter()
            probe.ping()
            worst = max(worst, time.perf_counter() - start)

    writer = None
    if load:
        writer = subprocess.Popen(
            ["redis-benchmark", "-p", str(port), "-t", "set", "-c", "20", "-n", "100000000",
             "-r", str(keys), "-d", "32", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    before = client.info("stats")["total_commands_processed"]
    started = time.perf_counter()
    thread = threading.Thread(target=loop)
    if save:
        client.bgsave()
        thread.start()
        while client.info("persistence")["rdb_bgsave_in_progress"]:
            time.sleep(0.05)
    else:
        thread.start()
        time.sleep(2.5)
    seconds = time.perf_counter() - started
    stop.set()
    thread.join()
    writes = client.info("stats")["total_commands_processed"] - before
    if writer is not None:
        writer.kill()
        writer.wait()
    return worst, seconds, writes


def table() -> None:
    print()
    print(f"{'benchmark':<16} {'case':<22} {'pion':>14} {'reference':>14} {'ratio':>7}")
    for row in RESULTS:
        if row["bench"] == "durable_writes":
            print(f"{'writes/s (c=50)':<16} {'appendfsync ' + row['policy']:<22} {row['pion_rps']:>14} "
                  f"{row['redis_rps']:>14} {row['ratio']:>7}")
        elif row["bench"] == "restart":
            case = f"{row['kind']} {row['cached_bytes'] / 2**20:.0f} MiB"
            print(f"{'restart s':<16} {case:<22} {row['restart_seconds']:>14} {row['recovery_seconds']:>14} {'':>7}")
        elif row["bench"] == "bgsave_pause":
            case = f"{row['keys']} keys" + (" +writes" if row["concurrent_writes"] else "")
            print(f"{'bgsave pause ms':<16} {case:<22} {row['probe_max_ping_ms']:>7}/{row['probe_max_ping_without_bgsave_ms']:<6} "
                  f"{row['pion_max_pause_ms']:>7}/{row['pion_max_pause_cpu_ms']:<6} {'':>7}")
    print("(restart: seconds to accept connections | recovery seconds Pion reports; "
          "bgsave: longest PING round trip during/without BGSAVE | Pion's own longest slice, wall/CPU ms)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes: a quick check that it all runs")
    parser.add_argument("--only", default="writes,restart,bgsave")
    parser.add_argument("--requests", type=int, default=0)
    parser.add_argument("--sizes-gb", default="1,2,4")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="pion-bench-"))
    only = set(args.only.split(","))
    requests = args.requests or (2000 if args.smoke else 100_000)
    sizes = [16 << 20, 32 << 20] if args.smoke else [int(float(g) * 2**30) for g in args.sizes_gb.split(",")]
    chunk = 1 << 20 if args.smoke else 8 << 20
    keys = 20_000 if args.smoke else args.keys
    try:
        if "writes" in only:
            bench_writes(work, requests)
        if "restart" in only:
            bench_restart(work, sizes, chunk)
        if "bgsave" in only:
            bench_bgsave(work, keys)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
