"""Replication benchmarks: the primary's write throughput with 0, 1 and 2 replicas attached,
the replicas' lag under that load, and the time to full-sync a large K/V set.

    python benchmarks/bench_replication.py [--smoke] [--only throughput,fullsync]
        [--requests N] [--sync-mb MB] [--appendfsync always|everysec]

1. ``redis-benchmark -t set -c 50 -d 64`` against the primary with 0, 1, 2 replicas (every
   server on this machine, on loopback: the replicas compete with the primary for the CPUs, so
   this is a lower bound of what separate machines give). Meanwhile a sampler reads the primary's
   INFO replication every 50 ms (lag in bytes: master_repl_offset minus each replica's
   acknowledged offset) and a probe writes a fresh key on the primary every 200 ms and polls the
   replica until it sees it (lag in time: write to visible on the replica, durable there).
2. ``--sync-mb`` MB of K/V rows (``V.STOREBATCH``, 4 MiB batches) on the primary, then a replica
   starts: the time from its start to its link up (and the primary's own log line for the
   payload), the payload's size, and rows fetched back equal.

Prints one JSON line per result (with ``os.getloadavg()``), then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    fields["loadavg"] = [round(x, 1) for x in os.getloadavg()]
    RESULTS.append(fields)
    print(json.dumps(fields), flush=True)


class Proc:
    def __init__(self, datadir: Path, *extra: str) -> None:
        datadir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = datadir / "server.log"
        self.log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "pion.cli.server_main", "--port", str(self.port), "--dir", str(datadir),
               "--save", "", *extra]
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, 600, self.proc)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=600)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def link_up(r: redis.Redis, timeout: float = 600) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if r.info("replication").get("master_link_status") == "up":
            return time.perf_counter() - started
        time.sleep(0.02)
    raise RuntimeError("replica link did not come up")


def redis_benchmark(port: int, requests: int) -> float:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-c", "50", "-n", str(requests), "-r", "100000",
         "-d", "64", "--csv"], capture_output=True, text=True, timeout=3600, check=True).stdout
    for line in out.splitlines():
        cells = [cell.strip('"') for cell in line.split(",")]
        if cells and cells[0] == "SET":
            return float(cells[1])
    raise RuntimeError(f"no SET line in redis-benchmark output: {out!r}")


def primary_cpu(proc: Proc) -> float:
    """The primary's main-thread CPU seconds (INFO cpu): its own cost, whatever the replicas
    running on the same cores take."""
    info = proc.client().info("cpu")
    return float(info.get("used_cpu_user_main_thread", info["used_cpu_user"])) + \
        float(info.get("used_cpu_sys_main_thread", info["used_cpu_sys"]))


class LagWatch:
    """Samples byte lag from the primary's INFO and write-to-visible time on the first replica."""

    def __init__(self, primary: Proc, replicas: list[Proc]) -> None:
        self.primary, self.replicas = primary, replicas
        self.byte_lags: list[int] = []
        self.visible_ms: list[float] = []
        self.missed = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._bytes, daemon=True)]
        if replicas:
            self._threads.append(threading.Thread(target=self._probe, daemon=True))

    def __enter__(self) -> LagWatch:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _bytes(self) -> None:
        r = self.primary.client()
        while not self._stop.wait(0.05):
            info = r.info("replication")
            offset = info["master_repl_offset"]
            for index in range(len(self.replicas)):
                slave = info.get(f"slave{index}")
                if isinstance(slave, dict):
                    self.byte_lags.append(max(0, offset - int(slave["offset"])))

    def _probe(self) -> None:
        writer, reader = self.primary.client(), self.replicas[0].client()
        n = 0
        while not self._stop.wait(0.2):
            n += 1
            key = f"probe:{n}"
            writer.set(key, n)  # answered once durable on the primary
            started = time.perf_counter()
            while reader.get(key) is None:
                if time.perf_counter() - started > 30:
                    self.missed += 1
                    break
                time.sleep(0.0005)
            else:
                self.visible_ms.append((time.perf_counter() - started) * 1000)


