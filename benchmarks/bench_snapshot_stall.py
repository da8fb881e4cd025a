"""How long a background snapshot stalls the loop while large documents keep being written.

    python benchmarks/bench_snapshot_stall.py [--smoke] [--docs 4000] [--rounds 2]
        [--before /tmp/snap-before/src] [--kind json|hash] [--index none|flat|hnsw]

Why: a BGSAVE serializes the keyspace on the loop in slices, and takes its consistent point in
one loop iteration; with JSON documents of 1,536 floats (~0.36 ms each to encode) a consistent
point that writes every key changed during the save at once held the loop for most of a second
(langchain-redis's ``test_large_batch`` timed out on it). This measures what a client sees.

Per server: N documents (``--kind json``: ``JSON.SET doc:i $ {"text", "embedding": [1536
floats]}``; ``hash``: ``HSET doc:i`` with the vector as one FLOAT32 blob plus 200 small fields),
optionally under an FT index on the vector (``--index``). Then one client keeps rewriting
random documents (pipelines of 10), a canary client in its own process PINGs every ~1 ms, and
after 1 s a BGSAVE runs. Reported: the canary's max and p99 round trip during the save and
during the second before it (the baseline), the save's duration, Pion's own longest slice
(INFO) and, from the server's log where the tree writes it, how many changed keys the
consistent point's iteration encoded.

``--before`` runs the same measurement against another tree's server (its ``src`` on
PYTHONPATH: e.g. ``git archive <commit> src | tar -x -C /tmp/snap-before`` plus the compiled
kernels copied in), interleaved before/after for ``--rounds`` rounds. Prints one JSON line per
run (with the load average), then a table of medians.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_durability import pion  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SRC = str(ROOT / "src")


def emit(**fields: object) -> dict:
    fields["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(fields), flush=True)
    return fields


def canary(port: int, stop: multiprocessing.synchronize.Event, out: str, period: float) -> None:
    """PING every ``period`` seconds; writes (monotonic send time, round trip) pairs to ``out``."""
    client = redis.Redis(port=port, socket_timeout=60)
    client.ping()
    stamps: list[float] = []
    while not stop.is_set():
        start = time.perf_counter()
        client.ping()
        took = time.perf_counter() - start
        stamps += (start, took)
        if took < period:
            time.sleep(period - took)
    np.save(out, np.asarray(stamps, dtype=np.float64).reshape(-1, 2))


def documents(kind: str, dim: int, variants: int) -> list[object]:
    """A few distinct document bodies, cycled over the keys (the client's cost stays small)."""
    rng = np.random.default_rng(3)
    out: list[object] = []
    for i in range(variants):
        vector = rng.standard_normal(dim).astype(np.float32)
        if kind == "json":
            out.append(json.dumps({"text": f"document body {i} " * 8, "embedding": [round(float(x), 6) for x in vector]}))
        else:
            fields = {b"embedding": vector.tobytes(), b"text": f"document body {i}".encode()}
            fields.update({f"f{j}".encode(): str(j * i).encode() for j in range(200)})
            out.append(fields)
    return out


def write(pipe: redis.client.Pipeline, kind: str, key: str, body: object) -> None:
    if kind == "json":
        pipe.execute_command("JSON.SET", key, "$", body)
    else:
        pipe.hset(key, mapping=body)  # type: ignore[arg-type]


def create_index(client: redis.Redis, kind: str, index: str, dim: int) -> None:
    if index == "none":
        return
    params = ["TYPE", "FLOAT32", "DIM", str(dim), "DISTANCE_METRIC", "COSINE"]
    if index == "hnsw":
        params += ["M", "16", "EF_CONSTRUCTION", "64"]
    if kind == "json":
        schema = ["$.embedding", "AS", "embedding", "VECTOR", index.upper(), str(len(params)), *params]
    else:
        schema = ["embedding", "VECTOR", index.upper(), str(len(params)), *params]
    client.execute_command("FT.CREATE", "idx", "ON", kind.upper(), "PREFIX", "1", "doc:", "SCHEMA", *schema)


def wait_indexed(client: redis.Redis, index: str, timeout: float = 900) -> None:
    if index == "none":
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        if int(client.ft("idx").info()["indexing"]) == 0 and int(client.info("search").get("search_hnsw_backlog", 0)) == 0:
            return
        time.sleep(0.2)
    raise TimeoutError("the index did not settle")


def window(samples: np.ndarray, start: float, end: float) -> tuple[float, float, int]:
    """Max and p99 round trip (ms) of the pings sent in [start, end], and their count; a ping
    still waiting at ``end`` counts too (its send time is before the end)."""
    inside = samples[(samples[:, 0] >= start) & (samples[:, 0] <= end)]
    if not len(inside):
        return 0.0, 0.0, 0
    rtt = inside[:, 1] * 1000
    return float(rtt.max()), float(np.percentile(rtt, 99)), len(inside)


def run_one(work: Path, label: str, src: str, args: argparse.Namespace) -> dict:
    datadir = work / f"{label}-{time.time_ns()}"
    proc = pion(datadir, "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0", src=src)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    out = str(datadir / "canary.npy")
    writer_stop = threading.Event()
    try:
        client = redis.Redis(port=proc.port, socket_timeout=600)
        create_index(client, args.kind, args.index, args.dim)
        bodies = documents(args.kind, args.dim, 32)
        pipe = client.pipeline(transaction=False)
        for i in range(args.docs):
            write(pipe, args.kind, f"doc:{i}", bodies[i % len(bodies)])
            if i % 100 == 99:
                pipe.execute()
        pipe.execute()
        wait_indexed(client, args.index)
        writes = 0

        def writer() -> None:
            nonlocal writes
            w = redis.Redis(port=proc.port, socket_timeout=600)
            rnd = random.Random(5)
            while not writer_stop.is_set():
                p = w.pipeline(transaction=False)
                for _ in range(10):
                    write(p, args.kind, f"doc:{rnd.randrange(args.docs)}", bodies[rnd.randrange(len(bodies))])
                p.execute()
                writes += 10

        probe = ctx.Process(target=canary, args=(proc.port, stop, out, 0.001))
        probe.start()
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(0.3)
        base_start = time.perf_counter()
        time.sleep(1.0)
        save_start, writes_before = time.perf_counter(), writes
        client.bgsave()
        while client.info("persistence")["rdb_bgsave_in_progress"]:
            time.sleep(0.01)
        save_end = time.perf_counter()
        writes_during = writes - writes_before
        time.sleep(0.2)
        writer_stop.set()
        thread.join()
        stop.set()
        probe.join(60)
        info = client.info("persistence")
        samples = np.load(out)
        during = window(samples, save_start, save_end)
        before = window(samples, base_start, save_start)
        log = (datadir / "server.log").read_text(errors="replace")
        found = re.findall(r"(\d+) changed keys in the consistent point's iteration \(after (\d+) slices", log)
        return emit(bench="snapshot_stall", tree=label, kind=args.kind, index=args.index, docs=args.docs, dim=args.dim,
                    canary_max_ms=round(during[0], 1), canary_p99_ms=round(during[1], 1), pings_during=during[2],
                    baseline_max_ms=round(before[0], 1), baseline_p99_ms=round(before[1], 1),
                    save_seconds=round(save_end - save_start, 2), writes_during_save=writes_during,
                    pion_max_pause_ms=float(info["pion_bgsave_last_max_pause_ms"]),
                    pion_max_pause_cpu_ms=float(info["pion_bgsave_last_max_pause_cpu_ms"]),
                    final_keys=int(found[-1][0]) if found else None, final_slices=int(found[-1][1]) if found else None,
                    save_ok=info["rdb_last_bgsave_status"] == "ok")
    finally:
        writer_stop.set()
        stop.set()
        proc.stop()
        shutil.rmtree(datadir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a small size: a quick check that it runs")
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--kind", choices=("json", "hash"), default="json")
    parser.add_argument("--index", choices=("none", "flat", "hnsw"), default="none")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", default="", help="another tree's src directory, measured interleaved")
    parser.add_argument("--after", default=SRC)
    args = parser.parse_args(argv)
    if args.smoke:
        args.docs, args.dim = 300, 64
    work = Path(tempfile.mkdtemp(prefix="pion-snapstall-"))
    trees = ([("before", args.before)] if args.before else []) + [("after", args.after)]
    rows: list[dict] = []
    try:
        for _ in range(args.rounds):
            for label, src in trees:
                rows.append(run_one(work, label, src, args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.docs} {args.kind} docs x {args.dim} floats, index {args.index}, {args.rounds} round(s); medians")
    print("| tree | canary max ms | canary p99 ms | baseline max / p99 ms | save s | Pion longest slice ms | final keys |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, _ in trees:
        mine = [r for r in rows if r["tree"] == label]

        def med(name: str, mine: list[dict] = mine) -> float:
            return round(statistics.median(r[name] for r in mine), 1)

        finals = [r["final_keys"] for r in mine if r["final_keys"] is not None]
        print(f"| {label} | {med('canary_max_ms')} | {med('canary_p99_ms')} | {med('baseline_max_ms')} / "
              f"{med('baseline_p99_ms')} | {med('save_seconds')} | {med('pion_max_pause_ms')} | "
              f"{statistics.median(finals) if finals else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
