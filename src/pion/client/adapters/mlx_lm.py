"""Adapter for mlx-lm: the list ``make_prompt_cache(model)`` returns, to numpy rows and back.

``KVCache`` slots hold K/V (``[1, kv_heads, seq, head_dim]``, padded to 256-token steps; only
``offset`` tokens are live); ``ArraysCache`` slots (Mamba, GatedDeltaNet, LFM2 conv...) hold
recurrent state. A rebuilt list has the same classes with the same live values, so
``generate_step(prompt_cache=...)`` continues from it as from a prefilled one. Prefill follows
mlx-lm's ``generate_step``: chunks of ``prefill_step_size`` with only the cache evaluated.

mlx and mlx-lm are imported when the adapter is created, never at module import.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pion.client.adapters.layout import CacheLayout, heads_major, require
from pion.client.fingerprint import cached, digest
from pion.client.namespace import config_hash
from pion.client.state_blob import pack_state, unpack_state


class MlxLmAdapter:
    """Moves an mlx-lm prompt cache to and from numpy rows and state blobs."""

    runtime = "mlx"

    def __init__(self, model, model_id: str = "", prefill_step_size: int = 2048) -> None:
        self.mx = require("mlx.core", "mlx")
        self.cache_mod = require("mlx_lm.models.cache", "mlx")
        self.model = model
        self.model_id = model_id
        self.prefill_step_size = prefill_step_size
        self._layout: CacheLayout | None = None

    # -- identity ------------------------------------------------------------------------

    def fingerprint(self, weights: str | None = None) -> dict:
        """The class, the model args, the K/V dtype and a hash of every weight (``weights``, the
        caller's own identity of the weights, replaces the hash): see ``pion.client.fingerprint``."""
        args = getattr(self.model, "args", None)
        config = dataclasses.asdict(args) if dataclasses.is_dataclass(args) else dict(vars(args or {}))
        return {
            "runtime": self.runtime, "class": f"{type(self.model).__module__}.{type(self.model).__name__}",
            "config": config_hash(config), "dtype": self.layout.dtype,
            "weights": f"caller:{weights}" if weights is not None else self.weights_hash(),
        }

    def weights_hash(self) -> str:
        """xxh3-128 of every parameter (LoRA layers' ``lora_a``/``lora_b`` included) and of the
        LoRA scales, cached per model while its arrays stay the same objects."""
        import json

        from mlx.utils import tree_flatten

        mx = self.mx
        arrays = tree_flatten(self.model.parameters())
        scales = [[name, float(module.scale)] for name, module in self.model.named_modules()
                  if hasattr(module, "lora_a") and hasattr(module, "scale")]
        key = (tuple((name, id(a)) for name, a in arrays), json.dumps(scales))
        contiguous = getattr(mx, "contiguous", None)

        def compute() -> str:
            items = []
            for name, a in arrays:
                view = contiguous(a) if contiguous is not None else a
                mx.eval(view)
                items.append((name, str(a.dtype), tuple(a.shape), memoryview(view)))
            return digest(items, scales)

        return cached(self.model, key, [a for _, a in arrays], compute)

    @property
    def layout(self) -> CacheLayout:
        if self._layout is None:
            self._layout = self._probe()
        return self._layout

    def _probe(self) -> CacheLayout:
        cache = self.new_cache()
        self.forward([0, 0], cache)
        attn, state, heads, dtype = [], [], [], None
        for index, slot in enumerate(cache):
            kind = type(slot).__name__
            if kind == "KVCache":
                attn.append(index)
                heads.append((slot.keys.shape[1], slot.keys.shape[3], slot.values.shape[3]))
                dtype = dtype or _np_name(slot.keys.dtype)
            elif kind == "ArraysCache":
                state.append(index)
            else:
                raise NotImplementedError(
                    f"cache slot {index} is a {kind}; Pion stores KVCache and ArraysCache slots only "
                    "(rotating, quantized, chunked and nested caches are not supported yet)"
                )
        if dtype is None:
            from mlx.utils import tree_flatten

            dtype = _np_name(tree_flatten(self.model.parameters())[0][1].dtype)
        return CacheLayout(self.runtime, len(cache), tuple(attn), tuple(state), tuple(heads), dtype)

    # -- running the model ---------------------------------------------------------------

    def new_cache(self) -> list:
        return self.cache_mod.make_prompt_cache(self.model)

    def forward(self, token_ids, cache) -> np.ndarray:
        """Run ``token_ids`` on top of ``cache``; the last position's logits as float32.

        All tokens but the last go in ``prefill_step_size`` chunks evaluating only the cache
        (mlx-lm's ``generate_step``), then the last token alone gives the logits.
        """
        mx = self.mx
        ids = list(token_ids)
        step = self.prefill_step_size
        for start in range(0, len(ids) - 1, step):
            self.model(mx.array([ids[start:min(start + step, len(ids) - 1)]]), cache=cache)
            mx.eval([c.state for c in cache])
        logits = self.model(mx.array([ids[-1:]]), cache=cache)[0, -1].astype(mx.float32)
        mx.eval(logits, [c.state for c in cache])
        return np.array(logits)

    def prefill(self, token_ids, cache=None) -> list:
        cache = self.new_cache() if cache is None else cache
        self.forward(token_ids, cache)
        return cache

    def seq_len(self, cache) -> int:
        return int(cache[self.layout.attn[0]].offset) if self.layout.attn else -1

    # -- cache <-> numpy -----------------------------------------------------------------

    def export(self, cache) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict[int, bytes]]:
        kv = []
        for slot in self.layout.attn:
            c = cache[slot]
            kv.append((self._rows(c.keys[..., : c.offset, :]), self._rows(c.values[..., : c.offset, :])))
        states = {slot: self._pack_state(cache[slot]) for slot in self.layout.state}
        return kv, states

    def _rows(self, arr) -> np.ndarray:
        _, heads, n, dim = arr.shape
        return to_numpy(self.mx, arr[0].transpose(1, 0, 2).reshape(n, heads * dim))

    def _pack_state(self, slot) -> bytes:
        if slot.left_padding is not None or slot.lengths is not None:
            raise NotImplementedError("batched ArraysCache (left padding / lengths) cannot be stored")
        arrays = [(str(i), None if a is None else to_numpy(self.mx, a)) for i, a in enumerate(slot.cache)]
        return pack_state("ArraysCache", arrays, {"size": len(slot.cache)})

    def build(self, kv: list[tuple[np.ndarray, np.ndarray]], states: dict[int, bytes]) -> list:
        """A fresh prompt cache holding the given rows ``(n, heads*dim)`` and states."""
        return self.build_heads([(heads_major(k, h, dk), heads_major(v, h, dv))
                                 for (k, v), (h, dk, dv) in zip(kv, self.layout.heads, strict=True)], states)

    def build_heads(self, kv: list[tuple[np.ndarray, np.ndarray]], states: dict[int, bytes]) -> list:
        """A fresh prompt cache from ``[1, heads, n, dim]`` arrays (copied into mlx arrays)."""
        mx = self.mx
        cache = self.new_cache()
        dtype = getattr(mx, self.layout.dtype)
        for (k_arr, v_arr), slot in zip(kv, self.layout.attn, strict=True):
            c = cache[slot]
            c.keys, c.values = self._array(k_arr, dtype), self._array(v_arr, dtype)
            c.offset = k_arr.shape[2]
        for slot in self.layout.state:
            type_name, arrays, meta = unpack_state(states[slot])
            if type_name != "ArraysCache" or meta.get("size") != len(cache[slot].cache):
                raise ValueError(f"state blob for slot {slot} is a {type_name} of size {meta.get('size')}")
            cache[slot].cache = [None if a is None else mx.array(a) for _, a in arrays]
        mx.eval([c.state for c in cache])
        return cache

    def _array(self, values: np.ndarray, dtype):
        arr = self.mx.array(values)
        return arr if arr.dtype == dtype else arr.astype(dtype)

    def copy_cache(self, cache) -> list:
        import copy

        return copy.deepcopy(cache)


