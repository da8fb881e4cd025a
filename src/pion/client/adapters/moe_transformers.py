"""transformers MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE, ...) with their experts left on the server.

``load_paged_moe(model_dir, url)`` builds the model with only its dense part in the process
(``moe_weights``), and replaces each layer's experts module with ``PagedExperts``: the smallest
hook there is, one module whose ``forward(hidden_states, top_k_index, top_k_weights)`` has the
signature of transformers 5's ``*Experts`` modules. It asks the client's ``ExpertCache`` for the
experts the router picked (fetching what is not resident from the server's ``MOE.EXPERT.*``
tier), then runs **the model's own experts forward** on them: the same function the model would
call (eager, or the ``grouped_mm`` kernel, whichever ``config._experts_implementation`` names),
given a stand-in ``self`` whose weights are the client's ``ExpertArena`` (resident experts in
the kernels' ``[slots, 2I, H]`` / ``[slots, H, I]`` layout; the routes renumbered to slots, so a
forward whose experts are resident copies nothing; eager indexes it per expert id). The router,
attention, norms and everything else are the model's own code, untouched, so a paged model
computes what the all-in-memory one computes, token for token.

Pruned experts (``MOE.EXPERT.PRUNE`` on the server, read from INFO at load): the layer's router
gets a forward hook that re-applies its own formula with those experts excluded.

Prefetch: a read-only forward pre-hook on every decoder layer keeps its input (the residual
stream). When layer L's experts are asked for, the *next* MoE layer's router is applied to that
input (through that layer's own post-attention norm), and its top-k are queued for the
background fetch threads, so they load while layer L and the next attention compute
(mixtral-offloading's speculative prefetch). Decode only: a prompt routes to nearly every expert.
Each prediction is scored when its layer comes; while the recent accuracy is under
``MIN_ACCURACY`` the predictions go on but nothing is fetched (a wrong prefetch costs a fetch
and may evict a needed expert).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MethodType

import torch
from torch import nn

from pion.client.adapters.moe_weights import (
    build_on_meta,
    expert_modules,
    materialise,
    replace_module,
    to_torch,
)
from pion.client.client import DEFAULT_URL, PionClient
from pion.client.moe.cache import ExpertCache
from pion.client.moe.source import ExpertSource
from pion.codecs.experts import dequantize_affine

PREFETCH_MAX_TOKENS = 4
#: prefetch only while the predictions are this often right (after WARMUP scored layers): a
#: wrong prefetch costs a fetch and may evict an expert that was needed
MIN_ACCURACY = 0.3
WARMUP = 24
MIB = 1024 * 1024


@dataclass
class ExpertWeights:
    """One expert as fetched: ``gate``/``up`` ``[I, H]`` and ``down`` ``[H, I]`` (maybe read-only views)."""

    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.gate, self.up, self.down))

    def gate_up(self) -> torch.Tensor:
        return torch.cat([self.gate, self.up])


def to_weights(parts: dict, dtype: torch.dtype, bits: int, group_size: int) -> ExpertWeights:
    """An expert's parts (numpy views from the source) as torch weights in the model's dtype."""
    if (0, 1) in parts:  # affine-quantized: codes, scales, biases per projection
        dense = [dequantize_affine(parts[(p, 0)], parts[(p, 1)], parts[(p, 2)], bits, group_size) for p in range(3)]
        return ExpertWeights(*(torch.from_numpy(d).to(dtype) for d in dense))
    return ExpertWeights(*(to_torch(parts[(p, 0)]).to(dtype) for p in range(3)))


class ExpertArena:
    """The client's resident experts, in the layout the model's kernels take: ``gate_up [S, 2I, H]``
    and ``down [S, H, I]``, one slot an expert. An admitted expert is copied in once; a forward
    whose experts are all resident then runs on the arena itself, copying nothing."""

    def __init__(self, slots: int, hidden: int, inter: int, dtype: torch.dtype) -> None:
        self.gate_up = torch.empty(slots, 2 * inter, hidden, dtype=dtype)
        self.down = torch.empty(slots, hidden, inter, dtype=dtype)
        self.inter = inter
        self.free = list(range(slots - 1, -1, -1))

    def store(self, weights: ExpertWeights) -> int:
        slot = self.free.pop()
        self.gate_up[slot, :self.inter].copy_(weights.gate)
        self.gate_up[slot, self.inter:].copy_(weights.up)
        self.down[slot].copy_(weights.down)
        return slot

    def release(self, slot: int) -> None:
        self.free.append(slot)


class _Routed:
    """The stand-in ``self`` the model's experts forward runs on: the experts module's settings,
    with only the routed experts' weights."""

    def __init__(self, experts: PagedExperts, gate_up, down, num_experts: int) -> None:
        self.__dict__.update(experts.settings)
        self.gate_up_proj, self.down_proj, self.num_experts = gate_up, down, num_experts
        self._apply_gate = MethodType(experts.apply_gate, self)


