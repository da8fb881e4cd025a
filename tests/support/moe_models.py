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
    names = sorted(tensors)
    for index in range(shards):
        part = {n: np.ascontiguousarray(tensors[n]) for n in names[index::shards]}
        if part:
            save_file(part, str(directory / f"model-{index + 1:05d}-of-{shards:05d}.safetensors"))
