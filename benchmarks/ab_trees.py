"""Before/after ratios of the server benchmarks, two source trees interleaved in one run.

Why: on a shared machine the load drifts by 2x within minutes, so a number measured an hour ago
says nothing about a change. This runs each benchmark against the server of tree A (``--before``,
e.g. ``git worktree add /tmp/kv-before <commit>``, then ``/tmp/kv-before/src``) and of tree B
(``--after``, default this checkout's ``src``) in the order A B A B ..., each time in a fresh
process (the benchmarks start their servers as subprocesses, so ``PYTHONPATH`` picks the
server's code; the benchmark scripts themselves are this checkout's), and prints, per measured
cell, the median of each side and after/before (> 1: the after tree is faster, for times < 1).

    python benchmarks/ab_trees.py --before /tmp/kv-before/src --rounds 2
    python benchmarks/ab_trees.py --before /tmp/kv-before/src --only vstore
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def json_cells(out: str, name, value: str) -> dict[str, float]:
    """``name(row) -> value row[value]`` for each JSON result line a benchmark printed."""
    return {name(r): r[value] for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


def vstore(out: str, _tmp: Path) -> dict[str, float]:
    """GB/s per cell (higher is better)."""
    return json_cells(out, lambda r: f"vstore {r['server']} {r['shape']} {r['codec']} {r['op']} {r['fmt']} GB/s", "gbps")


def resp(out: str, _tmp: Path) -> dict[str, float]:
    """ops/s per cell (higher is better)."""
    return json_cells(out, lambda r: f"resp {r['test']} -P {r['pipeline']} {r['size']} B ops/s", "pion_ops")


def ttft(_out: str, tmp: Path) -> dict[str, float]:
    """1000/ms per cell (higher is better: a rate, so every ratio reads the same way)."""
    data = json.loads(next(tmp.glob("ttft_*.json")).read_text())
    cells = {}
    for row in data["rows"]:
        for key, value in row.items():
            if isinstance(value, dict) and "ms" in value and key.startswith(("same/", "cross/")):
                cells[f"ttft N={row['n']} {key} hits/s"] = 1000.0 / value["ms"]
    return cells


BENCHES = {
    "vstore": (["benchmarks/bench_vstore.py", "--shapes", "30x192", "--codecs", "fp32,fp16", "--repeat", "3",
                "--durable"], vstore),
    "resp": (["benchmarks/bench_resp.py", "--requests", "20000", "--clients", "20", "--sizes", "3,65536",
              "--tests", "set,get"], resp),
    "ttft": (["benchmarks/bench_ttft.py", "--smoke", "--runs", "5", "--first-hit-runs", "0"], ttft),
}


def run_once(name: str, src: str) -> dict[str, float]:
    args, parse = BENCHES[name]
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--out-dir", tmp] if name == "ttft" else []
        env = dict(os.environ, PYTHONPATH=src)
        done = subprocess.run(["nice", sys.executable, *args, *extra], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(f"{name} with {src} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return parse(done.stdout, Path(tmp))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the src directory of the tree before the change")
    parser.add_argument("--after", default=str(ROOT / "src"))
    parser.add_argument("--rounds", type=int, default=2, help="A B pairs per benchmark")
    parser.add_argument("--only", default=",".join(BENCHES))
    args = parser.parse_args()
    for name in args.only.split(","):
        seen: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        loads = []
        for round_no in range(args.rounds):
            for side, src in (("before", args.before), ("after", args.after)):
                loads.append(os.getloadavg()[0])
                for cell, value in run_once(name, src).items():
                    seen[side].setdefault(cell, []).append(value)
                print(f"# {name} round {round_no + 1} {side} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr,
                      flush=True)
        ratios = []
        print(f"\n{name}: {args.rounds} rounds A/B interleaved, load average {min(loads):.1f}-{max(loads):.1f}")
        print("| cell | before (median) | after (median) | after/before |\n|---|---|---|---|")
        for cell in sorted(seen["after"]):
            if cell not in seen["before"]:
                print(f"| {cell} | - | {statistics.median(seen['after'][cell]):.3g} | - |")
                continue
            before, after = statistics.median(seen["before"][cell]), statistics.median(seen["after"][cell])
            ratio = after / before if before else float("nan")
            ratios.append(ratio)
            print(f"| {cell} | {before:.3g} | {after:.3g} | {ratio:.2f} |")
        if ratios:
            print(f"median after/before over {len(ratios)} cells: {statistics.median(ratios):.2f} "
                  f"(range {min(ratios):.2f}-{max(ratios):.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
