"""Stage 2 end to end on the real SmolLM2-135M-Instruct: passkey retrieval, greedy agreement, TTFT.

For each prompt (a passkey hidden at some depth of filler text, then the question), in one run:

- local: the prefix prefilled by transformers (the cold path; its K/V are then stored in Pion,
  fp32, as a prompt cache would), the question on top, 32 greedy tokens;
- Stage 2 dense: the same question with a ``Stage2Cache`` (the server attends the stored prefix,
  ``QUERY_FUSED ... FROM ns``), 32 greedy tokens; they should equal local's;
- Stage 2 sparse: decode steps attend max(1% of N, 512) prefix tokens chosen by Quest
  (``QUERY_SPARSE_AUTO_FUSED``), 32 greedy tokens; compared with dense.

TTFT at the largest length: cold (prefill of prefix + question) vs warm Stage 2 (question only,
prefix views warm on the server) vs the first Stage-2 call (views built) vs Stage 1 (fetch the
prefix's K/V, then the question). Prints one JSON line per prompt and a summary.

    python benchmarks/bench_attention_e2e.py                         # 20 prompts, 1K..8K
    python benchmarks/bench_attention_e2e.py --smoke                 # 2 short prompts
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.servers import ProcessServer  # noqa: E402

FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def passkey_prompt(tokenizer, n_tokens: int, depth: float, key: int) -> tuple[list[int], list[int]]:
    """``(prefix ids, suffix ids)``: a chat whose user turn hides the key at ``depth`` of ~n_tokens."""
    head = tokenizer.apply_chat_template([{"role": "user", "content": "@@@"}], tokenize=False,
                                         add_generation_prompt=True).split("@@@")
    intro = "There is a pass key hidden in this long text. Find it and remember it.\n"
    needle = f" The pass key is {key}. Remember it. {key} is the pass key. "
    filler_ids = len(tokenizer(FILLER, add_special_tokens=False)["input_ids"])
    reps = max(1, (n_tokens - 120) // filler_ids)
    cut = int(reps * depth)
    document = head[0] + intro + FILLER * cut + needle + FILLER * (reps - cut)
    question = "\nWhat is the pass key? Answer with the number only." + head[1] + "The pass key is"
    prefix = tokenizer(document, add_special_tokens=False)["input_ids"]
    suffix = tokenizer(question, add_special_tokens=False)["input_ids"]
    return prefix, suffix


def greedy(torch, model, cache, first_ids, steps) -> tuple[list[int], float]:
    """``(tokens, seconds to the first token)``: ``first_ids`` on top of ``cache``, then greedy steps."""
    out = []
    with torch.no_grad():
        start = time.perf_counter()
        logits = model(input_ids=torch.tensor([first_ids]), cache=cache, use_cache=True).logits[0, -1]
        token = int(logits.argmax())
        ttft = time.perf_counter() - start
        out.append(token)
        for _ in range(steps - 1):
            logits = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True).logits[0, -1]
            token = int(logits.argmax())
            out.append(token)
    return out, ttft


def budget_for(n: int) -> int:
    return 64 * math.ceil(max(0.01 * n, 512) / 64)


def run_prompt(torch, model, tokenizer, pc, stage2, length: int, depth: float, key: int, steps: int) -> dict:
    prefix, suffix = passkey_prompt(tokenizer, length, depth, key)
    adapter = pc.adapter
    start = time.perf_counter()
    cache = adapter.prefill(prefix)
    prefill_s = time.perf_counter() - start
    assert pc.put(prefix, cache), "the prefix could not be stored"
    local, local_suffix_s = greedy(torch, model, cache, suffix, steps)
    stage2.set_sparse(None)
    dense, first_stage2_s = greedy(torch, model, stage2.cache_for(prefix), suffix, steps)
    _, warm_stage2_s = greedy(torch, model, stage2.cache_for(prefix), suffix, 1)
    budget = budget_for(len(prefix))
    stage2.set_sparse({"block": 64, "budget": budget, "selector": "quest"})
    before = dict(stage2.counts)
    sparse, _ = greedy(torch, model, stage2.cache_for(prefix), suffix, steps)
    attended = stage2.counts["attended_tokens"] - before["attended_tokens"]
    seen = stage2.counts["prefix_tokens"] - before["prefix_tokens"]
    text = {name: tokenizer.decode(tokens) for name, tokens in (("local", local), ("dense", dense), ("sparse", sparse))}
    agree = sum(a == b for a, b in zip(dense, sparse, strict=True))
    lead = next((i for i, (a, b) in enumerate(zip(dense, sparse, strict=True)) if a != b), steps)
    return {
        "prefix_tokens": len(prefix), "suffix_tokens": len(suffix), "depth": depth, "key": key,
        "cold_ttft_s": round(prefill_s + local_suffix_s, 3), "prefill_s": round(prefill_s, 3),
        "stage2_first_ttft_s": round(first_stage2_s, 3), "stage2_warm_ttft_s": round(warm_stage2_s, 3),
        "dense_equals_local": dense == local, "sparse_agree_tokens": agree, "sparse_agree_leading": lead,
        "passkey_local": str(key) in text["local"], "passkey_dense": str(key) in text["dense"],
        "passkey_sparse": str(key) in text["sparse"], "sparse_budget_tokens": budget,
        "sparse_selected_fraction": round(attended / seen, 4) if seen else None,
        "answers": text, "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def stage1_ttft(torch, model, pc, prefix, suffix) -> float:
    start = time.perf_counter()
    cache = pc.get_or_prefill(prefix)
    with torch.no_grad():
        model(input_ids=torch.tensor([suffix]), cache=cache, use_cache=True).logits[0, -1].argmax()
    return time.perf_counter() - start


def summarize(rows: list[dict]) -> dict:
    by_len: dict[int, list[dict]] = {}
    for row in rows:
        by_len.setdefault(row["length"], []).append(row)
    table = []
    for length, group in sorted(by_len.items()):
        table.append({
            "length": length, "prompts": len(group),
            "passkey_local": sum(r["passkey_local"] for r in group), "passkey_dense": sum(r["passkey_dense"] for r in group),
            "passkey_sparse": sum(r["passkey_sparse"] for r in group),
            "dense_equals_local": sum(r["dense_equals_local"] for r in group),
            "sparse_agree_tokens_mean": round(float(np.mean([r["sparse_agree_tokens"] for r in group])), 2),
            "sparse_identical": sum(r["sparse_agree_tokens"] == r["steps"] for r in group),
            "budget_tokens": group[0]["sparse_budget_tokens"],
            "cold_ttft_s": round(float(np.median([r["cold_ttft_s"] for r in group])), 3),
            "stage2_warm_ttft_s": round(float(np.median([r["stage2_warm_ttft_s"] for r in group])), 3),
        })
    return {"by_length": table}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--lengths", default="1024,2048,4096,8000")
    parser.add_argument("--prompts", default="6,6,5,3", help="prompts per length (>= 20 in all)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--torch-threads", type=int, default=1, help="1 is fastest on a small shared machine")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "attention_e2e.json"))
    args = parser.parse_args()
    import torch

    from pion.client import PionPromptCache
    from pion.client.real_model import load_smollm2

    torch.set_num_threads(args.torch_threads)
    lengths = [256, 512] if args.smoke else [int(x) for x in args.lengths.split(",")]
    counts = [1, 1] if args.smoke else [int(x) for x in args.prompts.split(",")]
    steps = 4 if args.smoke else args.new_tokens
    model, tokenizer = load_smollm2(progress=log)
    tmp = Path(tempfile.mkdtemp(prefix="bench-attention-e2e-"))
    srv = ProcessServer(tmp / "data", "--appendonly", "no", "--attention-warm-bytes", "4gb").start()
    rows: list[dict] = []
    rng = np.random.default_rng(7)
    try:
        pc = PionPromptCache(model, url=f"pion://127.0.0.1:{srv.port}", tokenizer=tokenizer, local_lane=False)
        stage2 = pc.enable_stage2()
        for length, count in zip(lengths, counts, strict=True):
            for i in range(count):
                depth = (i + 0.5) / count
                key = int(rng.integers(10000, 99999))
                log(f"length {length}, prompt {i + 1}/{count} (depth {depth:.2f}), load {os.getloadavg()[0]:.1f}")
                row = run_prompt(torch, model, tokenizer, pc, stage2, length, depth, key, steps)
                row.update(length=length, steps=steps)
                rows.append(row)
                print(json.dumps(row), flush=True)
        last = rows[-1]
        prefix, suffix = passkey_prompt(tokenizer, lengths[-1], last["depth"], last["key"])
        stage1 = stage1_ttft(torch, model, pc, prefix, suffix)
        stats = stage2.stats()
    finally:
        srv.stop()
    result = {"rows": rows, **summarize(rows), "stage1_ttft_s_at_largest": round(stage1, 3), "stage2_stats": stats,
              "torch_threads": args.torch_threads, "loadavg_end": [round(x, 2) for x in os.getloadavg()]}
    largest = [r for r in rows if r["length"] == lengths[-1]]
    result["ttft_at_largest"] = {
        "prefix_tokens": largest[-1]["prefix_tokens"],
        "cold_s": round(float(np.median([r["cold_ttft_s"] for r in largest])), 3),
        "stage2_warm_s": round(float(np.median([r["stage2_warm_ttft_s"] for r in largest])), 3),
        "stage2_first_s": round(float(np.median([r["stage2_first_ttft_s"] for r in largest])), 3),
        "stage1_s": round(stage1, 3)}
    out = Path(args.out if not args.smoke else Path(args.out).with_name("attention_e2e_smoke.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    for line in result["by_length"]:
        print(json.dumps(line))
    print(json.dumps({"ttft_at_largest": result["ttft_at_largest"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
