"""What CLUSTER SLOT-STATS's counters cost a cluster node: ``redis-benchmark`` SET/GET against one
``pion-server --cluster-enabled yes`` with ``cluster-slot-stats-enabled`` off and on, the rounds
interleaved (off, on, off, on, ...) on the same server, medians reported with the load average
(the machine is shared). ``--src`` runs the server from another tree (``/work/main/src``: the
code before the counters, to see what the off switch costs); such a tree has no setting to
switch, so only its "off" rounds are run.

    python benchmarks/bench_slot_stats.py                         # this tree, off vs on
    python benchmarks/bench_slot_stats.py --src /work/main/src    # another tree's cluster node
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from tests.support.clusters import PionProcessCluster  # noqa: E402


def redis_benchmark(port: int, requests: int, clients: int) -> dict[str, float]:
    done = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get", "-r", "100000",
                           "-n", str(requests), "-c", str(clients), "-q"], capture_output=True, text=True, timeout=600)
    out = {name: float(rps) for name, rps in re.findall(r"(SET|GET): ([\d.]+) requests per second", done.stdout)}
    if not out:
        raise RuntimeError(f"redis-benchmark gave no numbers: {done.stdout[-500:]} {done.stderr[-500:]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", default=str(ROOT / "src"), help="the tree whose pion-server runs")
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = args.src  # the server process imports pion from there
    with tempfile.TemporaryDirectory() as tmp:
        cluster = PionProcessCluster(Path(tmp), 1)
        try:
            r = redis.Redis(port=cluster.ports[0])
            switchable = "cluster-slot-stats-enabled" in r.config_get("cluster-slot-*")
            modes = ["off", "on"] if switchable else ["off"]
            runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for _ in range(args.rounds):
                for mode in modes:
                    if switchable:
                        r.config_set("cluster-slot-stats-enabled", "yes" if mode == "on" else "no")
                    runs[mode].append(redis_benchmark(cluster.ports[0], args.requests, args.clients))
        finally:
            cluster.stop()
    result = {"src": args.src, "requests": args.requests, "clients": args.clients, "rounds": args.rounds,
              "load_average": os.getloadavg(),
              **{mode: {cmd: statistics.median(run[cmd] for run in rs) for cmd in ("SET", "GET")}
                 for mode, rs in runs.items()}}
    if "on" in result:
        result["on_over_off"] = {cmd: round(result["on"][cmd] / result["off"][cmd], 3) for cmd in ("SET", "GET")}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