def _np_name(mx_dtype) -> str:
    return str(mx_dtype).rsplit(".", 1)[-1]


def to_numpy(mx, arr) -> np.ndarray:
    """An mlx array as numpy; bf16 comes out as ml_dtypes.bfloat16 with the same bits."""
    if arr.dtype == mx.bfloat16:
        import ml_dtypes

        return np.array(arr.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.array(arr)


def load_model(name_or_path: str):
    """``(model, tokenizer)`` via ``mlx_lm.load`` (a local path or a hub id)."""
    mlx_lm = require("mlx_lm", "mlx")
    return mlx_lm.load(name_or_path)


def load_demo(path, dtype: str = "float32"):
    """The built-in demo model (``pion.client.demo_model``) as an mlx-lm Llama."""
    import json
    from pathlib import Path

    mx = require("mlx.core", "mlx")
    llama = require("mlx_lm.models.llama", "mlx")
    config = json.loads((Path(path) / "config.json").read_text())
    fields = {f.name for f in dataclasses.fields(llama.ModelArgs)}
    model = llama.Model(llama.ModelArgs(**{k: v for k, v in config.items() if k in fields}))
    weights = mx.load(str(Path(path) / "model.safetensors"))
    model.load_weights([(k, v.astype(getattr(mx, dtype))) for k, v in weights.items()])
    mx.eval(model.parameters())
    return model