class PagedExperts(nn.Module):
    """Stands in for a layer's ``*Experts`` module; holds no weights."""

    def __init__(self, original: nn.Module, ordinal: int, owner: PagedMoE) -> None:
        super().__init__()
        self.forward_of = type(original).forward  # the model's dispatching forward (eager/grouped_mm/...)
        self.settings = {k: v for k, v in vars(original).items() if not k.startswith("_") and k not in
                         ("training", "gate_up_proj", "down_proj")}
        self.settings.update(_is_expert_parallel=getattr(original, "_is_expert_parallel", False))
        self.act_fn = original.act_fn
        self.settings["act_fn"] = original.act_fn
        self.apply_gate = type(original)._apply_gate
        self.num_experts = original.num_experts
        self.ordinal = ordinal
        self.owner = owner

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        owner = self.owner
        if owner.prefetch and hidden_states.shape[0] <= PREFETCH_MAX_TOKENS:
            owner.predict_next(self.ordinal)
        wanted = [e for e in torch.unique(top_k_index).tolist() if e < self.num_experts]
        if not wanted:
            return torch.zeros_like(hidden_states)
        owner.score_prediction(self.ordinal, wanted)
        got = owner.cache.get_many(self.ordinal, wanted)
        try:
            return self._compute(hidden_states, top_k_index, top_k_weights, wanted, got)
        finally:
            owner.cache.done(self.ordinal, wanted)

    def _compute(self, hidden_states, top_k_index, top_k_weights, wanted: list[int], got: list):
        arena = self.owner.arena
        if self.settings["config"]._experts_implementation == "eager":
            gate_up: list = [None] * self.num_experts
            down: list = [None] * self.num_experts
            for expert, value in zip(wanted, got, strict=True):
                resident = isinstance(value, int)
                gate_up[expert] = arena.gate_up[value] if resident else value.gate_up()
                down[expert] = arena.down[value] if resident else value.down
            routed = _Routed(self, gate_up, down, self.num_experts)
            return self.forward_of(routed, hidden_states, top_k_index, top_k_weights)
        if all(isinstance(v, int) for v in got):  # all resident: run on the arena, route to slots
            slots, stacked_gate_up, stacked_down = got, arena.gate_up, arena.down
        else:  # some used once: stack the routed experts (a copy, only on this path)
            slots = list(range(len(got)))
            stacked_gate_up = torch.stack([arena.gate_up[v] if isinstance(v, int) else v.gate_up() for v in got])
            stacked_down = torch.stack([arena.down[v] if isinstance(v, int) else v.down for v in got])
        table = torch.full((self.num_experts + 1,), stacked_gate_up.shape[0], dtype=top_k_index.dtype)
        table[torch.tensor(wanted, dtype=torch.long)] = torch.tensor(slots, dtype=top_k_index.dtype)
        routed = _Routed(self, stacked_gate_up, stacked_down, stacked_gate_up.shape[0])
        return self.forward_of(routed, hidden_states, table[top_k_index.clamp(max=self.num_experts)], top_k_weights)


