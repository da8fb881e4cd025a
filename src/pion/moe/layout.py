"""Which tensors of a checkpoint are experts, and where each expert's bytes lie.

Real MoE checkpoints store experts in three ways, and one model uses one of them:

- **per expert** (Mixtral, Qwen2/Qwen3-MoE as published): ``…layers.<L>.<block>.experts.<E>.<proj>.
  <comp>`` with proj ``w1|w3|w2`` (Mixtral's gate, up, down) or ``gate_proj|up_proj|down_proj``;
- **stacked** (mlx-lm's ``switch_mlp``, and stacked exports): ``…layers.<L>.<block>.
  (switch_mlp|experts).<proj>.<comp>`` with the expert as the leading dimension;
- **fused** (transformers 5's in-memory form): ``…layers.<L>.<block>.experts.gate_up_proj``
  ``[E, 2I, H]`` (gate rows then up rows) and ``…experts.down_proj`` ``[E, H, I]``.

comp is ``weight``, or for affine-quantized checkpoints ``weight`` (packed uint32 codes),
``scales`` and ``biases``; they are served as stored, never converted. A stacked or fused
expert is the contiguous slice ``[e]`` of its tensor (and gate/up the two halves of a fused
slice), so every part of every expert is one byte range of one shard: a zero-copy view, or one
``pread``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from pion.moe.shards import ITEMSIZE, ShardError, Shards, Tensor

_LAYER = r"^(?:.*\.)?layers\.(?P<layer>\d+)\.(?P<block>[A-Za-z0-9_]+)\."
PER_EXPERT = re.compile(_LAYER + r"experts\.(?P<expert>\d+)\.(?P<proj>w1|w2|w3|gate_proj|up_proj|down_proj)\."
                        r"(?P<comp>weight|scales|biases)$")
STACKED = re.compile(_LAYER + r"(?:switch_mlp|experts)\.(?P<proj>gate_proj|up_proj|down_proj)\.(?P<comp>weight|scales|biases)$")
FUSED = re.compile(_LAYER + r"experts\.(?P<proj>gate_up_proj|down_proj)$")
PROJ_INDEX = {"w1": 0, "gate_proj": 0, "w3": 1, "up_proj": 1, "w2": 2, "down_proj": 2}
COMP_INDEX = {"weight": 0, "scales": 1, "biases": 2}
MAX_LAYERS = 65536
MAX_EXPERTS = 65536


@dataclass(frozen=True, slots=True)
class Part:
    """One (projection, component) of one expert: a byte range of one shard."""

    proj: int
    comp: int
    shard: int
    start: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


@dataclass
class ModelLayout:
    """What ``MOE.EXPERT.INFO`` reports, and every expert's parts."""

    model_id: str
    directory: Path
    storage: str  # per_expert | stacked | fused
    n_layers: int
    moe_layers: list[int]
    n_experts: int
    top_k: int
    hidden_size: int
    moe_intermediate: int
    bits: int
    group_size: int
    expert_tensors: int
    dense_tensors: int
    parts: dict[tuple[int, int], tuple[Part, ...]] = field(repr=False)

    @property
    def expert_bytes(self) -> int:
        return sum(p.nbytes for p in next(iter(self.parts.values())))

    def part_specs(self) -> list[dict]:
        return [{"proj": p.proj, "comp": p.comp, "dtype": p.dtype, "shape": list(p.shape), "nbytes": p.nbytes}
                for p in next(iter(self.parts.values()))]


def read_layout(model_id: str, shards: Shards) -> ModelLayout:
    """Classify a directory's tensors; ShardError if its experts are missing or inconsistent."""
    config = read_config(shards.directory)
    found: dict[tuple[int, int], dict[tuple[int, int], Part]] = {}
    storages: set[str] = set()
    expert_tensors = 0
    for tensor in shards.tensors.values():
        storage = _add_tensor(tensor, found)
        if storage:
            storages.add(storage)
            expert_tensors += 1
    if not found:
        raise ShardError(f"{shards.directory.name}: no expert tensors found (expected names like "
                         "'model.layers.0.mlp.experts.0.gate_proj.weight' or '...switch_mlp.gate_proj.weight')")
    if len(storages) > 1:
        raise ShardError(f"{shards.directory.name}: experts are stored in mixed layouts ({', '.join(sorted(storages))})")
    layers = sorted({layer for layer, _ in found})
    n_experts = 1 + max(expert for _, expert in found)
    parts = _check_complete(found, layers, n_experts, shards.directory.name)
    declared = _first(config, "num_local_experts", "num_experts", "n_routed_experts")
    if declared and declared != n_experts:
        raise ShardError(f"{shards.directory.name}: config.json declares {declared} experts, the shards hold {n_experts}")
    sample = next(iter(parts.values()))
    hidden = _first(config, "hidden_size") or _guess_hidden(sample)
    bits, group = _quantization(config, sample, hidden)
    return ModelLayout(
        model_id=model_id, directory=shards.directory, storage=storages.pop(),
        n_layers=max(_first(config, "num_hidden_layers") or 0, layers[-1] + 1), moe_layers=layers,
        n_experts=n_experts, top_k=_first(config, "num_experts_per_tok", "moe_top_k", "top_k") or 0,
        hidden_size=hidden, moe_intermediate=_first(config, "moe_intermediate_size", "intermediate_size") or 0,
        bits=bits, group_size=group, expert_tensors=expert_tensors,
        dense_tensors=len(shards.tensors) - expert_tensors, parts=parts,
    )


