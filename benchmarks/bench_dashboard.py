"""The dashboard with many prefixes: how long a page of the prefix table takes, and what it costs
the commands served meanwhile.

    python benchmarks/bench_dashboard.py [--prefixes 100000] [--rounds 5]

Starts ``pion-server --appendonly no --dashboard-port N`` as a child process, registers
``--prefixes`` namespaces (KV.PREFIX.REGISTER, pipelined), then times ``GET /api/prefixes``:
the first request after the snapshot went stale (the rows read and sorted in slices on the
loop), a second sort of the same snapshot (sorting only), a page far into the table (cached)
and the overview. Meanwhile a client sends PING after PING on its own connection; the report
compares its round trips with and without dashboard requests in flight (the loop's stalls).
Median of ``--rounds``; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from tests.support.dashboard_data import store_many  # noqa: E402
from tests.support.dashboard_http import Dash  # noqa: E402
from tests.support.servers import ProcessServer, free_port, wait_for_port  # noqa: E402


def pings(port: int, stop: threading.Event, out: list[float]) -> None:
    with redis.Redis(port=port) as r:
        while not stop.is_set():
            started = time.perf_counter()
            r.ping()
            out.append(time.perf_counter() - started)


def with_pings(port: int, work) -> tuple[float, list[float]]:
    """``work()``'s seconds and the PING round trips measured while it ran."""
    stop, seen = threading.Event(), []
    thread = threading.Thread(target=pings, args=(port, stop, seen), daemon=True)
    thread.start()
    time.sleep(0.2)
    seen.clear()
    started = time.perf_counter()
    work()
    elapsed = time.perf_counter() - started
    stop.set()
    thread.join(10)
    return elapsed, seen


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"n": len(ordered), "median_ms": round(1000 * statistics.median(ordered), 3),
            "p99_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 3),
            "max_ms": round(1000 * ordered[-1], 3)} if ordered else {"n": 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefixes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        web = free_port()
        srv = ProcessServer(Path(tmp), "--appendonly", "no", "--save", "", "--dashboard-port", str(web)).start()
        try:
            wait_for_port(web)
            with redis.Redis(port=srv.port) as r:
                started = time.perf_counter()
                store_many(r, args.prefixes, batch=2000)
                registered = time.perf_counter() - started
            dash = Dash(web)
            assert dash.get("/api/session").status == 200
            _, idle = with_pings(srv.port, lambda: time.sleep(2.0))
            cells: dict[str, list[float]] = {"first_sort": [], "second_sort": [], "far_page": [], "overview": []}
            busy: list[float] = []
            for round_ in range(args.rounds):
                # past the snapshot's freshness (1 s, or 4x what it cost): the next request reads the rows again
                time.sleep(max(1.2, 4.2 * max(cells["first_sort"] + cells["second_sort"], default=0.0)))
                sort = ("hits", "ns", "bytes", "tokens", "last_hit")[round_ % 5]
                other = "ns" if sort != "ns" else "hits"

                def one_round(sort=sort, other=other) -> None:
                    for name, path in (("first_sort", f"/api/prefixes?sort={sort}&size=50"),
                                       ("second_sort", f"/api/prefixes?sort={other}&size=50"),
                                       ("far_page", f"/api/prefixes?sort={other}&page={args.prefixes // 100}&size=50"),
                                       ("overview", "/api/overview")):
                        started = time.perf_counter()
                        reply = dash.get(path)
                        cells[name].append(time.perf_counter() - started)
                        assert reply.status == 200, reply.body
                        if name == "first_sort":
                            assert reply.body["total"] == args.prefixes

                _, seen = with_pings(srv.port, one_round)
                busy.extend(seen)
        finally:
            srv.stop()
    with open("/proc/loadavg") as handle:
        load = handle.read().split()[:3]
    print(json.dumps({
        "prefixes": args.prefixes, "rounds": args.rounds, "register_s": round(registered, 2),
        "requests_ms": {name: round(1000 * statistics.median(values), 1) for name, values in cells.items()},
        "ping_idle": summary(idle), "ping_during_dashboard": summary(busy), "loadavg": load,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
