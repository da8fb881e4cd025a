"""The dense part of a transformers MoE model, built without ever allocating its experts.

Why not ``from_pretrained``: it allocates (and initialises) every expert before loading, which
is what a model whose experts do not fit cannot afford. Here the model is built on the ``meta``
device, its experts modules are swapped for paged ones (no parameters), and only then is it
materialised on the CPU and filled from the checkpoint's *dense* tensors (read one by one with
safetensors; the expert tensors are never read, and may be absent: a dense-only copy of the
checkpoint is enough on the client). Every parameter must be filled: a missing one fails the
load rather than running with garbage. Buffers that are not in checkpoints (rotary
frequencies) are rebuilt by constructing their module again.

Checkpoint names follow the original releases (Mixtral's ``block_sparse_moe``), transformers 5's
names, or mlx-lm's; an mlx affine-quantized dense weight (``weight`` codes + ``scales`` +
``biases``) is dequantized to the model's dtype.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np

EXPERT_NAME = re.compile(r"(?:^|\.)layers\.\d+\.[A-Za-z0-9_]+\.(?:experts\.\d+\.|switch_mlp\.|experts\.(?:gate_up_proj|"
                         r"down_proj|gate_proj|up_proj)(?:$|\.))")
RENAMES = ((".block_sparse_moe.", ".mlp."),)


def is_expert_tensor(name: str) -> bool:
    return EXPERT_NAME.search(name) is not None


def expert_modules(model) -> list[tuple[str, int, object]]:
    """``(module name, layer index, module)`` of every stacked-experts module (transformers 5's
    ``*Experts``: 3-D ``gate_up_proj`` and ``down_proj``)."""
    out = []
    for name, module in model.named_modules():
        gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
        if getattr(gate_up, "ndim", 0) == 3 and getattr(down, "ndim", 0) == 3 and hasattr(module, "num_experts"):
            found = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
            if found is None:
                raise ValueError(f"experts module {name} is not inside a numbered layer")
            out.append((name, int(found.group(1)), module))
    return out


def build_on_meta(config, dtype):
    """The model with every tensor on ``meta`` (nothing allocated)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def replace_module(model, name: str, new) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def materialise(model, model_dir: Path, quant: dict | None) -> list[str]:
    """Allocate the (expert-free) model on the CPU and fill it from the dense tensors; returns
    the checkpoint's unused dense tensor names. Raises ValueError naming any unfilled parameter."""
    import torch

    model.to_empty(device="cpu")
    targets = dict(model.state_dict(keep_vars=True))
    filled: set[str] = set()
    unused: list[str] = []
    for name, array in dense_tensors(model_dir, quant):
        target = _target_name(name, targets)
        if target is None:
            unused.append(name)
            continue
        tensor = targets[target]
        if tuple(tensor.shape) != tuple(array.shape):
            raise ValueError(f"{name}: checkpoint shape {list(array.shape)} != model shape {list(tensor.shape)}")
        with torch.no_grad():
            tensor.copy_(to_torch(array))
        filled.add(target)
    _tie_embeddings(model, filled)
    missing = [n for n in targets if n not in filled]
    if missing:
        raise ValueError(f"{model_dir}: no checkpoint tensor for {len(missing)} dense parameters, e.g. {missing[:4]}")
    rebuild_buffers(model)
    return unused


def _target_name(name: str, targets: dict) -> str | None:
    if name in targets:
        return name
    for old, new in RENAMES:
        renamed = name.replace(old, new)
        if renamed in targets:
            return renamed
    return None


def _tie_embeddings(model, filled: set[str]) -> None:
    if not getattr(model.config, "tie_word_embeddings", False):
        return
    output, inputs = model.get_output_embeddings(), model.get_input_embeddings()
    if output is not None and inputs is not None:
        output.weight = inputs.weight
        for name, param in model.named_parameters(remove_duplicate=False):
            if param is inputs.weight:
                filled.add(name)


def dense_tensors(model_dir: Path, quant: dict | None):
    """``(name, numpy array)`` of each dense tensor of the checkpoint's shards, one at a time."""
    from safetensors import safe_open

    shards = sorted(model_dir.glob("*.safetensors"))
    if not shards:
        raise ValueError(f"{model_dir} holds no .safetensors files")
    for path in shards:
        with safe_open(str(path), framework="np") as handle:
            names = [n for n in handle.keys() if not is_expert_tensor(n)]
            for name in names:
                if name.endswith((".scales", ".biases")) and f"{name.rsplit('.', 1)[0]}.weight" in names:
                    continue
                array = handle.get_tensor(name)
                base = name.rsplit(".", 1)[0]
                if array.dtype == np.uint32 and f"{base}.scales" in names:
                    array = _dequantize(handle, base, array, quant)
                yield name, array


def _dequantize(handle, base: str, codes, quant: dict | None):
    from pion.codecs.experts import dequantize_affine

    if not quant:
        raise ValueError(f"{base} is quantized but config.json has no quantization block")
    return dequantize_affine(codes, handle.get_tensor(f"{base}.scales"), handle.get_tensor(f"{base}.biases"),
                             quant["bits"], quant["group_size"])


def to_torch(array: np.ndarray):
    """A torch tensor viewing ``array`` (bfloat16 through its bits; read-only views allowed)."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        if array.dtype.name == "bfloat16":
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)


def rebuild_buffers(model) -> None:
    """Non-persistent buffers (rotary frequencies) are not in checkpoints: construct their
    modules again on the CPU and take their buffers."""
    for name, module in model.named_modules():
        if not getattr(module, "_non_persistent_buffers_set", None):
            continue
        config = getattr(module, "config", None)
        if config is None:
            raise ValueError(f"cannot rebuild the buffers of {name} ({type(module).__name__}): it keeps no config")
        fresh = type(module)(config=config)
        for buffer in module._non_persistent_buffers_set:
            setattr(module, buffer, getattr(fresh, buffer).to(getattr(module, buffer).dtype))