class PagedMoE:
    """A transformers MoE model whose experts are paged from a Pion server.

    ``model`` is the ``*ForCausalLM`` (use ``generate`` as usual); ``stats()`` reports the
    client cache's hits, misses, bytes fetched, stall and prefetch counts.
    """

    def __init__(self, model, source: ExpertSource, cache: ExpertCache, arena: ExpertArena, moe_layers: list[int],
                 prefetch: bool) -> None:
        self.model = model
        self.source = source
        self.cache = cache
        self.arena = arena
        self.moe_layers = moe_layers
        self.prefetch = prefetch
        self.inputs: dict[int, torch.Tensor] = {}
        self.routers: list[tuple[nn.Module, nn.Module]] = []
        self.predicted = 0
        #: ordinal -> the experts predicted for its next visit; scored when it comes
        self.predictions: dict[int, set[int]] = {}
        self.predicted_right = 0
        self.predicted_total = 0
        #: recent accuracy of the predictions (exponential average over scored layers)
        self.accuracy = 1.0
        self.scored = 0
        self.gated = 0

    def predict_next(self, ordinal: int) -> None:
        """Queue the next MoE layer's likely experts: its router on this layer's input."""
        nxt = ordinal + 1
        if nxt >= len(self.moe_layers) or not self.routers:
            return
        hidden = self.inputs.get(self.moe_layers[ordinal])
        if hidden is None:
            return
        norm, router = self.routers[nxt]
        with torch.no_grad():
            flat = norm(hidden).reshape(-1, hidden.shape[-1])
            indices = router(flat)[-1]
        guess = torch.unique(indices).tolist()
        self.predictions[nxt] = set(guess)
        if self.scored >= WARMUP and self.accuracy < MIN_ACCURACY:
            self.gated += 1  # keep predicting (to notice when it gets better), fetch nothing
            return
        self.predicted += self.cache.prefetch(nxt, guess)

    def score_prediction(self, ordinal: int, wanted: list[int]) -> None:
        """How many of the experts a layer wanted had been predicted for it (prefetch accuracy)."""
        guess = self.predictions.pop(ordinal, None)
        if guess is not None:
            right = len(guess.intersection(wanted))
            self.predicted_right += right
            self.predicted_total += len(wanted)
            self.scored += 1
            self.accuracy = 0.9 * self.accuracy + 0.1 * right / len(wanted)

    def stats(self) -> dict:
        out = self.cache.stats.as_dict()
        accuracy = self.predicted_right / self.predicted_total if self.predicted_total else 0.0
        out.update(lane=self.source.lane, predicted=self.predicted, prediction_accuracy=accuracy,
                   prefetch_gated=self.gated,
                   cache_bytes=self.cache.used,
                   cache_budget=self.cache.budget, resident_experts=len(self.cache.slots))
        return out

    def reset_stats(self) -> None:
        self.cache.reset_stats()
        self.predicted = self.predicted_right = self.predicted_total = self.gated = 0

    def save_trace(self, path: str | Path) -> int:
        """Write the demand trace (``record_trace=True``) as a ``.npy`` of keys ``ordinal *
        n_experts + expert``, the form ``pion.paging.replay`` replays; the number of accesses."""
        import numpy as np

        n_experts = self.source.info["experts"]
        keys = np.array([o * n_experts + e for o, e in self.cache.stats.trace], dtype=np.int64)
        np.save(str(path), keys)
        return len(keys)

    def close(self) -> None:
        self.cache.close()
        self.source.client.close()


