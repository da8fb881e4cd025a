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

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CacheLayout:
    """Which cache slots hold K/V and which hold recurrent state, and their shapes."""

    runtime: str
    n_slots: int
    #: slot index of each attention layer, in V-store layer order
    attn: tuple[int, ...]
    #: slot index of each recurrent-state layer
    state: tuple[int, ...]
    #: per attention layer: (n_kv_heads, k_head_dim, v_head_dim)
    heads: tuple[tuple[int, int, int], ...]
    #: K/V dtype as numpy names it ("float32", "float16", "bfloat16")
    dtype: str
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def k_dims(self) -> list[int]:
        return [h * dk for h, dk, _ in self.heads]

    @property
    def v_dims(self) -> list[int]:
        return [h * dv for h, _, dv in self.heads]

    def describe(self) -> dict:
        """The JSON form written into manifests."""
        return {"runtime": self.runtime, "n_slots": self.n_slots, "attn": list(self.attn),
                "state": list(self.state), "heads": [list(h) for h in self.heads], "dtype": self.dtype}


def heads_major(rows, heads: int, dim: int):
    """``(n, heads*dim)`` numpy rows as a ``[1, heads, n, dim]`` view (no copy): the runtimes'
    K/V layout, and ``V.EXPORT``'s."""
    return rows.reshape(rows.shape[0], heads, dim).transpose(1, 0, 2)[None]


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


def require(module_name: str, extra: str):
    """Import a runtime module, or raise ImportError naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"{module_name} is not installed; install it with: pip install 'pion[{extra}]'"
        ) from exc
