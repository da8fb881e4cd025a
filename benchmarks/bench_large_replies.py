"""Large replies, per element: Pion against Debian's redis-server in the same run.

Starts a ``pion-server`` (``--appendonly no``, as redis-server runs here) and a redis-server,
loads the same data into both, and times each command from one raw client (the reply parsed
by hiredis as it arrives, the same code for both servers): the wall-clock time per element of
the reply, the server's own CPU time per element (``/proc/PID/stat``: steadier on a shared
machine), and the longest wait of a canary connection PINGing every 20 ms meanwhile
(``tests.support.canary``). Redis 7.0 has no vector sets: VRANDMEMBER is compared with
SRANDMEMBER, the same family over a set of the same size. Both servers are stopped on every
exit path (normal, error, Ctrl-C).

    python benchmarks/bench_large_replies.py             # 2,000,000 picks, 1,000,000-element LRANGE
    python benchmarks/bench_large_replies.py --smoke     # CI-sized
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import redis  # noqa: E402
from tests.support.canary import command, watch  # noqa: E402
from tests.support.servers import ProcessServer, RedisServer  # noqa: E402

POOL = 3000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(r: redis.Redis, picks: int, list_len: int, zrange_len: int, vectors: bool) -> None:
    members = [f"member-{i}" for i in range(POOL)]
    pipe = r.pipeline(transaction=False)
    pipe.sadd("s", *members)
    pipe.zadd("z", {m: i for i, m in enumerate(members)})
    pipe.hset("h", mapping={m: str(i) for i, m in enumerate(members)})
    for start in range(0, list_len, 50_000):
        pipe.rpush("l", *range(start, min(start + 50_000, list_len)))
    for start in range(0, zrange_len, 50_000):
        pipe.zadd("big", {f"m{i}": i for i in range(start, min(start + 50_000, zrange_len))})
    pipe.execute()
    if vectors:
        rng = np.random.default_rng(1)
        pipe = r.pipeline(transaction=False)
        for i in range(POOL):
            pipe.execute_command("VADD", "vs", "VALUES", "4", *rng.random(4).tolist(), f"member-{i}")
        pipe.execute()


def cases(picks: int, list_len: int, zrange_len: int) -> list[tuple[str, list, list | None, int]]:
    """(name, Pion's command, Redis's command or None for the same, reply elements)."""
    n = str(-picks)
    return [
        (f"SRANDMEMBER s {n}", ["SRANDMEMBER", "s", n], None, picks),
        (f"ZRANDMEMBER z {n}", ["ZRANDMEMBER", "z", n], None, picks),
        (f"ZRANDMEMBER z {n} WITHSCORES", ["ZRANDMEMBER", "z", n, "WITHSCORES"], None, 2 * picks),
        (f"HRANDFIELD h {n} WITHVALUES", ["HRANDFIELD", "h", n, "WITHVALUES"], None, 2 * picks),
        (f"VRANDMEMBER vs {n} (Redis: SRANDMEMBER)", ["VRANDMEMBER", "vs", n], ["SRANDMEMBER", "s", n], picks),
        (f"LRANGE l 0 -1 ({list_len:,})", ["LRANGE", "l", "0", "-1"], None, list_len),
        (f"ZRANGE big 0 -1 ({zrange_len:,})", ["ZRANGE", "big", "0", "-1"], None, zrange_len),
    ]


def measure(port: int, pid: int, args: list, elements: int, repeats: int) -> dict[str, float]:
    walls, cpus, waits = [], [], []
    for _ in range(repeats):
        cpu = cpu_seconds(pid)
        box: list[float] = []

        def timed(box: list[float] = box) -> None:
            start = time.perf_counter()
            reply = command(port, *args)
            box.append(time.perf_counter() - start)
            if not isinstance(reply, list) or len(reply) != elements:
                raise RuntimeError(f"{args[0]}: unexpected reply ({type(reply).__name__})")

        _, longest, _ = watch(port, timed)
        walls.append(box[0])
        cpus.append(cpu_seconds(pid) - cpu)
        waits.append(longest)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    return {"wall_ns_el": round(wall * 1e9 / elements, 1), "cpu_ns_el": round(cpu * 1e9 / elements, 1),
            "canary_ms": round(max(waits) * 1000, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    parser.add_argument("--picks", type=int, default=2_000_000)
    parser.add_argument("--list", type=int, default=1_000_000)
    parser.add_argument("--zrange", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="also append the rows as JSON lines here")
    args = parser.parse_args()
    if args.smoke:
        args.picks, args.list, args.zrange, args.repeats = 100_000, 100_000, 50_000, 1
    if not shutil.which("redis-server"):
        print("needs redis-server (make apt)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-large-"))
    pion = ref = None
    rows = []
    load_before = os.getloadavg()
    try:
        pion = ProcessServer(work / "pion", "--appendonly", "no", "--loglevel", "warning").start(timeout=120)
        ref = RedisServer(work / "redis").start()
        for port, vectors in ((pion.port, True), (ref.port, False)):
            r = redis.Redis(port=port, socket_timeout=300)
            load(r, args.picks, args.list, args.zrange, vectors)
            r.close()
        for name, mine, theirs, elements in cases(args.picks, args.list, args.zrange):
            a = measure(pion.port, pion.proc.pid, mine, elements, args.repeats)  # type: ignore[union-attr]
            b = measure(ref.port, ref.proc.pid, theirs or mine, elements, args.repeats)  # type: ignore[union-attr]
            row = {"command": name, "elements": elements, **{f"pion_{k}": v for k, v in a.items()},
                   **{f"redis_{k}": v for k, v in b.items()},
                   "wall_ratio": round(a["wall_ns_el"] / b["wall_ns_el"], 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if pion is not None:
            pion.stop()
        if ref is not None:
            ref.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "a") as out:
            for row in rows:
                out.write(json.dumps({**row, "load": [round(x, 2) for x in load_before]}) + "\n")
    print(f"\n{time.strftime('%Y-%m-%d')} {platform.machine()} {os.cpu_count()} cores; load average before "
          f"{load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; median of {args.repeats}; wall = one client's "
          "time from send to the parsed reply, per element; cpu = the server's CPU time per element")
    print(f"{'command':<44}{'pion wall ns':>13}{'redis wall ns':>14}{'ratio':>7}{'pion cpu ns':>12}"
          f"{'redis cpu ns':>13}{'pion canary ms':>15}{'redis canary ms':>16}")
    for row in rows:
        print(f"{row['command']:<44}{row['pion_wall_ns_el']:>13}{row['redis_wall_ns_el']:>14}{row['wall_ratio']:>7}"
              f"{row['pion_cpu_ns_el']:>12}{row['redis_cpu_ns_el']:>13}{row['pion_canary_ms']:>15}"
              f"{row['redis_canary_ms']:>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
