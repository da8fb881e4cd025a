"""Composed chunk K/V vs text RAG on the real SmolLM2-135M-Instruct: answers, agreement and TTFT.

The corpus is ``examples/rag_corpus.py`` (fictional towns, one ~250-token passage each, built
from templates, nothing downloaded). Every question gets a prompt ``stub + k passages +
question`` (the needed passages among distractors, in a fixed shuffled order), answered
greedily (up to 32 tokens, or the end-of-turn token) by:

- ``text``: text RAG, a full prefill of the prompt (the baseline and the reference answer);
- ``none``: ``prepare_multi`` of the cached passages, K re-rotated, no repair;
- ``first16``: the same with EPIC repair of the first 16 tokens of every passage;
- ``blend15``: the same with CacheBlend repair of the 15% most deviating passage tokens (V on
  attention layer 1, CacheBlend's default; one narrowing forward);
- ``blend15f``: CacheBlend with a funnel: the 30% most deviating on layer 1 run on to layer 8,
  whose deviation picks the 15% recomputed through every layer;
- ``pion:none`` / ``pion:blend15`` (at ``--pion-k``): the same through a Pion server (rows
  fetched over the socket), TTFT only; their first token must equal the inproc one.

Reported per k and config: answer match (the expected string in the answer), greedy agreement
with text RAG (share of equal tokens position by position over the longer answer; and
teacher-forced: the composed cache fed the text-RAG answer in one forward, share of steps whose
argmax is the next text-RAG token, and the mean KL(text || composed) over those steps), the
recomputed share of passage tokens, and the median TTFT with its ratio to text RAG's median
(and *paired*: the median over questions of text RAG's TTFT over the config's, in the same
question, steadier while the load moves). TTFT = ids in hand to the first token: prefill (text) or
compose + repair + question forward (cached). Chunks are encoded once, before timing, as a
RAG service would when documents arrive. Rows are saved after every (question, k) pair;
``--resume`` measures only the pairs not yet in the JSON, so a run cut short loses nothing.

    python benchmarks/bench_rag.py                            # 12 questions, k = 1, 4, 8, 20
    python benchmarks/bench_rag.py --questions 24 --ks 1,4,8
    python benchmarks/bench_rag.py --resume                   # go on where the last run stopped
    python benchmarks/bench_rag.py --smoke                    # CI-sized: tiny random model
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "examples"))

import rag_corpus  # noqa: E402

from pion.client import measure as M  # noqa: E402

STUB = ("<|im_start|>system\nAnswer the question using only the passages below. Answer briefly."
        "<|im_end|>\n<|im_start|>user\n")
MAX_TOKENS = 32
TINY = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=8192, tie_word_embeddings=True)


class SmokeTokenizer:
    """Characters as token ids (for the tiny random model of ``--smoke``)."""

    eos_token_id = 2

    def encode(self, text: str) -> list[int]:
        return [3 + ord(c) % 290 for c in text]

    def decode(self, ids) -> str:
        return "".join(chr(97 + i % 26) for i in ids)

    def end_ids(self) -> set[int]:
        return {self.eos_token_id}


class HfTokenizer:
    def __init__(self, tok) -> None:
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def end_ids(self) -> set[int]:
        return {self.tok.eos_token_id, self.tok.convert_tokens_to_ids("<|im_end|>")}


def load(smoke: bool):
    if smoke:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**TINY)).eval(), SmokeTokenizer(), "tiny-random"
    from pion.client.real_model import SMOLLM2_ID, load_smollm2

    model, tok = load_smollm2(progress=print)
    return model, HfTokenizer(tok), SMOLLM2_ID


def configs(k: int, n_layers: int):
    from pion.client.retrieval import Repair

    if k == 1:
        return [("none", None)]  # one pack sits where it was encoded: nothing to rotate or repair
    return [("none", None), ("first16", Repair.epic(16)), ("blend15", Repair.cacheblend(0.15)),
            ("blend15f", Repair.cacheblend(0.15, check_layer=1, refine_layer=min(8, n_layers - 1),
                                                preselect=0.3))]


def greedy(adapter, cache, first_ids: list[int], end: set[int]) -> tuple[list[int], float]:
    """Greedy answer (<= 32 tokens) and the seconds to its first token (the example's generator)."""
    from rag import generate

    return generate(adapter, cache, first_ids, MAX_TOKENS, end)


def greedy_logprobs(adapter, cache, first_ids: list[int], end: set[int]) -> tuple[list[int], float, np.ndarray]:
    """``greedy`` that also keeps the log-probabilities of every step (text RAG's reference
    distributions for the KL column: greedy follows its own argmax, so they are teacher-forced)."""
    started = time.perf_counter()
    logits = adapter.forward(first_ids, cache)
    first_s = time.perf_counter() - started
    out, steps = [], []
    for _ in range(MAX_TOKENS):
        steps.append(_log_softmax(logits))
        out.append(int(np.argmax(logits)))
        if out[-1] in end or len(out) == MAX_TOKENS:
            break
        logits = adapter.forward([out[-1]], cache)
    return out, first_s, np.stack(steps)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def answer_logprobs(adapter, cache, ids: list[int]) -> np.ndarray:
    """Log-probabilities at every position of ``ids`` run on top of ``cache`` (one forward)."""
    torch = adapter.torch
    kwargs = {adapter._cache_kw: cache, "use_cache": True}
    with torch.no_grad():
        out = adapter.model(input_ids=torch.tensor([list(ids)]), **kwargs)
    return _log_softmax(out.logits[0].float().numpy())


def teacher_forced(adapter, cache, first_ids: list[int], reference: list[int], ref_logprobs: np.ndarray):
    """Feed text RAG's answer on the composed cache in one forward: ``(share of steps whose argmax
    is text RAG's next token, mean KL(text || composed) over the steps, KL of the first step)``."""
    got = answer_logprobs(adapter, cache, list(first_ids) + reference[:-1])[len(first_ids) - 1:]
    kl = (np.exp(ref_logprobs) * (ref_logprobs - got)).sum(axis=-1)
    return float(np.mean(got.argmax(axis=-1) == np.array(reference))), float(kl.mean()), float(kl[0])


def positionwise(a: list[int], b: list[int]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=False)) / max(len(a), len(b), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--ks", default="1,4,8,20")
    parser.add_argument("--pion-k", type=int, default=8, help="k at which the pion backend is timed (0: skip)")
    parser.add_argument("--smoke", action="store_true", help="tiny random model, 2 questions, k = 1, 3")
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--resume", action="store_true",
                        help="keep the (question, k) pairs already in the results JSON and measure the rest")
    parser.add_argument("--budget-min", type=float, default=0,
                        help="start no new question after this many minutes (0: no limit); the table says how many ran")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for every path (1: on a shared, oversubscribed machine OpenMP's barriers "
                             "cost a scheduler quantum per small op, which hurts repair's small batches most)")
    parser.add_argument("--name", default=None, help="results file stem (default rag_smollm2, rag_smoke with --smoke)")
    parser.add_argument("--merge", default=None, metavar="A.json,B.json",
                        help="measure nothing: join the rows of runs made in parallel (e.g. one per k) into one table")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args)
    if args.smoke:
        args.questions, args.ks, args.pion_k = 2, "1,3", 3
    ks = [int(k) for k in args.ks.split(",")]

    import torch

    from pion.client.retrieval import HybridRetrievalCache

    torch.set_num_threads(args.threads)
    model, tok, model_name = load(args.smoke)
    towns = rag_corpus.towns(24)
    questions = rag_corpus.questions(towns)[: args.questions]
    passages = {t.name: tok.encode(f"Passage: {rag_corpus.passage(t, words=40 if args.smoke else 190)}\n\n")
                for t in towns}
    stub = tok.encode(STUB)
    rc = HybridRetrievalCache(model, tokenizer=None if args.smoke else tok.tok)
    rc.set_shared_stub(stub)
    contexts = {(q.text, k): rag_corpus.context_for(q, towns, k) for q in questions for k in ks}
    needed = sorted({n for names in contexts.values() for n in names})
    started = time.perf_counter()
    for i, name in enumerate(needed, 1):
        rc.ingest_pack(name, passages[name])
        print(f"\rencoding passages: {i}/{len(needed)}", end="", flush=True)
    print(f" in {time.perf_counter() - started:.0f} s; passage tokens: "
          f"{min(len(passages[n]) for n in needed)}-{max(len(passages[n]) for n in needed)}")
    rc.composer.verify_rotation(len(stub) + max(ks) * max(len(p) for p in passages.values()) + 64)

    server, pion_rc = None, None
    if args.pion_k in ks:
        from pion.cli.demo import DemoServer

        server = DemoServer(tempfile.mkdtemp(prefix="pion-bench-rag-"))
        server.start()
        pion_rc = HybridRetrievalCache(model, backend="pion", url=server.url,
                                       tokenizer=None if args.smoke else tok.tok)
        rc.copy_to(pion_rc)
        pion_rc.set_shared_stub(stub)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("rag_smoke" if args.smoke else "rag_smollm2")

    def save(rows: list[dict], final: bool = False) -> None:
        """Write the table so far (after every question, so a run cut short still leaves its numbers)."""
        load_avg = os.getloadavg()
        done = len({r["q"] for r in rows if r["k"] == ks[-1]})  # questions measured at every k
        table = summarize(rows, ks)
        (out / f"{name}.json").write_text(json.dumps({"model": model_name, "questions": done, "ks": ks,
                                                      "threads": args.threads, "loadavg": load_avg,
                                                      "complete": final, "table": table, "rows": rows}, indent=1))
        if final:
            print_table(table, model_name, done, load_avg)
            print(f"torch threads: {args.threads}")
            plot(table, ks, out / f"{name}.png", model_name, load_avg)

    rows: list[dict] = []
    saved = out / f"{name}.json"
    if args.resume and saved.exists():
        rows = [r for r in json.loads(saved.read_text())["rows"] if r["k"] in ks and r["q"] <= len(questions)]
        print(f"resuming: {len({(r['q'], r['k']) for r in rows})} (question, k) pairs already measured")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its server (finally)
    try:
        rows = run(args, ks, questions, contexts, passages, stub, rc, pion_rc, tok, save, rows)
    finally:
        if server is not None:
            server.stop()
    save(rows, final=True)
    print(f"wrote {out / name}.json and .png")
    return 0


