"""Stage 2 for transformers 5.x: an attention implementation registered with ``AttentionInterface``.

``enable(stage2)`` registers ``"pion_stage2"`` (its masks are sdpa's, so every other use of the
model stays exact) and switches the model to it. ``cache_for(prefix_ids)`` returns a
``Stage2Cache``: a ``DynamicCache`` holding only the suffix whose sequence length counts the
stored prefix too, so positions (RoPE) continue after it, in plain forwards and in ``generate``
(give ``generate`` the whole prompt: it skips the tokens the cache says it has).

Each attention call of a layer whose keys came from a ``Stage2Cache`` goes to ``Stage2.attend``
(the server, or the in-process lane); any other call runs torch's SDPA with the mask the model
built. Batch size 1 only; sliding-window layers are refused (their window is not the prefix's).
"""

from __future__ import annotations

import numpy as np

from pion.client.adapters.layout import require
from pion.client.stage2 import Stage2

IMPLEMENTATION = "pion_stage2"
_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    transformers = require("transformers", "hf")
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    transformers.AttentionInterface.register(IMPLEMENTATION, stage2_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
    _registered = True


def stage2_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The registered implementation: Stage 2 for a ``Stage2Cache``'s keys, SDPA for anything else."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    owner = getattr(module, "_pion_stage2", None)
    active = None if owner is None else owner.active
    if active is None or active[1] is not key:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    torch = owner.torch
    if query.shape[0] != 1:
        raise NotImplementedError("Stage 2 runs batch size 1")
    if getattr(module, "sliding_window", None):
        raise NotImplementedError(f"layer {module.layer_idx} has a sliding window; Stage 2 attends whole prefixes")
    cache = active[0]
    dim = query.shape[-1]
    out = owner.attend(cache.handle, module.layer_idx, to_f32(torch, query[0]), to_f32(torch, key[0]),
                       to_f32(torch, value[0]), float(scaling if scaling is not None else dim ** -0.5))
    tensor = torch.from_numpy(np.array(out)).to(device=query.device, dtype=query.dtype)
    return tensor.transpose(0, 1).unsqueeze(0), None


def to_f32(torch, tensor) -> np.ndarray:
    return tensor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


class HFStage2(Stage2):
    """Stage 2 wired into one transformers model (``PionPromptCache.enable_stage2``)."""

    def __init__(self, prompt_cache, **options) -> None:
        super().__init__(prompt_cache, **options)
        self.torch = require("torch", "hf")
        self.cu = require("transformers.cache_utils", "hf")
        _register()
        self.model = self.adapter.model
        #: ``(Stage2Cache, keys it returned)`` of the layer running now (set by the cache's update)
        self.active = None
        self.previous = self.model.config._attn_implementation
        self.model.set_attn_implementation(IMPLEMENTATION)
        self.modules = [m for m in self.model.modules() if hasattr(m, "layer_idx") and hasattr(m, "num_key_value_groups")]
        if not self.modules:
            raise NotImplementedError(f"{type(self.model).__name__}: no attention modules with layer_idx found")
        for module in self.modules:
            module._pion_stage2 = self

    def cache_for(self, prefix_ids):
        """A cache that holds only the suffix; the prefix's attention is Stage 2's."""
        handle = self.prefix(prefix_ids)
        return make_cache(self, handle)

    def disable(self) -> None:
        """Give the model back its previous attention implementation."""
        for module in self.modules:
            module._pion_stage2 = None
        self.model.set_attn_implementation(self.previous)


_cache_class = None


def make_cache(owner: HFStage2, handle):
    global _cache_class
    if _cache_class is None:
        _cache_class = _define_cache(owner.cu)
    cache = _cache_class(config=owner.model.config)
    cache.owner, cache.handle = owner, handle
    return cache


def _define_cache(cu):
    class Stage2Cache(cu.DynamicCache):
        """A ``DynamicCache`` of the suffix; ``get_seq_length`` counts the stored prefix as well."""

        owner: HFStage2
        handle = None

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return self.handle.n_tokens + super().get_seq_length(layer_idx)

        def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
            keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
            self.owner.active = (self, keys)
            return keys, values

    return Stage2Cache
