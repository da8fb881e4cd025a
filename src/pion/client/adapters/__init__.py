"""Runtime adapters: the only code that touches torch, transformers, mlx, mlx-lm or llama-cpp-python.

An adapter moves a model's prompt cache to and from runtime-neutral numpy:
``export(cache)`` gives per attention layer K and V rows (``(n_tokens, n_kv_heads*head_dim)``,
heads concatenated, the V-store's row layout) and per recurrent layer a state blob;
``build(...)`` makes the runtime's own cache object back from them. The prompt cache above
works only with these numpy rows and blobs, so it never imports a runtime.

``adapter_for(model)`` picks the adapter from the model's class without importing anything
the model's module did not already import.
"""

from __future__ import annotations

from pion.client.adapters.layout import CacheLayout, heads_major, require

__all__ = ["CacheLayout", "adapter_for", "enable_stage2", "heads_major", "require"]


def adapter_for(model, **options):
    """The adapter for a transformers (PyTorch) or mlx-lm model."""
    module = type(model).__module__ or ""
    if module.startswith("transformers") or hasattr(model, "config") and hasattr(model, "generate"):
        from pion.client.adapters.transformers import TransformersAdapter

        return TransformersAdapter(model, **options)
    if module.startswith("mlx_lm") or module.startswith("mlx"):
        from pion.client.adapters.mlx_lm import MlxLmAdapter

        return MlxLmAdapter(model, **options)
    if module.startswith("llama_cpp"):
        raise TypeError("a llama_cpp.Llama keeps its K/V inside llama.cpp: use "
                        "pion.client.adapters.llama_cache.PionLlamaCache with Llama.set_cache")
    raise TypeError(
        f"no Pion adapter for {type(model).__module__}.{type(model).__name__}: "
        "pass a transformers model (pip install 'pion[hf]') or an mlx-lm model (pip install 'pion[mlx]')"
    )


def enable_stage2(prompt_cache, model=None, *, sparse: dict | None = None, lane: str = "server"):
    """Route ``model``'s attention over stored prefixes to Stage 2; returns the runtime's ``Stage2``.

    ``model`` defaults to the prompt cache's own. transformers models get an attention
    implementation registered with ``AttentionInterface``; mlx-lm models a patched SDPA.
    """
    model = prompt_cache.adapter.model if model is None else model
    if model is not prompt_cache.adapter.model:
        raise ValueError("enable_stage2: the model must be the prompt cache's own (its fingerprint names the prefixes)")
    runtime = prompt_cache.adapter.runtime
    if runtime == "hf":
        from pion.client.adapters.stage2_hf import HFStage2

        return HFStage2(prompt_cache, sparse=sparse, lane=lane)
    if runtime == "mlx":
        from pion.client.adapters.stage2_mlx import MLXStage2

        return MLXStage2(prompt_cache, sparse=sparse, lane=lane)
    raise NotImplementedError(f"Stage 2 has no integration for the {runtime!r} runtime")
