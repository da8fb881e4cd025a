"""Precision and recall of AI.SEMANTIC_CACHE hits on the in-repo paraphrase set (the threshold rule
alone, ``VERIFY off``; ``bench_semcache.py`` measures the verification stage on harder sets).

``benchmarks/data/paraphrases.json`` has 60 pairs that should hit (the second prompt asks the
first's question in other words) and 60 near-misses that must not (same wording, another
question). Every first prompt is cached (SET, its own answer) in one Pion server with the
packaged all-MiniLM-L6-v2; then every second prompt is looked up with GET through the real
command. A hit is *correct* when it is a "hit" pair and the answer is its first prompt's;
precision = correct hits / hits, recall = correct hits / "hit" pairs. GET ... THRESHOLD -1
WITHSCORE gives the nearest entry's similarity too, so one run also sweeps the threshold
(the table below the default's row, and a precision/recall plot when matplotlib is installed).

    python benchmarks/bench_semantic_cache.py             # writes benchmarks/results/semantic_cache.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.support.servers import ProcessServer  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "paraphrases.json"


def score_at(rows: list[dict], threshold: float) -> dict:
    """rows: one per looked-up prompt (kind, expected answer, nearest answer, similarity)."""
    hits = [r for r in rows if r["similarity"] >= threshold]
    correct = [r for r in hits if r["kind"] == "hit" and r["nearest"] == r["expected"]]
    wanted = sum(1 for r in rows if r["kind"] == "hit")
    return {"threshold": threshold, "hits": len(hits), "correct": len(correct),
            "false_hits": len(hits) - len(correct),
            "precision": round(len(correct) / len(hits), 4) if hits else 1.0,
            "recall": round(len(correct) / wanted, 4)}


def measure(port: int, pairs: dict) -> tuple[list[dict], dict]:
    r = redis.Redis(port=port, protocol=3, socket_timeout=600)
    firsts = list(dict.fromkeys(a for kind in ("hit", "miss") for a, _ in pairs[kind]))
    for prompt in firsts:
        r.execute_command("AI.SEMANTIC_CACHE", "SET", prompt, f"answer to: {prompt}")
    default = float(r.config_get("semantic-cache-threshold")["semantic-cache-threshold"])
    rows, default_hits = [], 0
    for kind in ("hit", "miss"):
        for first, second in pairs[kind]:
            # the threshold rule alone (VERIFY off): bench_semcache.py measures the verifier
            nearest = r.execute_command("AI.SEMANTIC_CACHE", "GET", second, "THRESHOLD", "-1", "WITHSCORE",
                                        "VERIFY", "off")
            served = r.execute_command("AI.SEMANTIC_CACHE", "GET", second, "VERIFY", "off")  # the default threshold
            response, similarity = nearest[0].decode(), float(nearest[1])
            assert (served is not None) == (similarity >= default), (second, similarity, default)
            default_hits += served is not None
            rows.append({"kind": kind, "prompt": second, "expected": f"answer to: {first}",
                         "nearest": response, "similarity": round(similarity, 4)})
    return rows, {"default_threshold": default, "default_path_hits": default_hits}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "semantic_cache.json"))
    args = parser.parse_args()
    pairs = json.loads(DATA.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        server = ProcessServer(Path(tmp), "--embed-provider", "minilm").start(timeout=120)
        try:
            start = time.perf_counter()
            rows, info = measure(server.port, pairs)
            seconds = time.perf_counter() - start
        finally:
            server.stop()
    default = score_at(rows, info["default_threshold"])
    sweep = [score_at(rows, t / 100) for t in range(60, 100, 2)]
    best = max(sweep, key=lambda s: (2 * s["precision"] * s["recall"] / ((s["precision"] + s["recall"]) or 1)))
    load = os.getloadavg()
    print(f"paraphrase set: {len(pairs['hit'])} hit pairs, {len(pairs['miss'])} near-misses; "
          f"{seconds:.1f} s; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print("| threshold | hits | correct | false hits | precision | recall |")
    print("|---|---|---|---|---|---|")
    for s in [default] + [s for s in sweep if s["threshold"] in (0.7, 0.75, 0.8, 0.9)]:
        mark = " (default)" if s is default else ""
        print(f"| {s['threshold']:.2f}{mark} | {s['hits']} | {s['correct']} | {s['false_hits']} | "
              f"{s['precision']:.3f} | {s['recall']:.3f} |")
    print(f"best F1 in the sweep: threshold {best['threshold']:.2f} (precision {best['precision']:.3f}, "
          f"recall {best['recall']:.3f})")
    worst_misses = sorted((r for r in rows if r["kind"] == "miss"), key=lambda r: -r["similarity"])[:5]
    print("closest near-misses:", "; ".join(f"{r['prompt']} ({r['similarity']:.3f})" for r in worst_misses))
    result = {"default": default, "sweep": sweep, "info": info, "rows": rows, "load": load, "seconds": seconds}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [s["threshold"] for s in sweep]
        ax.plot(xs, [s["precision"] for s in sweep], marker="o", label="precision")
        ax.plot(xs, [s["recall"] for s in sweep], marker="s", label="recall")
        ax.axvline(info["default_threshold"], color="grey", linestyle="--", label="default threshold")
        ax.set_xlabel("threshold (cosine similarity)")
        ax.set_title("AI.SEMANTIC_CACHE hits on the paraphrase set (all-MiniLM-L6-v2)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(Path(args.out).with_suffix(".png"), dpi=110)
    except ImportError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