def load_paged_moe(model_dir: str | Path, url: str = DEFAULT_URL, *, server_dir: str | None = None,
                   cache_mib: float = 256, prefetch: bool = True, lane: str = "auto", namespace: str | None = None,
                   dtype=None, experts_implementation: str | None = None, policy: str = "nextuse",
                   threads: int = 2, record_trace: bool = False) -> PagedMoE:
    """Load ``model_dir``'s dense part here and page its experts from the server at ``url``.

    Args:
        model_dir: the checkpoint (config.json and safetensors shards) on this machine; only its
            dense tensors are read, so a copy without the expert tensors is enough.
        url: the Pion server (``pion://host:1974``); started with ``--moe-cache DIR``.
        server_dir: the model's directory under the server's DIR (default: ``model_dir``'s name).
        cache_mib: the client's expert budget in MiB (the server keeps its own): that many
            experts' worth of slots, allocated at once in the model's dtype.
        prefetch: queue the next layer's predicted experts during decode.
        lane: ``auto`` (map the server's files when on this host), ``local`` or ``resp``.
        namespace: the histogram namespace fetches count in (``NS``).
        dtype: the model's dtype (default: the checkpoint's, as transformers picks it).
        experts_implementation: transformers' experts kernel (``eager``, ``grouped_mm``, ...).

    Raises:
        ValueError: the checkpoint and the server's manifest disagree, or a dense tensor is missing.
    """
    from transformers import AutoConfig

    model_dir = Path(model_dir)
    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    if experts_implementation is not None:
        config._experts_implementation = experts_implementation
    torch_dtype = dtype if dtype is not None else (config.dtype if isinstance(config.dtype, torch.dtype) else torch.float32)
    client = PionClient(url)
    source = ExpertSource.load(client, server_dir or model_dir.name, namespace=namespace, lane=lane)
    model = build_on_meta(config, torch_dtype)
    found = expert_modules(model)
    layers = [layer for _, layer, _ in found]
    _check_manifest(source.info, found, layers)
    bits, group = source.info["bits"], source.info["group_size"]
    module = found[0][2]
    hidden, inter = module.down_proj.shape[1], module.down_proj.shape[2]
    expert_bytes = 3 * hidden * inter * torch.empty((), dtype=torch_dtype).element_size()
    slots = int(cache_mib * MIB) // expert_bytes
    arena = ExpertArena(slots, hidden, inter, torch_dtype)
    cache = ExpertCache(source, layers, slots * expert_bytes, lambda parts: to_weights(parts, torch_dtype, bits, group),
                        lambda w: w.nbytes, top_k=source.info["top_k"] or 1, policy=policy, threads=threads,
                        record_trace=record_trace, store=arena.store, release=arena.release)
    paged = PagedMoE(model, source, cache, arena, layers, prefetch)
    for ordinal, (name, _, module) in enumerate(found):
        replace_module(model, name, PagedExperts(module, ordinal, paged))
    quant = source.info.get("quantization") or ({"bits": bits, "group_size": group} if group else None)
    materialise(model, model_dir, quant)
    model.eval()
    _hook_layers(paged, layers)
    return paged


def _check_manifest(info: dict, found: list, layers: list[int]) -> None:
    if not found:
        raise ValueError("this model has no stacked experts modules (transformers 5 MoE architectures)")
    if info["moe_layers"] != layers:
        raise ValueError(f"the server's model has MoE layers {info['moe_layers']}, this config {layers}")
    module = found[0][2]
    if info["experts"] != module.num_experts:
        raise ValueError(f"the server's model has {info['experts']} experts a layer, this config {module.num_experts}")
    shapes = {(p["proj"], p["comp"]): p["shape"] for p in info["parts"]}
    inter, hidden = module.down_proj.shape[2], module.down_proj.shape[1]
    if (0, 1) not in shapes and (shapes.get((0, 0)) != [inter, hidden] or shapes.get((2, 0)) != [hidden, inter]):
        raise ValueError(f"the server's experts are {shapes}, this config wants gate/up [{inter}, {hidden}] and "
                         f"down [{hidden}, {inter}]")


def route_around(router: nn.Module, pruned: list[int]):
    """A forward hook for a router that never picks ``pruned`` experts: the router's own
    formula (softmax over the experts left, top-k, renormalised where the router does) on its
    own logits. Used for experts the server's operator pruned (``MOE.EXPERT.PRUNE``)."""
    banned = torch.tensor(sorted(pruned), dtype=torch.long)

    def hook(_module, _inputs, output):
        logits, scores, _ = output
        masked = logits.float().index_fill(-1, banned, float("-inf"))
        top, indices = torch.topk(torch.softmax(masked, dim=-1), router.top_k, dim=-1)
        if getattr(router, "norm_topk_prob", True):
            top = top / top.sum(dim=-1, keepdim=True)
        return logits, top.to(scores.dtype), indices

    return router.register_forward_hook(hook)


def _hook_layers(paged: PagedMoE, layers: list[int]) -> None:
    """Keep each MoE decoder layer's input and find the next layers' routers (prefetch)."""
    decoder = paged.model.get_decoder().layers
    for layer in layers:
        block = decoder[layer]
        block.register_forward_pre_hook(
            lambda _m, args, kwargs, index=layer: paged.inputs.__setitem__(
                index, args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
        norm = block.post_attention_layernorm
        moe = next(m for name, m in block.named_children() if name in ("mlp", "block_sparse_moe"))
        paged.routers.append((norm, moe.gate))
        pruned = [e for pl, e in paged.source.info.get("pruned", []) if pl == layer]
        if pruned:
            route_around(moe.gate, pruned)