def run(args, ks, questions, contexts, passages, stub, rc, pion_rc, tok, save, rows: list[dict]) -> list[dict]:
    """Every question at every k (skipping the ``(question, k)`` pairs already in ``rows``:
    ``--resume``), saving after each pair."""
    adapter, end = rc.adapter, tok.end_ids()
    started = time.monotonic()
    have = {(r["q"], r["k"]) for r in rows}
    for qi, q in enumerate(questions, 1):
        if args.budget_min and time.monotonic() - started > args.budget_min * 60:
            print(f"time budget of {args.budget_min:g} min spent: {qi - 1} of {len(questions)} questions ran")
            break
        question_ids = tok.encode(f"Question: {q.text}<|im_end|>\n<|im_start|>assistant\n")
        for k in ks:
            if (qi, k) in have:
                continue
            names = contexts[(q.text, k)]
            full = stub + [t for n in names for t in passages[n]] + question_ids
            M.settle()
            reference, text_s, ref_logprobs = greedy_logprobs(adapter, adapter.new_cache(), full, end)
            answer = tok.decode(reference)
            base = {"q": qi, "hops": q.hops, "k": k, "prompt_tokens": len(full), "answer": q.answer,
                    "load1": os.getloadavg()[0]}
            pair = [{**base, "config": "text", "ttft_ms": text_s * 1000, "match": q.answer.lower() in answer.lower(),
                     "free": 1.0, "forced": 1.0, "kl": 0.0, "kl_first": 0.0, "recomputed": 1.0, "text": answer}]
            for config, repair in configs(k, len(adapter.layout.attn)):
                M.settle()
                started_at = time.perf_counter()
                cache, suffix = rc.prepare_multi(names, question_ids, repair=repair, allow_fine_grain=True)
                prepare_s = time.perf_counter() - started_at
                snapshot = rc.composer.rows(cache)
                tokens, first_s = greedy(adapter, cache, suffix, end)
                report = rc.last_prepare.get("repair") or {}
                forced, kl, kl_first = teacher_forced(adapter, rc.composer.build([snapshot]), suffix, reference,
                                                      ref_logprobs)
                text = tok.decode(tokens)
                pair.append({**base, "config": config, "ttft_ms": (prepare_s + first_s) * 1000,
                             "prepare_ms": prepare_s * 1000, "compute": report.get("compute", 0.0),
                             "match": q.answer.lower() in text.lower(), "free": positionwise(tokens, reference),
                             "forced": forced, "kl": kl, "kl_first": kl_first,
                             "recomputed": report.get("recompute_fraction", 0.0), "text": text,
                             "first_token": tokens[0]})
                if pion_rc is not None and k == args.pion_k and config in ("none", "blend15"):
                    pair.append(time_pion(pion_rc, names, question_ids, repair, base, config, tokens[0]))
            rows.extend(pair)
            print(f"q{qi} k={k} ({len(full)} tokens): " + "  ".join(
                f"{r['config']} {r['ttft_ms']:.0f}ms"
                + ("" if r["config"].startswith("pion") else f" {'ok' if r['match'] else '--'} {100 * r['free']:.0f}%")
                for r in pair) + f"  load {os.getloadavg()[0]:.1f}", flush=True)
            save(rows)
    return rows


