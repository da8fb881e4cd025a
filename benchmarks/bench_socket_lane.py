"""The socket lane against the floor, in one process: where a streamed hit's time goes.

The real SmolLM2-135M-Instruct (``builtin:smollm2``), one prefix of ``--tokens`` tokens stored once
per codec in a fresh ``pion-server``; then ``--runs`` rounds, each timing back to back (a 0.2 s
pause before each path): the floor (an in-process copy of the prefix cache, then the last
token), and per codec ``PionPromptCache.forward(prefix, last)`` on the socket lane
(``local_lane=False``; ``@socket`` streamed layer by layer, ``@whole`` every row first) and the
streamed fetch alone (``@transfer``: every row received, no forward). Wall clock and the
process's CPU time (``time.process_time``: the forward, the reader thread, what the load does
not change) per path, min and median, with the ratios to the floor in the same run and the load
average. A faster check of one change than ``bench_ttft.py`` (no cold prefill per run, no
worker processes); ``bench_ttft.py``'s ``@socket`` rows stay the reference numbers.

    OMP_NUM_THREADS=1 python benchmarks/bench_socket_lane.py --runs 7
    python benchmarks/bench_socket_lane.py --codecs fp16 --lanes socket,whole --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path += [str(ROOT / "src"), str(ROOT)]  # after PYTHONPATH: another tree's pion can be measured


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2049, help="prompt length (the prefix is all but the last)")
    parser.add_argument("--codecs", default="fp16,auto")
    parser.add_argument("--lanes", default="socket", help="comma-separated: socket (streamed), whole")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)

    from tests.support.servers import ProcessServer

    from pion.client import PionPromptCache
    from pion.client import measure as M
    from pion.client.streamed import StreamedFetch

    os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="bench-sock-"))
    server = ProcessServer(Path(tempfile.mkdtemp(prefix="bench-sock-")) / "data").start()
    try:
        url = f"redis://127.0.0.1:{server.port}"
        loaded = M.load("builtin:smollm2", "hf", progress=lambda m: None)
        ids = M.filler_prompt(loaded, args.tokens)
        prefix, last = ids[:-1], ids[-1:]
        adapter = loaded.adapter
        cold = adapter.new_cache()
        adapter.forward(prefix, cold)
        caches = {}
        for codec in args.codecs.split(","):
            for lane in args.lanes.split(","):
                pc = PionPromptCache(loaded.model, url=url, vquant=codec, tokenizer=loaded.tokenizer,
                                     local_lane=False, stream=lane == "socket")
                pc.get_or_prefill(prefix)  # stored (or already there for the codec)
                pc.forward(prefix, last)  # warm
                caches[f"{codec}@{lane}"] = pc
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}

        def timed(name, fn):
            time.sleep(0.2)
            started, spent = time.perf_counter(), time.process_time()
            result = fn()
            wall.setdefault(name, []).append(1000 * (time.perf_counter() - started))
            cpu.setdefault(name, []).append(1000 * (time.process_time() - spent))
            return result

        def fetch_only(pc):
            stream = StreamedFetch(pc.client.redis, pc.namespace(prefix), len(prefix), adapter.layout, pc.schema)
            try:
                if not stream.finish():
                    raise SystemExit("the streamed fetch did not complete")
            finally:
                stream.close()

        for _ in range(args.runs):
            timed("floor", lambda: adapter.forward(last, adapter.copy_cache(cold)))
            for name, pc in caches.items():
                timed(name, lambda pc=pc: pc.forward(prefix, last))
                if name.endswith("@socket"):
                    timed(name.split("@")[0] + "@transfer", lambda pc=pc: fetch_only(pc))
        for name, pc in caches.items():
            stats = pc.stats()
            expected = args.runs + 1 if name.endswith("@socket") else 0
            if stats["streamed_hits"] != expected:
                raise SystemExit(f"{name}: {stats['streamed_hits']} streamed hits, expected {expected}")
        floor_min, floor_med = min(wall["floor"]), statistics.median(wall["floor"])
        floor_cpu = statistics.median(cpu["floor"])
        rows = {name: {"wall_min_ms": round(min(v), 1), "wall_median_ms": round(statistics.median(v), 1),
                       "cpu_median_ms": round(statistics.median(cpu[name]), 1),
                       "vs_floor_min": round(min(v) / floor_min, 3),
                       "vs_floor_median": round(statistics.median(v) / floor_med, 3),
                       "cpu_vs_floor": round(statistics.median(cpu[name]) / floor_cpu, 3),
                       "all_ms": [round(x, 1) for x in v]} for name, v in wall.items()}
        for name, row in rows.items():
            print(f"{name:16s} wall min {row['wall_min_ms']:7.1f} med {row['wall_median_ms']:7.1f} "
                  f"({row['vs_floor_min']:.2f}x / {row['vs_floor_median']:.2f}x)  "
                  f"CPU med {row['cpu_median_ms']:7.1f} ({row['cpu_vs_floor']:.2f}x)", flush=True)
        print(json.dumps({"tokens": args.tokens, "runs": args.runs, "rows": rows,
                          "loadavg": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