def bench_throughput(work: Path, requests: int, policy: str) -> None:
    base = None
    for count in (0, 1, 2):
        run = work / f"tp-{count}"
        primary = Proc(run / "primary", "--appendfsync", policy)
        replicas = [Proc(run / f"replica{i}", "--appendfsync", policy, "--replicaof", "127.0.0.1",
                         str(primary.port)) for i in range(count)]
        try:
            for replica in replicas:
                link_up(replica.client())
            cpu_before = primary_cpu(primary)
            with LagWatch(primary, replicas) as watch:
                rps = redis_benchmark(primary.port, requests)
            cpu_seconds = primary_cpu(primary) - cpu_before
            waited = primary.client().wait(count, 60_000) if count else 0
            base = base or rps
            lags = sorted(watch.byte_lags)
            visible = sorted(watch.visible_ms)
            emit(bench="primary_throughput", replicas=count, appendfsync=policy, requests=requests,
                 set_rps=round(rps), vs_no_replica=round(rps / base, 3), acked_after=waited,
                 primary_cpu_us_per_set=round(cpu_seconds * 1e6 / requests, 1),
                 lag_bytes_p50=lags[len(lags) // 2] if lags else 0, lag_bytes_max=lags[-1] if lags else 0,
                 visible_ms_p50=round(statistics.median(visible), 2) if visible else None,
                 visible_ms_p99=round(visible[int(len(visible) * 0.99)], 2) if visible else None,
                 visible_ms_max=round(visible[-1], 2) if visible else None, probes=len(visible),
                 probes_missed=watch.missed)
            if count:
                keys = [srv.client().dbsize() for srv in (primary, *replicas)]
                assert len(set(keys)) == 1, f"replicas differ from the primary: {keys}"
        finally:
            for srv in (*replicas, primary):
                srv.stop()


def bench_fullsync(work: Path, megabytes: int) -> None:
    primary = Proc(work / "fs-primary", "--kvcache", "--appendfsync", "everysec")
    replica = None
    try:
        r = primary.client()
        dim, batch = 1024, 4 * 1024 * 1024
        rows = batch // (dim * 2)
        blob = os.urandom(rows * dim * 2)
        r.execute_command("V.CREATE", "bench", dim, "VQUANT", "fp16")
        kv_bytes, layer, start, batches = 0, 0, 0, 0
        fill_started = time.perf_counter()
        while kv_bytes < megabytes * 1024 * 1024:
            r.execute_command("V.STOREBATCH", "bench", layer, start, rows, blob, "FMT", "RAW")
            kv_bytes += len(blob)
            batches += 1
            layer = (layer + 1) % 32
            if layer == 0:
                start += rows
        fill_seconds = time.perf_counter() - fill_started
        for i in range(10_000):
            r.set(f"small:{i}", i)
        replica = Proc(work / "fs-replica", "--kvcache", "--appendfsync", "everysec", "--replicaof", "127.0.0.1",
                       str(primary.port))
        start_to_listen = time.perf_counter() - replica.started
        sync_seconds = link_up(replica.client()) + start_to_listen
        rr = replica.client()
        same = rr.execute_command("V.FETCH", "bench", 5, "RANGE", 0, rows, "FMT", "RAW") == \
            r.execute_command("V.FETCH", "bench", 5, "RANGE", 0, rows, "FMT", "RAW")
        log = primary.log_path.read_text(errors="replace")
        sent = [line for line in log.splitlines() if "full resync of replica" in line and "sent" in line]
        payload = int(sent[-1].split("sent: ")[1].split(" bytes")[0]) if sent else 0
        done = [line for line in replica.log_path.read_text(errors="replace").splitlines() if "full resync from" in line]
        received_s = float(done[-1].split(" bytes in ")[1].split(" s")[0]) if done else None
        emit(bench="full_sync", kv_bytes=kv_bytes, batches=batches, small_keys=10_000, fill_seconds=round(fill_seconds, 2),
             replica_start_to_link_up_s=round(sync_seconds, 2), process_start_s=round(start_to_listen, 2),
             payload_bytes=payload, mb_per_s=round(kv_bytes / 1e6 / max(sync_seconds - start_to_listen, 1e-9), 1),
             rows_equal=same, replica_keys=rr.dbsize(), payload_to_durable_s=received_s)
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()


def table() -> None:
    print("\n| replicas | appendfsync | SET/s | vs 0 | primary CPU µs/SET | lag bytes p50 / max | "
          "write→visible ms p50 / p99 / max |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in RESULTS:
        if row["bench"] == "primary_throughput":
            print(f"| {row['replicas']} | {row['appendfsync']} | {row['set_rps']:,} | {row['vs_no_replica']:.2f} | "
                  f"{row['primary_cpu_us_per_set']} | "
                  f"{row['lag_bytes_p50']:,} / {row['lag_bytes_max']:,} | "
                  f"{row['visible_ms_p50']} / {row['visible_ms_p99']} / {row['visible_ms_max']} |")
    for row in RESULTS:
        if row["bench"] == "full_sync":
            print(f"\nfull sync of {row['kv_bytes'] / 2**20:,.0f} MiB of K/V rows + {row['small_keys']:,} keys: "
                  f"{row['replica_start_to_link_up_s']} s from replica start to link up "
                  f"({row['process_start_s']} s of it the process start; payload header to durable on the "
                  f"replica {row['payload_to_durable_s']} s), {row['mb_per_s']} MB/s, "
                  f"payload {row['payload_bytes']:,} bytes, rows equal: {row['rows_equal']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", default="throughput,fullsync")
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--sync-mb", type=int, default=1024)
    parser.add_argument("--appendfsync", default="always")
    args = parser.parse_args()
    requests, sync_mb = (5_000, 16) if args.smoke else (args.requests, args.sync_mb)
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="pion-bench-repl-") as tmp:
        work = Path(tmp)
        if "throughput" in only:
            bench_throughput(work, requests, args.appendfsync)
        if "fullsync" in only:
            bench_fullsync(work, sync_mb)
    table()


if __name__ == "__main__":
    main()