def merge(args) -> int:
    """Join runs made in parallel (``--ks 1,4,8`` and ``--ks 20`` at once, say) into one table and plot."""
    parts = [json.loads(Path(p).read_text()) for p in args.merge.split(",")]
    rows = [r for part in parts for r in part["rows"]]
    ks = sorted({r["k"] for r in rows})
    out = Path(args.out_dir)
    name = args.name or "rag_smollm2"
    load_avg = os.getloadavg()
    table = summarize(rows, ks)
    done = {k: len({r["q"] for r in rows if r["k"] == k}) for k in ks}
    (out / f"{name}.json").write_text(json.dumps({
        "model": parts[0]["model"], "questions": done, "ks": ks, "threads": parts[0]["threads"],
        "loadavg": load_avg, "complete": all(p["complete"] for p in parts), "merged_from": args.merge.split(","),
        "table": table, "rows": rows}, indent=1))
    print_table(table, parts[0]["model"], min(done.values()), load_avg)
    print("questions per k: " + ", ".join(f"k={k}: {n}" for k, n in done.items()))
    plot(table, ks, out / f"{name}.png", parts[0]["model"], load_avg)
    return 0


def time_pion(pion_rc, names, question_ids, repair, base, config, expected_first) -> dict:
    M.settle()
    started = time.perf_counter()
    cache, suffix = pion_rc.prepare_multi(names, question_ids, repair=repair, allow_fine_grain=True)
    logits = pion_rc.adapter.forward(suffix, cache)
    ttft = (time.perf_counter() - started) * 1000
    first = int(np.argmax(logits))
    if first != expected_first:
        raise SystemExit(f"pion backend gave first token {first}, inproc {expected_first}: the stored rows differ")
    return {**base, "config": f"pion:{config}", "ttft_ms": ttft, "fetch_ms": pion_rc.last_prepare["load_ms"]}


