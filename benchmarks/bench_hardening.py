"""Hardening measurements (issue #13): what the fault and abuse tests broke, measured again.

    python benchmarks/bench_hardening.py [--only torn,frames,fetch,disk,memory,auth] [--baseline-src DIR]

- torn: restart time after a crash tore a 60 MB log record (the tail scan that tells a torn
  tail from corruption); with ``--baseline-src /work/main/src`` the same on that tree (and disk, auth).
- frames: the longest PING round trip of another client while one sends ``*1 PING`` followed by
  ``*2147483647`` in one packet, the server's address-space growth, and the parse time of a
  frame of 1,048,576 one-byte arguments.
- fetch: the sparse-session V.FETCH (two 32-byte rows at 2^24-1, BATCH 0 2^24 2): reply, time,
  server RSS growth.
- disk: maxmemory 100mb, allkeys-lru, 2 MiB values overwritten for N seconds: peak data dir.
- memory: resident memory at maxmemory 100mb after 1.5M SETs of 100 bytes (redis-benchmark),
  against redis-server with the same settings in the same run.
- auth: wrong-password guesses answered per second from 50 connections of one address.

Prints one JSON line per result and the load average with each.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.servers import free_port, wait_for_port  # noqa: E402

SRC = str(ROOT / "src")


def emit(**fields: object) -> None:
    fields["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(fields), flush=True)


class Server:
    def __init__(self, datadir: Path, *extra: str, src: str = SRC, cmd: list[str] | None = None) -> None:
        datadir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=src)
        cmd = cmd or [sys.executable, "-m", "pion.cli.server_main", "--dir", str(datadir), "--save", "", *extra]
        cmd = [*cmd, "--port", str(self.port)]
        self.log = open(datadir / "server.log", "ab")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_for_port(self.port, 900, self.proc)
        self.ready = time.perf_counter() - self.started
        self.client = redis.Redis(port=self.port, socket_timeout=300)

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as handle:
            return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))

    def vm(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as handle:
            return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmSize:"))

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            self.proc.wait(120)
        self.log.close()


def bench_torn(work: Path, src: str, label: str) -> None:
    data = work / f"torn-{label}"
    srv = Server(data, "--blob-threshold", "1gb", src=src)
    srv.client.set("a", "1")
    srv.client.set("big", os.urandom(60_000_000))
    srv.stop(kill=True)
    segment = sorted((data / "wal").iterdir())[-1]
    os.truncate(segment, segment.stat().st_size - 1000)  # the crash tore the big record
    srv = Server(data, src=src)
    info = srv.client.info("persistence")
    emit(bench="torn_60mb_record", tree=label, ready_seconds=round(srv.ready, 2),
         recovery_seconds=float(info.get("pion_recovery_seconds", -1)), a=srv.client.get("a") == b"1")
    srv.stop()


def ping_probe(port: int, stop: threading.Event, worst: list[float]) -> None:
    conn = redis.Redis(port=port, socket_timeout=60)
    while not stop.is_set():
        start = time.perf_counter()
        conn.ping()
        worst[0] = max(worst[0], time.perf_counter() - start)
        time.sleep(0.005)


def bench_frames(work: Path) -> None:
    srv = Server(work / "frames")
    stop, worst = threading.Event(), [0.0]
    probe = threading.Thread(target=ping_probe, args=(srv.port, stop, worst), daemon=True)
    probe.start()
    time.sleep(0.5)
    before = srv.vm()
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(b"*1\r\n$4\r\nPING\r\n*2147483647\r\n")
        sock.settimeout(30)
        reply = b""
        while not reply.endswith(b"multibulk length\r\n"):
            chunk = sock.recv(1000)
            if not chunk:
                break
            reply += chunk
        sock.close()
    time.sleep(0.5)
    stop.set()
    probe.join()
    emit(bench="huge_count_after_a_frame", reply=reply.decode(errors="replace"), vm_growth_mb=round((srv.vm() - before) / 1e6, 1),
         worst_ping_ms=round(worst[0] * 1000, 1))
    count = 1024 * 1024
    frame = b"*%d\r\n$5\r\nRPUSH\r\n$1\r\nL\r\n" % count + b"$1\r\nx\r\n" * (count - 2)
    sock = socket.create_connection(("127.0.0.1", srv.port))
    start = time.perf_counter()
    sock.sendall(frame)
    sock.settimeout(300)
    got = sock.recv(100)
    emit(bench="frame_of_1048576_args", seconds=round(time.perf_counter() - start, 2), reply=got.decode().strip())
    sock.close()
    srv.stop()


def bench_fetch(work: Path) -> None:
    srv = Server(work / "fetch")
    r = srv.client
    r.execute_command("V.CREATE", "sparse", 8, "VQUANT", "fp32")
    for layer in (0, 1):
        r.execute_command("V.STOREBATCH", "sparse", layer, (1 << 24) - 1, 1, np.ones(8, np.float32).tobytes())
    before, start = srv.rss(), time.perf_counter()
    try:
        reply = r.execute_command("V.FETCH", "sparse", "BATCH", 0, 1 << 24, 2)
        answer = f"{sum(len(p) for p in reply)} bytes"
    except redis.ResponseError as exc:
        answer = str(exc)
    emit(bench="sparse_fetch", answer=answer, seconds=round(time.perf_counter() - start, 3),
         rss_growth_mb=round((srv.rss() - before) / 1e6, 1))
    srv.stop()


def disk_bytes(path: Path) -> int:
    return sum(os.stat(os.path.join(root, name)).st_blocks * 512 for root, _, files in os.walk(path) for name in files)


def bench_disk(work: Path, seconds: float, src: str = SRC, label: str = "this") -> None:
    data = work / f"disk-{label}"
    srv = Server(data, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru", "--appendfsync", "everysec",
                 src=src)
    r, value = srv.client, os.urandom(2 * 1024 * 1024)
    peak, written, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        r.set(f"k{written % 500}", value)
        written += 1
        if written % 20 == 0:
            peak = max(peak, disk_bytes(data))
    info = r.info("persistence")
    emit(bench="disk_under_overwrites", tree=label, seconds=seconds, written_mb=written * 2, peak_data_dir_mb=round(peak / 1e6),
         rewrites=info["aof_rewrites"], snapshot_mb=round(info["pion_snapshot_bytes"] / 1e6))
    srv.stop()


def bench_memory(work: Path) -> None:
    for name in ("pion", "redis"):
        if name == "pion":
            srv = Server(work / "mem-pion", "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru",
                         "--appendfsync", "everysec")
        else:
            port_dir = work / "mem-redis"
            srv = Server(port_dir, cmd=["redis-server", "--bind", "127.0.0.1", "--save", "", "--maxmemory", "100mb",
                                        "--maxmemory-policy", "allkeys-lru", "--dir", str(port_dir)])
        start = srv.rss()
        subprocess.run(["redis-benchmark", "-p", str(srv.port), "-t", "set", "-n", "1500000", "-r", "100000000",
                        "-d", "100", "-c", "20", "-P", "16", "-q"], capture_output=True, timeout=3600, check=True)
        info = srv.client.info()
        emit(bench="rss_at_maxmemory_100mb", server=name, start_rss_mb=round(start / 1e6), rss_mb=round(srv.rss() / 1e6),
             used_memory_mb=round(info["used_memory"] / 1e6), keys=srv.client.dbsize(), evicted=info["evicted_keys"])
        srv.stop()


def bench_auth(work: Path, seconds: float, src: str = SRC, label: str = "this") -> None:
    srv = Server(work / f"auth-{label}", "--requirepass", "secret", src=src)
    answered, refused, stop = [0], [0], threading.Event()

    def guess() -> None:
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.settimeout(60)
        while not stop.is_set():
            sock.sendall(b"AUTH wrong\r\n")
            try:
                reply = sock.recv(200)
            except OSError:
                return
            if reply.startswith(b"-WRONGPASS"):
                answered[0] += 1  # a guess checked and answered
            elif reply.startswith(b"-"):
                refused[0] += 1  # refused unchecked (the address's queue is full)
        sock.close()

    threads = [threading.Thread(target=guess, daemon=True) for _ in range(50)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    emit(bench="auth_guesses_per_second", tree=label, connections=50, seconds=seconds, answered=answered[0],
         per_second=round(answered[0] / seconds, 2), refused_unchecked=refused[0])
    srv.stop(kill=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="torn,frames,fetch,disk,memory,auth")
    parser.add_argument("--baseline-src", default="", help="another tree's src/ (main) for the torn record, disk use and auth")
    parser.add_argument("--disk-seconds", type=float, default=36.0)
    parser.add_argument("--auth-seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="pion-hardening-"))
    if "torn" in only:
        bench_torn(work, SRC, "this")
        if args.baseline_src:
            bench_torn(work, args.baseline_src, "baseline")
    if "frames" in only:
        bench_frames(work)
    if "fetch" in only:
        bench_fetch(work)
    if "disk" in only:
        bench_disk(work, args.disk_seconds)
        if args.baseline_src:
            bench_disk(work, args.disk_seconds, args.baseline_src, "baseline")
    if "memory" in only:
        bench_memory(work)
    if "auth" in only:
        bench_auth(work, args.auth_seconds)
        if args.baseline_src:
            bench_auth(work, args.auth_seconds, args.baseline_src, "baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
