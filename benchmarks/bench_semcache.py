"""The semantic cache's verification stage on hand-written hard negatives: precision, recall and
wrong answers of AI.SEMANTIC_CACHE GET at thresholds 0.70-0.95 with VERIFY off, lexical and model,
and the latency verification adds.

The sets (``benchmarks/data/semcache_hard_negatives.jsonl``, 122 cached prompts and 467 lookups,
and the held-out ``semcache_heldout.jsonl``, 33 prompts and 117 lookups, written before any tuning
and never tuned on) have one line per cached prompt: ``hits``, paraphrases that must be served its
answer, and ``misses``, questions close in wording that mean something else (reversed order,
another number, unit, time, entity, negation, comparison, direction or operator word), which must
be served nothing. Every prompt is SET (its answer names it) in one Pion server with the packaged
all-MiniLM-L6-v2; every lookup is a real GET. A served answer is *correct* only for a paraphrase
and only when it is its own prompt's; precision = correct / served, recall = correct / paraphrases,
wrong = served - correct.

Latency: (1) the verifier alone, in process, on each lookup's candidates above the default
threshold (the nearest 8, as the server takes them), with its per-text cache cleared before every
run (the worst case: in a server the cached prompts' features stay cached), the median of 5 runs
per lookup; (2) GET round trips
against the same server, VERIFY off / lexical / model interleaved per lookup (the query's vector
is in the embedder's cache after the first call, so the difference is the verification); (3) the
first GET of each query in lexical and model mode, where model mode's words are not yet cached.

    python benchmarks/bench_semcache.py      # prints the tables, writes benchmarks/results/semcache.json
                                             # and docs/semcache_verify.png (with the [plot] extra)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.support.servers import ProcessServer  # noqa: E402

from pion.semantic import cache as sc  # noqa: E402
from pion.semantic import verify  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
SETS = {"main": DATA / "semcache_hard_negatives.jsonl", "held-out": DATA / "semcache_heldout.jsonl"}
THRESHOLDS = (0.70, 0.75, 0.80, 0.85, 0.90, 0.95)
MODES = ("off", "lexical", "model")
#: the verifier's in-process timing: the median of this many runs per lookup
RUNS = 5


def load(path: Path) -> tuple[list[str], list[dict]]:
    groups = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    prompts = [g["prompt"] for g in groups]
    lookups = [{"query": q, "expect": i, "category": "paraphrase"} for i, g in enumerate(groups) for q in g["hits"]]
    lookups += [{"query": m["q"], "expect": None, "category": m["cat"]} for g in groups for m in g["misses"]]
    return prompts, lookups


def answer(i: int) -> str:
    return f"answer {i}"


def score(rows: list[dict], key: str) -> dict:
    served = [r for r in rows if r[key] is not None]
    correct = [r for r in served if r["expect"] is not None and r[key] == answer(r["expect"])]
    wanted = sum(1 for r in rows if r["expect"] is not None)
    return {"served": len(served), "correct": len(correct), "wrong": len(served) - len(correct),
            "precision": round(len(correct) / len(served), 4) if served else 1.0,
            "recall": round(len(correct) / wanted, 4) if wanted else 0.0}


def run_set(r: redis.Redis, prompts: list[str], lookups: list[dict]) -> list[dict]:
    r.execute_command("AI.SEMANTIC_CACHE", "FLUSH")
    for i, prompt in enumerate(prompts):
        r.execute_command("AI.SEMANTIC_CACHE", "SET", prompt, answer(i))
    for row in lookups:
        for t in THRESHOLDS:
            for mode in MODES:
                start = time.perf_counter()
                reply = r.execute_command("AI.SEMANTIC_CACHE", "GET", row["query"], "THRESHOLD", repr(t),
                                          "VERIFY", mode, "WITHREASON")
                if t == THRESHOLDS[0]:  # the first lookup of this query in this mode: model mode's words are new
                    row[f"first_ms_{mode}"] = (time.perf_counter() - start) * 1e3
                row[f"{mode}@{t:.2f}"] = None if reply[0] is None else reply[0].decode()
                if t == 0.85:
                    row[f"reason_{mode}"] = reply[1].decode()
    return lookups


def verifier_latency(r: redis.Redis, prompts: list[str], lookups: list[dict], threshold: float) -> list[float]:
    """Microseconds of lexical verification per lookup (candidates: the nearest 8 above the threshold)."""
    texts = prompts + [row["query"] for row in lookups]
    blobs = r.execute_command("AI.EMBED", *texts)
    vectors = np.stack([np.frombuffer(b, dtype="<f4") for b in blobs])
    cached, queries = vectors[: len(prompts)], vectors[len(prompts):]
    out = []
    for row, qv in zip(lookups, queries, strict=True):
        sims = cached @ qv
        order = [int(j) for j in np.argsort(-sims)[: sc.CANDIDATES] if sims[j] >= threshold]
        runs = []
        for _ in range(RUNS):
            verify._features_cached.cache_clear()
            start = time.perf_counter()
            for j in order:
                if verify.lexical(row["query"], prompts[j]).ok:
                    break
            runs.append((time.perf_counter() - start) * 1e6)
        out.append(float(np.median(runs)))  # a lookup's cost, not the scheduler's on a loaded machine
    return out


def round_trips(r: redis.Redis, lookups: list[dict], repeat: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(repeat):
        for row in lookups:
            for mode in MODES:
                start = time.perf_counter()
                r.execute_command("AI.SEMANTIC_CACHE", "GET", row["query"], "VERIFY", mode)
                times[mode].append((time.perf_counter() - start) * 1e3)
    return times


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colours = {"off": "tab:red", "lexical": "tab:blue", "model": "tab:green"}
    for ax, name in zip(axes, results["sets"], strict=True):
        table = results["sets"][name]["table"]
        for mode in MODES:
            xs = [row["threshold"] for row in table[mode]]
            ax.plot(xs, [row["precision"] for row in table[mode]], marker="o", color=colours[mode],
                    label=f"precision, VERIFY {mode}")
            ax.plot(xs, [row["recall"] for row in table[mode]], marker="s", linestyle="--", color=colours[mode],
                    label=f"recall, VERIFY {mode}")
        ax.axvline(results["default_threshold"], color="grey", linestyle=":")
        ax.set_title(f"{name} set ({results['sets'][name]['prompts']} prompts, "
                     f"{results['sets'][name]['lookups']} lookups)")
        ax.set_xlabel("threshold (cosine similarity)")
        ax.set_ylim(0.2, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("precision (solid) / recall (dashed)")
    axes[1].legend(fontsize=7, loc="lower left")
    fig.suptitle("AI.SEMANTIC_CACHE on hand-written hard negatives (all-MiniLM-L6-v2)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "semcache.json"))
    parser.add_argument("--plot", default=str(ROOT / "docs" / "semcache_verify.png"))
    parser.add_argument("--repeat", type=int, default=3, help="round-trip passes over the main set")
    args = parser.parse_args()
    results: dict = {"sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        server = ProcessServer(Path(tmp), "--embed-provider", "minilm").start(timeout=180)
        try:
            r = redis.Redis(port=server.port, socket_timeout=600)
            default = float(r.config_get("semantic-cache-threshold")["semantic-cache-threshold"])
            results["default_threshold"] = default
            results["default_verify"] = r.config_get("semantic-cache-verify")["semantic-cache-verify"]
            for name, path in SETS.items():
                prompts, lookups = load(path)
                start = time.perf_counter()
                rows = run_set(r, prompts, lookups)
                table = {mode: [dict(threshold=t, **score(rows, f"{mode}@{t:.2f}")) for t in THRESHOLDS]
                         for mode in MODES}
                wrong_by_category = {mode: {} for mode in MODES}
                for row in rows:
                    for mode in MODES:
                        got = row[f"{mode}@{default:.2f}"]
                        if got is not None and (row["expect"] is None or got != answer(row["expect"])):
                            counts = wrong_by_category[mode]
                            counts[row["category"]] = counts.get(row["category"], 0) + 1
                results["sets"][name] = {"prompts": len(prompts), "lookups": len(lookups),
                                         "paraphrases": sum(1 for x in lookups if x["expect"] is not None),
                                         "table": table, "wrong_by_category": wrong_by_category,
                                         "seconds": round(time.perf_counter() - start, 1), "rows": rows}
                if name == "main":
                    micros = verifier_latency(r, prompts, lookups, default)
                    results["verifier_us"] = {"p50": round(pct(micros, 50), 1), "p99": round(pct(micros, 99), 1),
                                              "max": round(max(micros), 1), "n": len(micros)}
                    trips = round_trips(r, lookups, args.repeat)
                    # model mode the first time (the swapped words not yet in the embedder's cache), against
                    # lexical right before it (the query's vector already cached by the VERIFY off call)
                    results["first_get_ms"] = {mode: {"p50": round(pct([x[f"first_ms_{mode}"] for x in rows], 50), 3),
                                                      "p99": round(pct([x[f"first_ms_{mode}"] for x in rows], 99), 3)}
                                               for mode in ("lexical", "model")}
                    results["get_ms"] = {mode: {"p50": round(pct(v, 50), 3), "p99": round(pct(v, 99), 3),
                                                "n": len(v)} for mode, v in trips.items()}
        finally:
            server.stop()
    results["load"] = [round(x, 2) for x in os.getloadavg()]
    report(results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    slim = {k: v for k, v in results.items() if k != "sets"}
    slim["sets"] = {n: {k: v for k, v in s.items() if k != "rows"} for n, s in results["sets"].items()}
    slim["decisions"] = {n: interesting(s["rows"], results["default_threshold"]) for n, s in results["sets"].items()}
    Path(args.out).write_text(json.dumps(slim, indent=1) + "\n")
    if plot(results, Path(args.plot)):
        print(f"plot: {Path(args.plot).relative_to(ROOT)}")
    return 0


def interesting(rows: list[dict], threshold: float) -> list[dict]:
    """At the default threshold, the lookups the modes decide differently or any mode gets wrong,
    with each mode's answer and reason (what to read to see why the verifier refused or served)."""
    out = []
    for row in rows:
        served = {mode: row[f"{mode}@{threshold:.2f}"] for mode in MODES}
        right = None if row["expect"] is None else answer(row["expect"])
        if len(set(served.values())) > 1 or any(v is not None and v != right for v in served.values()):
            out.append({"query": row["query"], "category": row["category"], "expect": right, "served": served,
                        "reason": {mode: row[f"reason_{mode}"] for mode in MODES}})
    return out


