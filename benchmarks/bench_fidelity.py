"""How much each K/V codec changes the model's output, through the real store/fetch path.

For each model and each codec (with ``boundary_protect`` 0 and 2 for the lossy ones) the prefix
(all but the last prompt token) is prefilled once, stored in Pion with that codec and fetched
back with ``PionPromptCache``; the last token is then run on the fetched cache and on the local
one. Reported, against the local (cold) cache:

- ``max|dlogit|``: max absolute difference of the next-token logits;
- ``KL``: KL(p_cold || p_warm) of the next-token distributions, in nats;
- ``greedy``: how many of 64 greedy tokens agree before the first divergence;
- ``bytes/token``: stored bytes per token (K and V, all layers) as the server keeps them.

Models: the built-in demo model (SmolLM2-135M's shape) and Llama-3.2-1B's shape (16 layers,
8 K/V heads of 64, vocab 128,256), both with random weights, built locally in bf16 and run in
fp32 (the demo's CPU dtype), so ``auto`` stores fp32 and must be exact.

    python benchmarks/bench_fidelity.py                    # both models, every codec
    python benchmarks/bench_fidelity.py --models builtin:smollm2-135m-shape --codecs auto,fp16
    python benchmarks/bench_fidelity.py --smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from pion.client import PionPromptCache  # noqa: E402
from pion.client import measure as M  # noqa: E402

MODELS = ("builtin:smollm2-135m-shape", "builtin:llama-3.2-1b-shape")
CODECS = ("auto", "bf16", "fp16", "fp8", "int8", "mlx4g32", "turbo4", "turbo3", "turbo2")
LOSSLESS_FOR_BP = {"auto", "fp32", "fp16"}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max()
    p = np.exp(z)
    return p / p.sum()


def kl(p: np.ndarray, q: np.ndarray) -> float:
    mask = p > 0
    return float(np.sum(p[mask] * (np.log(p[mask]) - np.log(np.maximum(q[mask], 1e-300)))))


def agreement(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return i
    return len(a)


def stored_bytes_per_token(pc, ns: str, n: int) -> float:
    info = pc.client.v_info(f"{ns}_pk"), pc.client.v_info(f"{ns}_pv")
    return sum(i.get("bytes", 0) for i in info) / n if all("bytes" in i for i in info) else float("nan")


def one_config(loaded, url: str, prefix, prefix_cache, last, cold_logits, cold_tokens, codec: str, bp: int,
               steps: int) -> dict:
    pc = PionPromptCache(loaded.model, url=url, vquant=codec, boundary_protect=bp, tokenizer=loaded.tokenizer,
                         model_id=loaded.name)
    ns = pc.namespace(prefix)
    pc.client.kv_drop(ns)
    if not pc.put(prefix, prefix_cache):
        raise RuntimeError(f"{codec}/bp{bp}: the store failed")
    cache = pc.get_or_prefill(prefix)
    if pc.stats()["hits"] != 1:
        raise RuntimeError(f"{codec}/bp{bp}: the fetch was not a hit ({pc.stats()})")
    logits = loaded.adapter.forward(last, cache)
    tokens = M.greedy(loaded.adapter, cache, logits, steps)
    row = {"codec": codec, "bp": bp, "schema_v": sorted(set(pc.schema["v"])),
           "max_abs_logit": float(np.abs(logits - cold_logits).max()),
           "kl": kl(softmax(cold_logits), softmax(logits)),
           "greedy": agreement(cold_tokens, tokens), "steps": steps,
           "bytes_per_token": stored_bytes_per_token(pc, ns, len(prefix))}
    pc.client.kv_drop(ns)
    return row


def bench_model(model_arg: str, args) -> list[dict]:
    log(f"loading {model_arg} ({args.runtime})")
    loaded = M.load(model_arg, args.runtime, log)
    prompt = M.filler_prompt(loaded, args.prefix_tokens + 1)
    prefix, last = prompt[:-1], prompt[-1:]
    log("cold reference: local prefill + last token + greedy")
    prefix_cache = loaded.adapter.prefill(prefix)
    cache = loaded.adapter.copy_cache(prefix_cache)
    cold_logits = loaded.adapter.forward(last, cache)
    cold_tokens = M.greedy(loaded.adapter, cache, cold_logits, args.steps)
    rows = []
    for codec in args.codecs:
        for bp in (0, 2):
            if bp and codec in LOSSLESS_FOR_BP:
                continue
            log(f"{model_arg}: codec {codec}, boundary_protect {bp}")
            try:
                row = one_config(loaded, args.url, prefix, prefix_cache, last, cold_logits, cold_tokens, codec, bp,
                                 args.steps)
            except ValueError as exc:  # a codec that cannot take this width
                row = {"codec": codec, "bp": bp, "refused": str(exc)}
            rows.append({"model": loaded.name, **row})
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"\n{'model':<30} {'codec':>8} {'bp':>3} {'max|dlogit|':>12} {'KL (nats)':>11} {'greedy':>8} {'B/token':>9}")
    for row in rows:
        head = f"{row['model']:<30} {row['codec']:>8} {row['bp']:>3}"
        if "refused" in row:
            print(f"{head}  refused: {row['refused']}")
            continue
        print(f"{head} {row['max_abs_logit']:12.3e} {row['kl']:11.3e} {row['greedy']:>4}/{row['steps']:<3} "
              f"{row['bytes_per_token']:9.0f}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    p.add_argument("--codecs", type=lambda s: s.split(","), default=list(CODECS))
    p.add_argument("--runtime", choices=("hf", "mlx"), default="hf")
    p.add_argument("--prefix-tokens", type=int, default=512)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--url", default=None)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fidelity.json")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    if args.smoke:
        args.prefix_tokens, args.steps, args.codecs = 40, 8, ["auto", "fp16", "turbo4"]
    return args


def main(argv) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as tmp:
        server = None
        if args.smoke:
            from bench_ttft import smoke_model

            args.models = [smoke_model(Path(tmp))]
        if args.url is None:
            from tests.support.servers import ProcessServer

            server = ProcessServer(Path(tmp) / "pion").start()
            args.url = f"pion://127.0.0.1:{server.port}"
        try:
            rows = [row for model in args.models for row in bench_model(model, args)]
        finally:
            if server is not None:
                server.stop()
    print_table(rows)
    if not args.smoke:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    exact = [r for r in rows if r["codec"] == "auto" and "refused" not in r]
    bad = [r for r in exact if r["max_abs_logit"] != 0 or r["greedy"] != r["steps"]]
    for row in bad:
        print(f"FAIL: {row['model']} auto is not exact: {row}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main(sys.argv[1:]))
