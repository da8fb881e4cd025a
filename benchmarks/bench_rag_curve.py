"""Repair quality against recompute ratio and selector, on the real SmolLM2-135M-Instruct.

``bench_rag.py`` times a few configs at every k; this measures *how good* each repair
selector is at one k (default 8) for 5%, 15% and 30% recompute, against text RAG (a full
prefill of the same prompt, same tokens):

- ``v1``: CacheBlend as published: V deviation on attention layer 1 (its reference code);
- ``k1``: the same on K (LMCache's ``diff_k``: post-RoPE fresh K vs the re-rotated cached K);
- ``sink4+v1``: EPIC's first 4 tokens of every passage (attention sinks) plus ``v1`` for the
  rest of the budget;
- ``funnel``: 2r preselected by V on layer 1, run on to layer 8, whose V deviation picks r;
- ``first16``: EPIC alone (16 tokens per passage, ~6%), and ``none``.

Per question and plan: KL(text || composed) averaged over the answer's teacher-forced steps,
teacher-forced top-1 agreement (one forward of the text-RAG answer on the composed cache),
32-token greedy agreement position by position, answer match, recomputed share and work.
Rows are written to ``benchmarks/results/rag_curve.json`` after every question; a rerun with
``--resume`` skips questions already there.

    python benchmarks/bench_rag_curve.py --questions 6 --k 8
    python benchmarks/bench_rag_curve.py --smoke --out /tmp/curve.json   # tiny random model
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_rag as B  # noqa: E402

rag_corpus = B.rag_corpus
RATIOS = (0.05, 0.15, 0.30)


def plans(n_layers: int):
    from pion.client.retrieval import Repair

    out = [("none", None), ("first16", Repair.epic(16))]
    for r in RATIOS:
        pct = round(r * 100)
        out += [(f"v1@{pct}", Repair.cacheblend(r)), (f"k1@{pct}", Repair.cacheblend(r, measure="k")),
                (f"sink4+v1@{pct}", Repair.cacheblend(r, first_k=4)),
                (f"funnel@{pct}", Repair.cacheblend(r, 1, min(8, n_layers - 1), min(1.0, 2 * r)))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--resume", action="store_true", help="keep the questions already in the JSON")
    parser.add_argument("--smoke", action="store_true", help="tiny random model, 2 questions, k = 3 (CI-sized)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rag_curve.json"))
    args = parser.parse_args(argv)
    if args.smoke:
        args.questions, args.k = 2, 3

    import torch

    from pion.client.retrieval import HybridRetrievalCache

    torch.set_num_threads(1)
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if args.resume and out.exists() else []
    done = {r["q"] for r in rows if r["k"] == args.k}
    model, tok, model_name = B.load(args.smoke)
    towns = rag_corpus.towns(24)
    questions = rag_corpus.questions(towns)[: args.questions]
    passages = {t.name: tok.encode(f"Passage: {rag_corpus.passage(t, words=40 if args.smoke else 190)}\n\n")
                for t in towns}
    stub = tok.encode(B.STUB)
    rc = HybridRetrievalCache(model, tokenizer=None if args.smoke else tok.tok)
    rc.set_shared_stub(stub)
    adapter, end = rc.adapter, tok.end_ids()
    for qi, q in enumerate(questions, 1):
        if qi in done:
            continue
        names = rag_corpus.context_for(q, towns, args.k)
        for name in names:
            if not rc.has(name):
                rc.ingest_pack(name, passages[name])
        question_ids = tok.encode(f"Question: {q.text}<|im_end|>\n<|im_start|>assistant\n")
        context = stub + [t for n in names for t in passages[n]]
        reference, _ = B.greedy(adapter, adapter.new_cache(), context + question_ids, end)
        forced_ids = question_ids + reference[:-1]
        at = len(question_ids) - 1  # the logits that predict the answer's tokens
        ref_lp = B.answer_logprobs(adapter, adapter.prefill(context), forced_ids)[at:]
        base = {"q": qi, "k": args.k, "hops": q.hops, "answer": q.answer, "prompt_tokens": len(context + question_ids)}
        rows.append({**base, "plan": "text", "kl": 0.0, "forced": 1.0, "free": 1.0, "recomputed": 1.0, "work": 1.0,
                     "match": q.answer.lower() in tok.decode(reference).lower(), "text": tok.decode(reference)})
        for name, plan in plans(len(adapter.layout.attn)):
            started = time.perf_counter()
            cache, _ = rc.prepare_multi(names, question_ids, repair=plan, allow_fine_grain=True)
            prepare_ms = (time.perf_counter() - started) * 1000
            snapshot = rc.composer.rows(cache)
            lp = B.answer_logprobs(adapter, cache, forced_ids)[at:]
            kl = float((np.exp(ref_lp) * (ref_lp - lp)).sum(-1).mean())
            forced = float(np.mean(lp.argmax(-1) == np.array(reference)))
            tokens, _ = B.greedy(adapter, rc.composer.build([snapshot]), question_ids, end)
            report = rc.last_prepare.get("repair") or {}
            text = tok.decode(tokens)
            rows.append({**base, "plan": name, "kl": kl, "forced": forced, "free": B.positionwise(tokens, reference),
                         "recomputed": report.get("recompute_fraction", 0.0), "work": report.get("compute", 0.0),
                         "prepare_ms": prepare_ms, "match": q.answer.lower() in text.lower(), "text": text})
        print(f"q{qi} ({len(context)} context tokens) load {os.getloadavg()[0]:.1f}: " + "  ".join(
            f"{r['plan']} {r['kl']:.2f}/{r['free']:.2f}" for r in rows if r["q"] == qi and r["k"] == args.k), flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"model": model_name, "k": args.k, "loadavg": os.getloadavg(),
                                   "table": summarize(rows, args.k), "rows": rows}, indent=1))
    table = summarize(rows, args.k)
    print_table(table, model_name, args.k)
    plot(table, out.with_suffix(".png"), model_name, args.k)
    return 0


def plot(table: list[dict], path: Path, model_name: str, k: int) -> None:
    """KL to text RAG and greedy agreement against the recomputed share, one line per selector."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    by = {e["plan"]: e for e in table}
    for family in ("v1", "k1", "sink4+v1", "funnel"):
        points = [(0.0, by["none"])] + [(r, by[f"{family}@{round(r * 100)}"]) for r in RATIOS
                                        if f"{family}@{round(r * 100)}" in by]
        xs = [100 * r for r, _ in points]
        left.plot(xs, [e["kl"] for _, e in points], "o-", label=family)
        right.plot(xs, [100 * e["free"] for _, e in points], "o-", label=family)
    if "first16" in by:
        left.plot([100 * by["first16"]["recomputed"]], [by["first16"]["kl"]], "k^", label="first16 (EPIC)")
        right.plot([100 * by["first16"]["recomputed"]], [100 * by["first16"]["free"]], "k^", label="first16 (EPIC)")
    left.set_ylabel("KL(text RAG || composed), mean over answer tokens")
    right.set_ylabel("32-token greedy agreement with text RAG (%)")
    right.axhline(98, color="grey", linestyle=":", linewidth=1)
    for axis in (left, right):
        axis.set_xlabel("passage tokens recomputed (%)")
        axis.legend(fontsize=7)
    fig.suptitle(f"repair selectors, {model_name}, k={k}, {table[0]['n']} questions")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summarize(rows: list[dict], k: int) -> list[dict]:
    at_k = [r for r in rows if r["k"] == k]
    table = []
    for plan in dict.fromkeys(r["plan"] for r in at_k):
        sel = [r for r in at_k if r["plan"] == plan]
        table.append({"plan": plan, "n": len(sel), "match": sum(r["match"] for r in sel),
                      **{m: round(float(np.mean([r[m] for r in sel])), 4)
                         for m in ("kl", "forced", "free", "recomputed", "work")},
                      "prepare_ms": round(float(np.median([r.get("prepare_ms", 0.0) for r in sel])), 1)})
    return table


def print_table(table: list[dict], model_name: str, k: int) -> None:
    print(f"\n{model_name}, k={k}, {table[0]['n'] if table else 0} questions; load {os.getloadavg()[0]:.1f}")
    print(f"{'plan':14} {'answers':>8} {'KL':>6} {'forced':>7} {'greedy':>7} {'recomp':>7} {'work':>5} {'prep ms':>8}")
    for e in table:
        print(f"{e['plan']:14} {e['match']:>4}/{e['n']:<3} {e['kl']:>6.3f} {100 * e['forced']:>6.1f}% "
              f"{100 * e['free']:>6.1f}% {100 * e['recomputed']:>6.0f}% {100 * e['work']:>4.0f}% {e['prepare_ms']:>8.0f}")


if __name__ == "__main__":
    sys.exit(main())