def report(results: dict) -> None:
    default = results["default_threshold"]
    load = results["load"]
    print(f"default threshold {default}, default VERIFY {results['default_verify']}; "
          f"load average {load[0]} {load[1]} {load[2]}")
    for name, s in results["sets"].items():
        print(f"\n{name} set: {s['prompts']} cached prompts, {s['lookups']} lookups "
              f"({s['paraphrases']} paraphrases, {s['lookups'] - s['paraphrases']} hard negatives); {s['seconds']} s")
        print("| threshold | VERIFY | served | correct | wrong | precision | recall |")
        print("|---|---|---|---|---|---|---|")
        for i, t in enumerate(THRESHOLDS):
            for mode in MODES:
                row = s["table"][mode][i]
                mark = " **(default)**" if t == default and mode == results["default_verify"] else ""
                print(f"| {t:.2f} | {mode}{mark} | {row['served']} | {row['correct']} | {row['wrong']} | "
                      f"{row['precision']:.3f} | {row['recall']:.3f} |")
        print(f"wrong answers at {default} by category:",
              "; ".join(f"{mode}: {dict(sorted(c.items()))}" for mode, c in s["wrong_by_category"].items()))
    v = results["verifier_us"]
    print(f"\nlexical verification per lookup (in process, cold per-text cache, median of {RUNS} runs, "
          f"{v['n']} lookups): "
          f"p50 {v['p50']} us, p99 {v['p99']} us, max {v['max']} us")
    g = results["get_ms"]
    print("GET round trip (ms, warm query vector): " + "; ".join(
        f"VERIFY {m} p50 {x['p50']} p99 {x['p99']} (n={x['n']})" for m, x in g.items()))
    f = results["first_get_ms"]
    print(f"first GET of each query at {THRESHOLDS[0]} (model's words not cached yet): VERIFY lexical p50 "
          f"{f['lexical']['p50']} p99 {f['lexical']['p99']} ms; VERIFY model p50 {f['model']['p50']} "
          f"p99 {f['model']['p99']} ms")
    print(f"added by lexical: p50 {g['lexical']['p50'] - g['off']['p50']:+.3f} ms, "
          f"p99 {g['lexical']['p99'] - g['off']['p99']:+.3f} ms; by model: p50 "
          f"{g['model']['p50'] - g['off']['p50']:+.3f} ms, p99 {g['model']['p99'] - g['off']['p99']:+.3f} ms")


if __name__ == "__main__":
    sys.exit(main())
