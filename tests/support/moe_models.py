"""Tiny MoE checkpoints written as real safetensors shards, for the expert-tier tests.

``write_checkpoint`` builds seeded expert weights (numpy only) and writes them in one of the
layouts real checkpoints use: ``per_expert`` (Mixtral's ``block_sparse_moe.experts.<e>.w1``),
``qwen`` (``mlp.experts.<e>.gate_proj``), ``stacked`` (mlx-lm's ``switch_mlp``, optionally
affine-quantized with scales and biases) and ``fused`` (transformers 5's ``experts.gate_up_proj``),
split over several shards. It returns what each expert's parts must be, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from pion.codecs.experts import quantize_affine

PROJ_NAMES = {"per_expert": ("w1", "w3", "w2"), "qwen": ("gate_proj", "up_proj", "down_proj")}


def expert_arrays(rng, hidden: int, inter: int, dtype) -> list[np.ndarray]:
    """gate [I,H], up [I,H], down [H,I]."""
    return [(rng.standard_normal(shape) * 0.1).astype(dtype) for shape in ((inter, hidden), (inter, hidden), (hidden, inter))]


def write_checkpoint(directory: Path, layout: str = "per_expert", n_layers: int = 2, n_experts: int = 4,
                     hidden: int = 32, inter: int = 64, dtype=np.float32, bits: int = 0, group_size: int = 32,
                     shards: int = 2, seed: int = 0, moe_every: int = 1) -> dict:
    """Write a checkpoint; ``{(layer, expert): [(proj, comp, bytes), ...]}`` in FETCH order."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    moe_layers = [layer for layer in range(n_layers) if (layer + 1) % moe_every == 0]
    weights = {(layer, e): expert_arrays(rng, hidden, inter, dtype) for layer in moe_layers for e in range(n_experts)}
    tensors: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.standard_normal((50, hidden)).astype(dtype)}
    expected: dict = {}
    for layer in range(n_layers):
        tensors[f"model.layers.{layer}.input_layernorm.weight"] = np.ones(hidden, dtype=dtype)
        if layer in moe_layers:
            tensors[f"model.layers.{layer}.mlp.gate.weight"] = rng.standard_normal((n_experts, hidden)).astype(dtype)
            _add_layer(tensors, expected, layout, layer, n_experts, weights, bits, group_size)
    _save_shards(directory, tensors, shards)
    config = {"model_type": "mixtral", "num_hidden_layers": n_layers, "hidden_size": hidden, "intermediate_size": inter,
              "num_local_experts": n_experts, "num_experts_per_tok": 2}
    if bits:
        config["quantization"] = {"bits": bits, "group_size": group_size}
    (directory / "config.json").write_text(json.dumps(config))
    return expected


