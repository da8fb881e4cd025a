"""Stage 2 for mlx-lm: a patched ``scaled_dot_product_attention`` and a suffix-only cache.

mlx-lm models call ``mlx_lm.models.base.scaled_dot_product_attention(q, k, v, cache=..., scale,
mask)``, each model module holding its own reference to it. ``install()`` replaces it there and in
every ``mlx_lm.models.*`` module already imported (idempotent; ``uninstall()`` puts the original
back). The patch routes a call whose cache is a ``Stage2KVCache`` to ``Stage2.attend`` and any
other call to the original, unchanged.

``Stage2KVCache`` keeps the suffix in an ordinary ``KVCache``; its ``offset`` counts the stored
prefix too, so RoPE positions continue after it. Batch size 1; attention sinks are refused.
"""

from __future__ import annotations

import sys

import numpy as np

from pion.client.adapters.layout import require
from pion.client.stage2 import Stage2

_original = None


def install() -> None:
    """Patch mlx-lm's SDPA everywhere it is bound (no-op when already patched)."""
    global _original
    base = require("mlx_lm.models.base", "mlx")
    if _original is None:
        _original = base.scaled_dot_product_attention
    for module in _model_modules():
        if getattr(module, "scaled_dot_product_attention", None) is _original:
            module.scaled_dot_product_attention = patched_sdpa


def uninstall() -> None:
    if _original is None:
        return
    for module in _model_modules():
        if getattr(module, "scaled_dot_product_attention", None) is patched_sdpa:
            module.scaled_dot_product_attention = _original


def _model_modules():
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name == "mlx_lm.models.base" or name.startswith("mlx_lm.models."))]


def patched_sdpa(queries, keys, values, cache, scale, mask, sinks=None):
    if not isinstance(cache, _cache_class()):
        return _original(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)
    if sinks is not None:
        raise NotImplementedError("Stage 2 does not support attention sinks")
    if queries.shape[0] != 1:
        raise NotImplementedError("Stage 2 runs batch size 1")
    mx = cache.owner.mx
    f32 = mx.float32
    q, k, v = (np.array(t[0].astype(f32)) for t in (queries, keys, values))
    out = cache.owner.attend(cache.handle, cache.slot, q, k, v, float(scale))
    return mx.array(np.ascontiguousarray(out))[None].astype(queries.dtype)


_class = None


def _cache_class():
    global _class
    if _class is None:
        cache_mod = require("mlx_lm.models.cache", "mlx")
        class Stage2KVCache(cache_mod._BaseCache):
            """One attention layer's suffix (an ordinary ``KVCache``); ``offset`` counts the prefix too."""

            def __init__(self, owner=None, handle=None, slot: int = 0) -> None:
                self.owner, self.handle, self.slot = owner, handle, slot
                self.local = cache_mod.KVCache()

            @property
            def offset(self) -> int:
                return self.handle.n_tokens + self.local.offset

            def update_and_fetch(self, keys, values):
                return self.local.update_and_fetch(keys, values)

            @property
            def state(self):
                """The suffix only (what ``generate_step`` evaluates)."""
                return self.local.state

            @state.setter
            def state(self, value) -> None:
                self.local.state = value

            def size(self) -> int:
                return self.offset

            def is_trimmable(self) -> bool:
                return True

            def trim(self, n: int) -> int:
                return self.local.trim(min(n, self.local.offset))

            def make_mask(self, *args, **kwargs):
                return cache_mod.create_attention_mask(*args, offset=self.offset, **kwargs)

            def empty(self) -> bool:
                return self.local.empty()

            @property
            def nbytes(self) -> int:
                return self.local.nbytes

        _class = Stage2KVCache
    return _class


class MLXStage2(Stage2):
    """Stage 2 wired into mlx-lm (``PionPromptCache.enable_stage2`` on an mlx-lm model)."""

    def __init__(self, prompt_cache, **options) -> None:
        super().__init__(prompt_cache, **options)
        self.mx = require("mlx.core", "mlx")
        self.model = self.adapter.model
        install()

    def cache_for(self, prefix_ids) -> list:
        """The prompt cache list for ``generate_step``: suffix-only caches on attention layers."""
        handle = self.prefix(prefix_ids)
        layout = self.adapter.layout
        if layout.state:
            raise NotImplementedError("Stage 2 on mlx-lm runs attention-only models (this one has recurrent layers)")
        cls = _cache_class()
        return [cls(self, handle, slot) for slot in range(layout.n_slots)]

    def disable(self) -> None:
        uninstall()
