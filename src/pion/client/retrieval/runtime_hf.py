"""What the chunk cache needs from a transformers model beyond the prompt-cache adapter.

Three things, each through the model's own code: its RoPE as a function on numpy vectors
(``rope_apply``: the model's rotary-embedding module and its modeling file's
``apply_rotary_pos_emb``), a prefill at an arbitrary start position (``position_ids``), and
a forward of chosen tokens *in place* inside an existing cache (``run_in_place``): the model's
normal forward with ``position_ids`` set to where the tokens sit, a 4D mask letting each one
see every cached position up to its own, and the cache's ``update`` writing their new K/V
over the stale rows instead of appending. That is how repair recomputes tokens in the middle
of a composed prompt while attending to everything before them.

torch is imported by the adapter (``pion.client.adapters.transformers``), never at module import.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from pion.client.retrieval.rope import RotationRefused
from pion.client.retrieval.shim import RuntimeShim, StopForward


class HfRuntime(RuntimeShim):
    """Chunk-cache operations on a transformers model (via its ``TransformersAdapter``)."""

    def __init__(self, adapter) -> None:
        self.adapter = adapter
        self.model = adapter.model
        self.torch = adapter.torch
        self._rotary, self._apply_rope = self._find_rope()
        self.device = next(self.model.parameters()).device

    # -- RoPE ----------------------------------------------------------------------------

    def _find_rope(self):
        rotary = [m for _, m in self.model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")]
        if len(rotary) != 1:
            raise RotationRefused(
                f"{type(self.model).__name__} has {len(rotary)} rotary-embedding modules; chunk composition "
                "needs exactly one shared by every layer (per-layer RoPE such as Gemma 3's local/global is not supported)"
            )
        if getattr(rotary[0], "rope_type", "default") in ("mrope", "multimodal"):
            raise RotationRefused("multimodal (3D) RoPE cannot be moved along one position axis")
        attn = next((m for _, m in self.model.named_modules() if type(m).__name__.endswith("Attention")), None)
        module = sys.modules.get(type(attn).__module__) if attn is not None else None
        apply = getattr(module, "apply_rotary_pos_emb", None)
        if apply is None:
            raise RotationRefused(f"{type(self.model).__name__}'s modeling code has no apply_rotary_pos_emb")
        return rotary[0], apply

    def rope_limit(self) -> int | None:
        """Where the frequencies start to depend on the sequence length (dynamic, longrope), if declared."""
        config = self.model.config
        params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
        kind = params.get("rope_type") or params.get("type") or "default"
        if "dynamic" in kind or kind == "longrope":
            return int(params.get("original_max_position_embeddings") or config.max_position_embeddings)
        return None

    def rope_apply(self, x: np.ndarray, start: int) -> np.ndarray:
        """The model's RoPE on K vectors ``x [n_vec, n_pos, D]`` at positions ``start...``, in float32."""
        torch = self.torch
        n_vec, n_pos, dim = x.shape
        positions = torch.arange(start, start + n_pos, device=self.device)[None]
        with torch.no_grad():
            cos, sin = self._rotary(torch.zeros(1, n_pos, dim, device=self.device), positions)
            k = torch.from_numpy(np.ascontiguousarray(x))[None].to(self.device)
            _, out = self._apply_rope(k, k, cos.float(), sin.float())
        return out[0].float().cpu().numpy()

    # -- forwards ------------------------------------------------------------------------

    def prefill_at(self, token_ids, start: int, first_layer_only: bool = False):
        """A fresh cache of ``token_ids`` placed at positions ``start, start+1, ...`` (nothing before
        them); ``first_layer_only`` ends the forward once the first attention layer is cached."""
        torch = self.torch
        cache = self.adapter.new_cache()
        positions = torch.arange(start, start + len(token_ids), device=self.device)[None]
        if not first_layer_only:
            self._forward(token_ids, positions, cache, None)
            return cache
        first = self.adapter.layout.attn[0]
        plain = cache.update

        def update(key_states, value_states, layer_idx, *args, **kwargs):
            if layer_idx > first:
                raise StopForward
            return plain(key_states, value_states, layer_idx, *args, **kwargs)

        cache.update = update
        try:
            self._forward(token_ids, positions, cache, None)
        except StopForward:
            pass
        finally:
            del cache.update
        return cache

    def first_layer_k(self, cache) -> np.ndarray:
        """The first attention layer's K rows ``(n, heads*dim)`` of a cache."""
        return self.adapter._rows(cache.layers[self.adapter.layout.attn[0]].keys)

    def run_in_place(self, cache, token_ids, positions: np.ndarray, *, on_update=None, stop_after: int | None = None):
        """Recompute ``token_ids`` at ``positions`` (sorted, inside the cache) through the model.

        Each token attends to every cached position up to its own (the attention reads the cache
        only up to the last position recomputed); its new K/V replace the
        cached rows at its position, layer by layer. ``on_update(slot, new_k, new_v, old_k,
        old_v)`` sees them first (torch tensors ``[1, heads, m, dim]``). ``stop_after``: end the
        forward once that attention slot is written (CacheBlend's early-layer pass).
        """
        torch = self.torch
        index = torch.as_tensor(np.asarray(positions, dtype=np.int64), device=self.device)
        end = int(np.max(positions)) + 1  # nothing past the last token is visible: attend to [0, end) only
        dtype = cache.layers[self.adapter.layout.attn[0]].keys.dtype
        visible = torch.arange(end, device=self.device)[None, :] <= index[:, None]
        mask = torch.zeros(visible.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~visible, torch.finfo(dtype).min)

        def update(key_states, value_states, layer_idx, *args, **kwargs):
            if stop_after is not None and layer_idx > stop_after:
                raise StopForward
            layer = cache.layers[layer_idx]
            if on_update is not None:
                on_update(layer_idx, key_states, value_states, layer.keys[:, :, index], layer.values[:, :, index])
            layer.keys[:, :, index] = key_states.to(layer.keys.dtype)
            layer.values[:, :, index] = value_states.to(layer.values.dtype)
            return layer.keys[:, :, :end], layer.values[:, :, :end]

        cache.update = update
        try:
            self._forward(token_ids, index[None], cache, mask[None, None])
        except StopForward:
            pass
        finally:
            del cache.update

    def run_funnel(self, cache, token_ids, positions: np.ndarray, stages: list[tuple[int, int, str]],
                   forced: np.ndarray | None = None) -> tuple[np.ndarray, list[int]] | None:
        """CacheBlend's progressive filtering in one forward: ``positions`` recomputed in place,
        narrowing as the forward goes deeper; the positions that went through every layer and
        the count computed at each attention layer (None when this model's decoder loop cannot
        be narrowed: the caller runs the stages as separate passes).

        ``stages``: ``(attention slot, keep, measure)``: at that slot the alive tokens' deviation
        (``repair.combine_deviation``) ranks them and only the ``keep`` most deviating (plus every
        ``forced`` one) go on; the hidden states of the others are dropped, so each layer computes
        only the tokens still selected. Positions are sorted; ``forced`` is a boolean per position.
        """
        from pion.client.retrieval.repair import combine_deviation, top_deviation

        layers = getattr(getattr(self.model, "model", None), "layers", None)
        if layers is None or len(layers) != len(cache.layers):
            return None
        torch = self.torch
        positions = np.asarray(positions, dtype=np.int64)
        forced = np.zeros(len(positions), bool) if forced is None else np.asarray(forced, bool)
        index = torch.as_tensor(positions, device=self.device)
        end = int(positions.max()) + 1
        dtype = cache.layers[self.adapter.layout.attn[0]].keys.dtype
        mask = torch.zeros((len(positions), end), dtype=dtype, device=self.device)
        mask.masked_fill_(~(torch.arange(end, device=self.device)[None, :] <= index[:, None]), torch.finfo(dtype).min)
        at_stage = {slot: (keep, measure) for slot, keep, measure in stages}
        state: dict[str, Any] = {"alive": np.arange(len(positions)), "pending": None}
        counts: list[int] = []

        def update(key_states, value_states, layer_idx, *args, **kwargs):
            layer, alive = cache.layers[layer_idx], state["alive"]
            rows = index[alive]
            old_k, old_v = layer.keys[:, :, rows], layer.values[:, :, rows]
            layer.keys[:, :, rows] = key_states.to(layer.keys.dtype)
            layer.values[:, :, rows] = value_states.to(layer.values.dtype)
            counts.append(len(alive))
            if layer_idx in at_stage:
                keep, measure = at_stage[layer_idx]
                local, free = np.arange(len(alive)), ~forced[alive]
                score = combine_deviation(measure, lambda: self.deviation(key_states, old_k)[free],
                                          lambda: self.deviation(value_states, old_v)[free])
                kept = top_deviation(local[free], score, keep)
                state["pending"] = np.sort(np.concatenate([local[~free], kept]))
            return layer.keys[:, :, :end], layer.values[:, :, :end]

        def narrow(module, args, kwargs):
            # the model hands every layer the full-width mask and rotary tables; the hidden states
            # come from the layer before, already as narrow as the tokens alive there
            pick = state["pending"]
            if pick is not None:
                state["pending"], state["alive"] = None, state["alive"][pick]
                sel = torch.as_tensor(pick, device=self.device)
                if args:
                    args = (args[0][:, sel], *args[1:])
                else:
                    kwargs["hidden_states"] = kwargs["hidden_states"][:, sel]
            if len(state["alive"]) == len(positions):
                return args, kwargs
            if not {"attention_mask", "position_embeddings"} <= kwargs.keys():
                raise _NotNarrowable  # another decoder-layer signature: the caller runs staged passes
            alive = torch.as_tensor(state["alive"], device=self.device)
            kwargs["attention_mask"] = kwargs["attention_mask"][..., alive, :]
            cos, sin = kwargs["position_embeddings"]
            kwargs["position_embeddings"] = (cos[:, alive], sin[:, alive])
            if kwargs.get("position_ids") is not None:
                kwargs["position_ids"] = kwargs["position_ids"][:, alive]
            return args, kwargs

        hooks = [layer.register_forward_pre_hook(narrow, with_kwargs=True) for layer in layers]
        cache.update = update
        try:
            self._forward(token_ids, index[None], cache, mask[None, None])
        except _NotNarrowable:
            return None  # rows written so far are the staged passes' values; they recompute them
        finally:
            del cache.update
            for hook in hooks:
                hook.remove()
        alive = state["alive"] if state["pending"] is None else state["alive"][state["pending"]]
        return positions[alive], counts

    def _forward(self, token_ids, positions, cache, mask) -> None:
        torch = self.torch
        kwargs = {self.adapter._cache_kw: cache, "use_cache": True, "position_ids": positions}
        if mask is not None:
            kwargs["attention_mask"] = mask
        if self.adapter._logits_kw:
            kwargs["logits_to_keep"] = 1
        with torch.no_grad():
            self.model(input_ids=torch.tensor([[int(t) for t in token_ids]], device=self.device), **kwargs)

    # -- cache access --------------------------------------------------------------------

    def cache_rows(self, cache) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.adapter.export(cache)[0]

    def deviation(self, new, old) -> np.ndarray:
        """Per token: squared distance between fresh and cached rows ``[1, heads, m, dim]`` (float32)."""
        diff = (new.float() - old.float()) ** 2
        return diff.sum(dim=(0, 1, 3)).cpu().numpy()


class _NotNarrowable(Exception):
    """The decoder layers do not take the arguments ``run_funnel`` narrows."""