def summarize(rows: list[dict], ks: list[int]) -> list[dict]:
    table = []
    for k in ks:
        at_k = [r for r in rows if r["k"] == k]
        text_ms = M.median([r["ttft_ms"] for r in at_k if r["config"] == "text"])
        text_of = {r["q"]: r["ttft_ms"] for r in at_k if r["config"] == "text"}
        for config in dict.fromkeys(r["config"] for r in at_k):
            sel = [r for r in at_k if r["config"] == config]
            ttft = M.median([r["ttft_ms"] for r in sel])
            # the load moves text RAG's own time 4x between questions: the ratio within each
            # question (text RAG measured seconds before) is the steadier figure
            paired = [text_of[r["q"]] / r["ttft_ms"] for r in sel if r["q"] in text_of and r["ttft_ms"]]
            entry = {"k": k, "config": config, "n": len(sel), "ttft_ms": round(ttft, 1),
                     "speedup": round(text_ms / ttft, 2) if ttft else None,
                     "speedup_paired": round(M.median(paired), 2) if paired else None,
                     "prompt_tokens": round(float(np.mean([r["prompt_tokens"] for r in sel])))}
            if not config.startswith("pion"):
                entry.update(match=sum(r["match"] for r in sel), free=round(float(np.mean([r["free"] for r in sel])), 4),
                             forced=round(float(np.mean([r["forced"] for r in sel])), 4),
                             kl=round(float(np.mean([r.get("kl", 0.0) for r in sel])), 4),
                             recomputed=round(float(np.mean([r["recomputed"] for r in sel])), 4),
                             compute=round(float(np.mean([r.get("compute", 1.0) for r in sel])), 4))
            table.append(entry)
    return table