def _add_tensor(t: Tensor, found: dict) -> str | None:
    """File one tensor's expert parts under ``found``; the layout name, or None for a dense tensor."""
    if m := PER_EXPERT.match(t.name):
        layer, expert = _bounded(m["layer"], MAX_LAYERS), _bounded(m["expert"], MAX_EXPERTS)
        _put(found, layer, expert, Part(PROJ_INDEX[m["proj"]], COMP_INDEX[m["comp"]], t.shard, t.start, t.nbytes,
                                        t.dtype, t.shape), t.name)
        return "per_expert"
    if m := STACKED.match(t.name):
        for expert, (start, size, shape) in enumerate(_slices(t, 1)):
            _put(found, _bounded(m["layer"], MAX_LAYERS), expert,
                 Part(PROJ_INDEX[m["proj"]], COMP_INDEX[m["comp"]], t.shard, start, size, t.dtype, shape), t.name)
        return "stacked"
    if m := FUSED.match(t.name):
        halves = 2 if m["proj"] == "gate_up_proj" else 1
        if halves == 2 and (len(t.shape) < 2 or t.shape[1] % 2):
            raise ShardError(f"{t.name}: a fused gate_up tensor needs an even second dimension, got {list(t.shape)}")
        for index, (start, size, shape) in enumerate(_slices(t, halves)):
            expert, half = divmod(index, halves)
            proj = half if halves == 2 else 2
            _put(found, _bounded(m["layer"], MAX_LAYERS), expert, Part(proj, 0, t.shard, start, size, t.dtype, shape),
                 t.name)
        return "fused"
    return None


def _slices(t: Tensor, pieces: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """``(start, nbytes, shape)`` of each expert (each split in ``pieces`` along its first axis)."""
    if len(t.shape) < 2 or t.shape[0] == 0 or t.shape[0] > MAX_EXPERTS:
        raise ShardError(f"{t.name}: a stacked expert tensor needs a leading expert dimension, got {list(t.shape)}")
    count = t.shape[0] * pieces
    if t.nbytes % count:
        raise ShardError(f"{t.name}: {t.nbytes} bytes do not split into {count} equal slices")
    size = t.nbytes // count
    inner = t.shape[1:]
    shape = (inner[0] // pieces, *inner[1:]) if pieces > 1 else inner
    return [(t.start + i * size, size, tuple(shape)) for i in range(count)]


def _put(found: dict, layer: int, expert: int, part: Part, name: str) -> None:
    slot = found.setdefault((layer, expert), {})
    if (part.proj, part.comp) in slot:
        raise ShardError(f"{name}: layer {layer} expert {expert} has this projection twice")
    slot[(part.proj, part.comp)] = part


def _check_complete(found: dict, layers: list[int], n_experts: int, where: str) -> dict:
    """Every MoE layer has experts 0..n-1, each with the same parts, dtypes and shapes."""
    first = found[(layers[0], 0)] if (layers[0], 0) in found else None
    if first is None:
        raise ShardError(f"{where}: layer {layers[0]} has no expert 0")
    shape_of = {key: (p.dtype, p.shape, p.nbytes) for key, p in first.items()}
    projections = {proj for proj, _ in shape_of}
    if any((proj, 0) not in shape_of for proj in projections):
        raise ShardError(f"{where}: an expert projection has scales or biases but no weight")
    out = {}
    for layer in layers:
        for expert in range(n_experts):
            slot = found.get((layer, expert))
            if slot is None:
                raise ShardError(f"{where}: layer {layer} has no expert {expert} (experts must be 0..{n_experts - 1})")
            if {key: (p.dtype, p.shape, p.nbytes) for key, p in slot.items()} != shape_of:
                raise ShardError(f"{where}: layer {layer} expert {expert} differs in its parts, dtypes or shapes "
                                 f"from layer {layers[0]} expert 0")
            out[(layer, expert)] = tuple(slot[key] for key in sorted(slot))
    return out


def _quantization(config: dict, sample: tuple[Part, ...], hidden: int) -> tuple[int, int]:
    """``(bits, group_size)``: from config.json's quantization block, else from the shapes."""
    weight = next(p for p in sample if p.comp == 0)
    scales = next((p for p in sample if p.comp == 1 and p.proj == weight.proj), None)
    if scales is None:
        return 8 * ITEMSIZE[weight.dtype], 0
    quant = config.get("quantization") or config.get("quantization_config") or {}
    bits, group = quant.get("bits"), quant.get("group_size")
    if isinstance(bits, int) and isinstance(group, int):
        return bits, group
    if weight.proj != 2 and hidden and weight.shape and scales.shape:
        return weight.shape[-1] * 32 // hidden, hidden // max(1, scales.shape[-1])
    return 0, 0


def _guess_hidden(sample: tuple[Part, ...]) -> int:
    down = next((p for p in sample if p.proj == 2 and p.comp == 0), None)
    return down.shape[0] if down is not None and down.shape else 0


def read_config(directory: Path) -> dict:
    """config.json's fields (a multimodal config's ``text_config`` merged in), or {} without one."""
    path = directory / "config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(f"{directory.name}/config.json: {exc}") from None
    if not isinstance(data, dict):
        raise ShardError(f"{directory.name}/config.json is not a JSON object")
    text = data.get("text_config")
    return {**data, **text} if isinstance(text, dict) else data


def _first(config: dict, *names: str) -> int:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _bounded(text: str, limit: int) -> int:
    value = int(text)
    if value >= limit:
        raise ShardError(f"index {value} is too large (limit {limit})")
    return value

