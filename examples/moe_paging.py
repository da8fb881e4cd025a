"""MoE expert paging: a transformers Mixtral whose experts live in Pion, paged in as tokens route.

Prerequisites: the ``[hf]`` extra (torch, transformers, safetensors). The model is a seeded
random Mixtral written as real safetensors shards (``--model-dir`` takes your own checkpoint
directory instead, which is then served from a copy); 20-30 s on two cores for the default model
(6 layers, 32 experts) and for ``--smoke`` (3 layers, 8 experts) alike: most of it is importing
torch and transformers.

    python examples/moe_paging.py                      # starts a throwaway Pion server
    python examples/moe_paging.py --smoke
    python examples/moe_paging.py --model-dir /path/to/a/mixtral-or-qwen-moe --budget 0.25

The server is started with ``--moe-cache DIR`` (the directory its models live in). The script
generates greedy tokens with the whole model in memory, then loads it again with
``load_paged_moe(dir, url, cache_mib=...)``: only the dense part is loaded here, and a client
budget holding a quarter of the experts. The paged model must generate the same tokens; its
hits, misses, evictions and bytes fetched are printed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import pion_server  # noqa: E402

PROMPT = [[5, 17, 42, 99, 7, 3, 250, 11]]


def write_model(directory: Path, smoke: bool) -> None:
    """A seeded Mixtral saved as shards (transformers' own ``save_pretrained``)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    layers, experts, inter = (3, 8, 96) if smoke else (6, 32, 256)
    config = MixtralConfig(vocab_size=300, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-5,
                           tie_word_embeddings=False, intermediate_size=inter, num_local_experts=experts,
                           num_experts_per_tok=2)
    torch.manual_seed(0)
    model = MixtralForCausalLM(config).eval()
    with torch.no_grad():  # spread the routing: seeded router weights
        for name, param in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 0.5)
    model.save_pretrained(str(directory), max_shard_size="200KB" if smoke else "2MB")


def greedy(model, steps: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor(PROMPT), max_new_tokens=steps, do_sample=False, pad_token_id=0)
    return out[0, len(PROMPT[0]):].tolist()


def expert_bytes(directory: Path) -> tuple[int, int]:
    """``(bytes of one expert, experts in all)`` from the checkpoint's config."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(directory), local_files_only=True)
    experts = getattr(config, "num_local_experts", None) or config.num_experts
    inter = getattr(config, "moe_intermediate_size", None) or config.intermediate_size
    return 3 * config.hidden_size * inter * 4, experts * config.num_hidden_layers


def run(url: str, model_dir: Path, budget: float, steps: int) -> int:
    from transformers import AutoModelForCausalLM

    from pion.client.adapters.moe_transformers import load_paged_moe

    want = greedy(AutoModelForCausalLM.from_pretrained(str(model_dir)).eval(), steps)
    one, total = expert_bytes(model_dir)
    slots = max(2, int(total * budget))
    print(f"model {model_dir.name}: {total} experts of {one / 1024:.0f} KiB; client budget {slots} experts")
    paged = load_paged_moe(model_dir, url, cache_mib=slots * one / 2**20)
    try:
        got = greedy(paged.model, steps)
        stats = paged.stats()
    finally:
        paged.close()
    print(f"in memory: {want}")
    print(f"paged    : {got}")
    print(f"paged stats: hits {stats['hits']}, misses {stats['misses']}, evictions {stats['evictions']}, "
          f"lane {stats['lane']}, resident experts {stats['resident_experts']}, "
          f"cache {stats['cache_bytes']} of {stats['cache_budget']} bytes")
    same = got == want
    print(f"same tokens: {same}")
    return 0 if same and stats["misses"] > 0 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="your own MoE checkpoint (config.json + safetensors shards)")
    parser.add_argument("--budget", type=float, default=0.25, help="share of the experts the client holds")
    parser.add_argument("--steps", type=int, default=12, help="tokens to generate")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, a few seconds")
    args = parser.parse_args(argv)
    models = Path(tempfile.mkdtemp(prefix="pion-moe-models-"))
    try:
        target = models / (Path(args.model_dir).name if args.model_dir else "mixtral-seeded")
        if args.model_dir:
            shutil.copytree(args.model_dir, target)
        else:
            write_model(target, args.smoke)
        with pion_server("--moe-cache", str(models), "--moe-cache-mib", "256", "--appendonly", "no") as url:
            return run(url, target, args.budget, 6 if args.smoke else args.steps)
    finally:
        shutil.rmtree(models, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