def print_table(table: list[dict], model_name: str, n: int, load_avg) -> None:
    print(f"\n{model_name}, {n} questions, greedy <= {MAX_TOKENS} tokens; load average "
          f"{load_avg[0]:.1f} {load_avg[1]:.1f} {load_avg[2]:.1f}")
    print(f"{'k':>3} {'config':13} {'tokens':>6} {'answers':>8} {'agree':>7} {'forced':>7} {'KL':>6} {'recomp':>7} "
          f"{'work':>5} {'TTFT ms':>9} {'vs text':>8} {'paired':>7}")
    for e in table:
        answers = f"{e['match']}/{e['n']}" if "match" in e else "-"
        agree = f"{100 * e['free']:.1f}%" if "free" in e else "-"
        forced = f"{100 * e['forced']:.1f}%" if "forced" in e else "-"
        recomp = f"{100 * e['recomputed']:.0f}%" if "recomputed" in e else "-"
        work = f"{100 * e['compute']:.0f}%" if "compute" in e else "-"
        kl = f"{e['kl']:.3f}" if "kl" in e else "-"
        print(f"{e['k']:>3} {e['config']:13} {e['prompt_tokens']:>6} {answers:>8} {agree:>7} {forced:>7} {kl:>6} {recomp:>7} "
              f"{work:>5} {e['ttft_ms']:>9.0f} {e['speedup']:>7.1f}x {e.get('speedup_paired') or 0:>6.1f}x")


def plot(table: list[dict], ks: list[int], path: Path, model_name: str, load_avg) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    configs_seen = list(dict.fromkeys(e["config"] for e in table))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(configs_seen)
    for i, config in enumerate(configs_seen):
        xs = [j + i * width for j, k in enumerate(ks) if any(e["k"] == k and e["config"] == config for e in table)]
        ys = [e["ttft_ms"] for k in ks for e in table if e["k"] == k and e["config"] == config]
        left.bar(xs, ys, width, label=config)
        agree = [(j + i * width, e["free"] * 100) for j, k in enumerate(ks) for e in table
                 if e["k"] == k and e["config"] == config and "free" in e]
        if agree and config != "text":
            right.plot([a for a, _ in agree], [b for _, b in agree], "o-", label=config)
    for axis in (left, right):
        axis.set_xticks([j + 0.4 - width / 2 for j in range(len(ks))], [f"k={k}" for k in ks])
    left.set_yscale("log")
    left.set_ylabel("median time to first token (ms)")
    left.legend(fontsize=7)
    right.set_ylabel("greedy agreement with text RAG (%)")
    right.legend(fontsize=7)
    fig.suptitle(f"chunk K/V cache vs text RAG, {model_name} (load {load_avg[0]:.1f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