def _add_layer(tensors: dict, expected: dict, layout: str, layer: int, n_experts: int, weights: dict, bits: int,
               group_size: int) -> None:
    if layout in PROJ_NAMES:
        block = "block_sparse_moe" if layout == "per_expert" else "mlp"
        for e in range(n_experts):
            for proj, name in enumerate(PROJ_NAMES[layout]):
                tensors[f"model.layers.{layer}.{block}.experts.{e}.{name}.weight"] = weights[(layer, e)][proj]
            expected[(layer, e)] = [(p, 0, weights[(layer, e)][p].tobytes()) for p in range(3)]
    elif layout == "stacked":
        for proj, name in enumerate(("gate_proj", "up_proj", "down_proj")):
            stack = np.stack([weights[(layer, e)][proj] for e in range(n_experts)])
            if bits:
                comps = [quantize_affine(m, bits, group_size) for m in stack]
                stacks = [np.stack([c[i] for c in comps]) for i in range(3)]
                stacks[1:] = [s.astype(np.float16) for s in stacks[1:]]
            else:
                stacks = [stack]
            for comp, (suffix, data) in enumerate(zip(("weight", "scales", "biases"), stacks, strict=False)):
                tensors[f"model.layers.{layer}.mlp.switch_mlp.{name}.{suffix}"] = data
                for e in range(n_experts):
                    expected.setdefault((layer, e), []).append((proj, comp, data[e].tobytes()))
        for e in range(n_experts):
            expected[(layer, e)].sort(key=lambda t: (t[0], t[1]))
    elif layout == "fused":
        gate_up = np.stack([np.concatenate(weights[(layer, e)][:2]) for e in range(n_experts)])
        down = np.stack([weights[(layer, e)][2] for e in range(n_experts)])
        tensors[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = gate_up
        tensors[f"model.layers.{layer}.mlp.experts.down_proj"] = down
        for e in range(n_experts):
            expected[(layer, e)] = [(p, 0, weights[(layer, e)][p].tobytes()) for p in range(3)]
    else:
        raise ValueError(layout)


def _save_shards(directory: Path, tensors: dict, shards: int) -> None:
    """``shards`` files plus the ``model.safetensors.index.json`` loaders look for."""
    names = sorted(tensors)
    weight_map = {}
    for index in range(shards):
        file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: np.ascontiguousarray(tensors[n]) for n in names[index::shards]}
        if part:
            save_file(part, str(directory / file), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


# -- transformers models (tests/client, benchmarks) ---------------------------------------------

HF_SIZES = dict(vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False)


def hf_moe(arch: str = "mixtral", seed: int = 0, n_experts: int = 8, top_k: int = 2, inter: int = 96, **sizes):
    """A tiny seeded MoE of ``arch`` (mixtral | qwen2_moe | qwen3_moe), float32, eval mode."""
    import torch
    from transformers import (
        MixtralConfig,
        MixtralForCausalLM,
        Qwen2MoeConfig,
        Qwen2MoeForCausalLM,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    base = {**HF_SIZES, **sizes}
    if arch == "mixtral":
        config = MixtralConfig(**base, intermediate_size=inter, num_local_experts=n_experts, num_experts_per_tok=top_k)
        cls = MixtralForCausalLM
    elif arch == "qwen2_moe":
        config = Qwen2MoeConfig(**base, intermediate_size=2 * inter, moe_intermediate_size=inter, num_experts=n_experts,
                                num_experts_per_tok=top_k, shared_expert_intermediate_size=inter, decoder_sparse_step=1)
        cls = Qwen2MoeForCausalLM
    elif arch == "qwen3_moe":
        config = Qwen3MoeConfig(**base, intermediate_size=2 * inter, moe_intermediate_size=inter, num_experts=n_experts,
                                num_experts_per_tok=top_k, norm_topk_prob=True)
        cls = Qwen3MoeForCausalLM
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():  # routers start at zero in some archs: give them seeded weights
        for name, param in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 0.5)
    return model


def save_hf(model, directory: Path, layout: str = "original", shard_kb: int = 200) -> None:
    """Write ``model`` as shards: ``original`` (transformers' own save: per-expert names),
    ``fused`` (transformers 5's stacked names as they are), or ``stacked-q4`` (mlx-lm style
    ``switch_mlp`` experts, 4-bit affine, dense parts float)."""
    if layout == "original":
        model.save_pretrained(str(directory), max_shard_size=f"{shard_kb}KB")
        return
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(str(directory))
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if layout == "stacked-q4":
        state = _quantized_switch_mlp(state, model.config)
    elif layout != "fused":
        raise ValueError(layout)
    _save_shards(directory, state, 3)


def _quantized_switch_mlp(state: dict, config, bits: int = 4, group_size: int = 32) -> dict:
    out = {}
    for name, array in state.items():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            prefix = name.rsplit(".experts.", 1)[0] + ".switch_mlp."
            halves = np.split(array, 2, axis=1) if name.endswith("gate_up_proj") else [array]
            names = ("gate_proj", "up_proj") if len(halves) == 2 else ("down_proj",)
            for proj, stack in zip(names, halves, strict=True):
                comps = [quantize_affine(m, bits, group_size) for m in stack]
                for suffix, i in (("weight", 0), ("scales", 1), ("biases", 2)):
                    data = np.stack([c[i] for c in comps])
                    out[prefix + f"{proj}.{suffix}"] = data if i == 0 else data.astype(np.float16)
        else:
            out[name] = array
    return out


def dequantized_copy(model, bits: int = 4, group_size: int = 32):
    """``model`` with every expert replaced by its 4-bit round trip (what a q4 checkpoint holds),
    scales and biases rounded through float16 as the checkpoint stores them."""
    import copy

    import torch

    from pion.codecs.experts import dequantize_affine

    twin = copy.deepcopy(model)
    with torch.no_grad():
        for name, param in twin.named_parameters():
            if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                for e in range(param.shape[0]):
                    codes, scales, biases = quantize_affine(param[e].numpy(), bits, group_size)
                    back = dequantize_affine(codes, scales.astype(np.float16), biases.astype(np.float16), bits,
                                             group_size)
                    param[e].copy_(torch.from_numpy(back))
    return twin
