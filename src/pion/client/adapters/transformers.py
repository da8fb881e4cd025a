"""Adapter for Hugging Face transformers (5.x, PyTorch): ``DynamicCache`` to numpy rows and back.

The cache is the one the model itself would make (``DynamicCache(config=model.config)``):
``DynamicLayer`` slots hold K/V (``[1, kv_heads, seq, head_dim]``), ``LinearAttentionLayer``
slots hold conv/recurrent state, hybrid slots hold both. A rebuilt cache is indistinguishable
from a prefilled one: same classes, same tensors, same flags, so ``generate`` and plain
forwards continue from it as from the original.

torch and transformers are imported when the adapter is created, never at module import.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import os

import numpy as np

from pion.client.adapters.layout import CacheLayout, require
from pion.client.fingerprint import cached, digest, own_digest
from pion.client.namespace import config_hash
from pion.client.state_blob import pack_state, unpack_state

#: cache layer classes whose K/V Pion does not store (names differ across 5.x: QuantizedLayer
#: became BaseQuantizedLayer; a name a version lacks is skipped)
_UNSUPPORTED = ("DynamicSlidingWindowLayer", "DynamicIndexedLayer", "BaseQuantizedLayer", "QuantizedLayer", "StaticLayer")
_NP_NAMES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


class TransformersAdapter:
    """Moves a transformers model's ``DynamicCache`` to and from numpy rows and state blobs."""

    runtime = "hf"

    def __init__(self, model, model_id: str | None = None) -> None:
        self.torch = require("torch", "hf")
        self.cu = require("transformers.cache_utils", "hf")
        self.model = model
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._logits_kw = "logits_to_keep" in params
        self.model_id = model_id or getattr(model.config, "_name_or_path", "") or ""
        self._layout: CacheLayout | None = None

    # -- identity ------------------------------------------------------------------------

    def fingerprint(self, weights: str | None = None) -> dict:
        """What makes this model's K/V incompatible with another's (``pion.client.fingerprint``):
        the class, the config (without keys that do not change the math, such as the path it was
        loaded from), the K/V dtype and a hash of every weight and adapter; ``weights`` (the
        caller's own identity of the weights) replaces that hash."""
        return {
            "runtime": self.runtime, "class": type(self.model).__name__,
            "config": config_hash(self.model.config.to_dict()), "dtype": self.layout.dtype,
            "weights": f"caller:{weights}" if weights is not None else self.weights_hash(),
        }

    def weights_hash(self) -> str:
        """xxh3-128 of every parameter and buffer, and of the unmerged adapters' state (cached per model)."""
        model = self.model
        tensors, lora = named_tensors(self.torch, model)
        adapters = adapter_state(model, lora)
        # one pass gives the identity key and what the proof needs: device, dtype and shape as
        # torch's own objects (equal when equal; str() of each costs a next worker as much as its
        # whole proof, pion.client.weight_files), the address and size of a contiguous CPU tensor
        rows = [(name, id(t), t._version, t.device, t.data_ptr(), t.dtype, t.shape, t.nbytes,
                 t.is_cpu and t.is_contiguous()) for name, t in tensors]
        key = (tuple(rows), json.dumps(adapters, default=str))

        def full() -> str:
            return digest(((name, str(t.dtype), tuple(t.shape), tensor_bytes(self.torch, t)) for name, t in tensors),
                          adapters)

        def compute() -> str:
            """Another worker's digest when the weights are provably its bytes (``pion.client.weight_files``)."""
            from pion.client import weight_files

            items = [(name, dtype, shape, ptr, nbytes) if plain else (name, dtype, shape, 0, 0)
                     for name, _, _, _, ptr, dtype, shape, nbytes, plain in rows]
            def own(index: int) -> str:  # a contiguous CPU tensor's bytes read in place (tensor_bytes' bytes)
                ptr, nbytes = items[index][3:5]
                return own_digest(ctypes.string_at(ptr, nbytes) if ptr else tensor_bytes(self.torch, tensors[index][1]))

            found = weight_files.plan(items, own, {"adapters": adapters, "runtime": self.runtime})
            if found is not None and (value := weight_files.lookup(found)) is not None:
                return value
            value = full()
            if found is not None:
                weight_files.record(found, value)
            return value

        return cached(model, key, [t for _, t in tensors], compute)

    @property
    def layout(self) -> CacheLayout:
        if self._layout is None:
            self._layout = self._probe()
        return self._layout

    def _probe(self) -> CacheLayout:
        """Run two tokens once and read the cache the model built: slot kinds, heads, dtype."""
        token = self.model.config.bos_token_id
        token = token if isinstance(token, int) else 0
        cache = self.new_cache()
        self.forward([token, token], cache)
        attn, state, heads, dtype = [], [], [], None
        for index, layer in enumerate(cache.layers):
            self._check_supported(index, layer)
            if isinstance(layer, self.cu.LinearAttentionCacheLayerMixin):
                state.append(index)
            if isinstance(layer, self.cu.DynamicLayer) and layer.is_initialized:
                attn.append(index)
                heads.append((layer.keys.shape[1], layer.keys.shape[3], layer.values.shape[3]))
                dtype = dtype or _NP_NAMES[str(layer.keys.dtype)]
        if dtype is None:
            dtype = _NP_NAMES.get(str(next(self.model.parameters()).dtype), "float32")
        return CacheLayout(self.runtime, len(cache.layers), tuple(attn), tuple(state), tuple(heads), dtype)

    def _check_supported(self, index: int, layer) -> None:
        unsupported = tuple(getattr(self.cu, name) for name in _UNSUPPORTED if hasattr(self.cu, name))
        if isinstance(layer, unsupported):
            raise NotImplementedError(
                f"layer {index} uses {type(layer).__name__}; Pion stores full-attention K/V and linear-attention "
                "state only (sliding-window, indexed, static and quantized cache layers are not supported yet)"
            )

    # -- running the model ---------------------------------------------------------------

    def new_cache(self):
        return self.cu.DynamicCache(config=self.model.config)

    def forward(self, token_ids, cache) -> np.ndarray:
        """Run ``token_ids`` on top of ``cache`` (mutated); the last position's logits as float32."""
        torch = self.torch
        kwargs = {self._cache_kw: cache, "use_cache": True}
        if self._logits_kw:
            kwargs["logits_to_keep"] = 1
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([list(token_ids)], device=device), **kwargs)
        return out.logits[0, -1].float().cpu().numpy()

    def prefill(self, token_ids, cache=None):
        """A cache holding ``token_ids`` (a new one unless given)."""
        cache = self.new_cache() if cache is None else cache
        self.forward(token_ids, cache)
        return cache

    def seq_len(self, cache) -> int:
        return int(cache.get_seq_length()) if self.layout.attn else -1

    # -- cache <-> numpy -----------------------------------------------------------------

    def export(self, cache) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict[int, bytes]]:
        """K/V rows ``(n, heads*dim)`` per attention slot, and a state blob per recurrent slot."""
        kv = []
        for slot in self.layout.attn:
            layer = cache.layers[slot]
            kv.append((self._rows(layer.keys), self._rows(layer.values)))
        states = {slot: self._pack_state(cache.layers[slot]) for slot in self.layout.state}
        return kv, states

    def _rows(self, tensor) -> np.ndarray:
        _, heads, n, dim = tensor.shape
        return to_numpy(self.torch, tensor[0].transpose(0, 1).reshape(n, heads * dim))

    def _pack_state(self, layer) -> bytes:
        torch = self.torch
        arrays = []
        for i in range(layer.number_of_states):
            conv, rec = layer.conv_states[i], layer.recurrent_states[i]
            conv_ok, rec_ok = layer.is_conv_states_initialized[i], layer.is_recurrent_states_initialized[i]
            arrays.append((f"conv{i}", to_numpy(torch, conv) if conv_ok else None))
            arrays.append((f"rec{i}", to_numpy(torch, rec) if rec_ok else None))
        meta = {"states": layer.number_of_states, "has_previous": [bool(layer.has_previous_state[i]) for i in range(layer.number_of_states)],
                "kernel": [layer.conv_kernel_size[i] for i in range(layer.number_of_states)]}
        return pack_state(type(layer).__name__, arrays, meta)

    def build(self, kv: list[tuple[np.ndarray, np.ndarray]], states: dict[int, bytes]):
        """A fresh ``DynamicCache`` holding the given rows ``(n, heads*dim)`` and states.

        The rows become tensors first and are transposed there (a view): read-only rows are
        copied as they lie (one memcpy), never through a strided numpy copy."""
        tensors = [(self._heads_major(k, h, dk), self._heads_major(v, h, dv))
                   for (k, v), (h, dk, dv) in zip(kv, self.layout.heads, strict=True)]
        return self._fill(tensors, states)

    def build_heads(self, kv: list[tuple[np.ndarray, np.ndarray]], states: dict[int, bytes]):
        """A fresh ``DynamicCache`` from ``[1, heads, n, dim]`` arrays (views of them when the
        dtype and device allow: the first forward's concatenation makes the cache's own copy)."""
        return self._fill([(from_numpy(self.torch, k), from_numpy(self.torch, v)) for k, v in kv], states)

    def streamed_cache(self, layer_rows, n_tokens: int, schema: dict):
        """A ``DynamicCache`` whose layer i, when the forward first updates it, waits for
        ``layer_rows(i)`` (that layer's K and V rows as received, ``FMT RAW`` bytes) and writes
        them, with the new tokens' K/V, into the layer's tensors in one pass (``pion.client.streamed``).

        Until then each layer reports ``n_tokens`` as its length, so the model builds its
        positions and masks before any row is in. After its update a layer is a plain
        ``DynamicLayer`` (its class is put back): the cache is then the one ``build`` gives."""
        from pion.client.rows import bytes_per_row, decode_rows, native_dtype

        torch, cache = self.torch, self.new_cache()
        dtype = self._torch_dtype(self.layout.dtype)
        streamed = _streamed_layer(self.cu)
        names = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

        def rows(raw: np.ndarray, codec: str, heads: int, dim: int):
            """Token-major ``(rows, heads, dim)``: a view of the received buffer (with its spare
            rows) for the float codecs, the decoded prefix rows for the others."""
            if native_dtype(codec) is not None:
                flat = torch.from_numpy(raw).view(names[codec])
            else:
                flat = torch.from_numpy(decode_rows(raw[:n_tokens * bytes_per_row(codec, heads * dim)], codec,
                                                    n_tokens, heads * dim))
            return flat.view(-1, heads, dim)

        for index, (slot, (heads, k_dim, v_dim)) in enumerate(zip(self.layout.attn, self.layout.heads, strict=True)):
            def pending(index=index, heads=heads, k_dim=k_dim, v_dim=v_dim):
                k_raw, v_raw = layer_rows(index)
                return (rows(k_raw, schema["k"][index], heads, k_dim), rows(v_raw, schema["v"][index], heads, v_dim))

            layer = cache.layers[slot]
            layer.__class__ = streamed
            layer.pending, layer.pending_tokens, layer.pending_dtype = pending, n_tokens, dtype
        return cache

    def _heads_major(self, rows: np.ndarray, heads: int, dim: int):
        return from_numpy(self.torch, rows).view(rows.shape[0], heads, dim).permute(1, 0, 2).unsqueeze(0)

    def _fill(self, tensors: list, states: dict[int, bytes]):
        cache = self.new_cache()
        dtype = self._torch_dtype(self.layout.dtype)
        device = next(self.model.parameters()).device
        for (k, v), slot in zip(tensors, self.layout.attn, strict=True):
            k, v = k.to(device=device, dtype=dtype), v.to(device=device, dtype=dtype)
            layer = cache.layers[slot]
            self.cu.DynamicLayer.lazy_initialization(layer, k, v)
            layer.keys, layer.values = k, v
        for slot in self.layout.state:
            self._restore_state(cache.layers[slot], states[slot], device)
        return cache

    def _restore_state(self, layer, blob: bytes, device) -> None:
        type_name, arrays, meta = unpack_state(blob)
        if type_name != type(layer).__name__ or meta.get("states") != layer.number_of_states:
            raise ValueError(f"state blob is for {type_name}, this slot is {type(layer).__name__}")
        named = dict(arrays)
        for i in range(layer.number_of_states):
            conv, rec = named.get(f"conv{i}"), named.get(f"rec{i}")
            if conv is not None:
                layer.conv_states[i] = from_numpy(self.torch, np.array(conv)).to(device)
                layer.is_conv_states_initialized[i] = True
                layer.conv_kernel_size[i] = meta["kernel"][i]
                layer.dtype, layer.device = layer.conv_states[i].dtype, device
            if rec is not None:
                layer.recurrent_states[i] = from_numpy(self.torch, np.array(rec)).to(device)
                layer.is_recurrent_states_initialized[i] = True
            layer.has_previous_state[i] = meta["has_previous"][i]

    def _torch_dtype(self, name: str):
        return {"float32": self.torch.float32, "float16": self.torch.float16, "bfloat16": self.torch.bfloat16}[name]

    def copy_cache(self, cache):
        """An independent copy (the in-process floor of the benchmarks)."""
        import copy

        return copy.deepcopy(cache)


_STREAMED: dict = {}


def _streamed_layer(cu):
    """The ``DynamicLayer`` subclass of a streamed cache's layers (made once: it needs transformers)."""
    if "class" in _STREAMED:
        return _STREAMED["class"]
    import torch

    class StreamedLayer(cu.DynamicLayer):
        """A layer whose prefix rows are still on their way: its first update waits for them."""

        pending = None
        pending_tokens = 0
        pending_dtype = None

        def _land(self, key_states=None, value_states=None):
            """The prefix (and the new tokens) in the layer's own tensors; then a plain DynamicLayer."""
            k_rows, v_rows = self.pending()
            n = self.pending_tokens
            extra = 0 if key_states is None else key_states.shape[-2]
            device = key_states.device if key_states is not None else k_rows.device
            out = []
            for rows, new in ((k_rows, key_states), (v_rows, value_states)):
                # token-major (rows, heads, dim), seen heads-major: the layout the rows arrive in
                if rows.dtype == self.pending_dtype and rows.device == device and rows.shape[0] >= n + extra:
                    dest = rows[:n + extra]  # the received buffer itself: the prefix rows are not copied
                else:  # one contiguous pass: widened to the model dtype (and moved to its device)
                    dest = torch.empty((n + extra, rows.shape[1], rows.shape[2]), dtype=self.pending_dtype,
                                       device=device)
                    dest[:n].copy_(rows[:n])
                if new is not None:
                    dest[n:].copy_(new[0].transpose(0, 1))
                out.append(dest.permute(1, 0, 2).unsqueeze(0))
            self.keys, self.values = out
            self.device, self.is_initialized = device, True
            self.pending = None
            self.__class__ = cu.DynamicLayer
            return self.keys, self.values

        def update(self, key_states, value_states, *args, **kwargs):
            if self.pending is None:
                return super().update(key_states, value_states, *args, **kwargs)
            return self._land(key_states, value_states)

        def get_seq_length(self) -> int:
            return self.pending_tokens if self.pending is not None else super().get_seq_length()

        def materialize(self) -> None:
            if self.pending is not None:
                self._land()

        def crop(self, tokens_to_remove: int) -> None:
            self.materialize()
            self.__class__.crop(self, tokens_to_remove)

        def batch_repeat_interleave(self, repeats: int) -> None:
            self.materialize()
            self.__class__.batch_repeat_interleave(self, repeats)

        def batch_select_indices(self, indices) -> None:
            self.materialize()
            self.__class__.batch_select_indices(self, indices)

    _STREAMED["class"] = StreamedLayer
    return StreamedLayer


def tensor_bytes(torch, tensor) -> np.ndarray:
    """A tensor's raw bytes as a uint8 array (a copy only when it is on a device or strided)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(torch.uint8).numpy()


def named_tensors(torch, model) -> tuple[list, list | None]:
    """``([("p:<name>", parameter)..., ("b:<name>", buffer)...], LoRA modules)``: what
    ``named_parameters()`` and ``named_buffers()`` give, in their order, from one walk of the
    modules that also finds the LoRA layers (three walks cost ~1.5 ms of a second worker's few ms
    on a 273-tensor model). A model class overriding either method gets the methods themselves
    (and None: ``adapter_state`` walks the modules)."""
    base = torch.nn.Module
    if type(model).named_parameters is not base.named_parameters or type(model).named_buffers is not base.named_buffers \
            or type(model).named_modules is not base.named_modules:
        return ([(f"p:{n}", t) for n, t in model.named_parameters()]
                + [(f"b:{n}", t) for n, t in model.named_buffers()]), None
    params: list = []
    buffers: list = []
    lora: list = []
    seen_p: set = set()  # by id: a tensor's __hash__ is a Python call, ids are unique while the lists hold them
    seen_b: set = set()
    seen_m: set = set()
    lora_types: dict = {}

    def walk(module, prefix: str) -> None:
        """``named_modules()``'s pre-order walk (each module once), without its nested generators;
        the module's dicts read from its ``__dict__`` once (a fresh process pays each lookup cold)."""
        if id(module) in seen_m:
            return
        seen_m.add(id(module))
        attrs = module.__dict__
        dot = prefix + "." if prefix else ""
        own = attrs["_parameters"]
        if own:  # most modules hold none: no items() view then
            for name, t in own.items():
                if t is not None and id(t) not in seen_p:
                    seen_p.add(id(t))
                    params.append(("p:" + dot + name, t))
        held = attrs["_buffers"]
        if held:
            for name, t in held.items():
                if t is not None and id(t) not in seen_b:
                    seen_b.add(id(t))
                    buffers.append(("b:" + dot + name, t))
        kind = type(module)
        on_class = lora_types.get(kind)
        if on_class is None:
            on_class = lora_types[kind] = hasattr(kind, "lora_A")
        children = attrs["_modules"]
        # hasattr(module, "lora_A") without nn.Module.__getattr__'s AttributeError for each module
        # that has none: the same places (class, instance, parameters, buffers, modules)
        if on_class or "lora_A" in attrs or "lora_A" in children or "lora_A" in own or "lora_A" in held:
            lora.append((prefix, module))
        for name, child in children.items():
            if child is not None:
                walk(child, dot + name)

    walk(model, "")
    return params + buffers, lora


def adapter_state(model, lora: list | None = None) -> list:
    """What unmerged adapters do with the same bytes: per LoRA layer (PEFT's, or transformers'
    own ``load_adapter``), its active adapters, whether they are merged or disabled, and their
    scaling; and the PEFT configs. ``lora``: the ``(name, module)`` LoRA layers when already
    found (``named_tensors``)."""
    state: list = []
    found = lora if lora is not None else [(n, m) for n, m in model.named_modules() if hasattr(m, "lora_A")]
    for name, module in found:
        active = getattr(module, "active_adapters", None)
        scaling = getattr(module, "scaling", None)
        state.append([name, sorted(active) if isinstance(active, list | tuple) else str(active),
                      bool(getattr(module, "merged", False)), bool(getattr(module, "disable_adapters", False)),
                      {k: float(v) for k, v in sorted(scaling.items())} if isinstance(scaling, dict) else None])
    configs = getattr(model, "peft_config", None)
    if isinstance(configs, dict):
        state.append(["peft_config", {name: _config_dict(cfg) for name, cfg in sorted(configs.items())}])
    return state


def _config_dict(config) -> object:
    to_dict = getattr(config, "to_dict", None)
    return to_dict() if callable(to_dict) else repr(config)


def to_numpy(torch, tensor) -> np.ndarray:
    """A CPU tensor as numpy; bf16 comes out as ml_dtypes.bfloat16 with the same bits."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def from_numpy(torch, array: np.ndarray):
    """numpy (incl. ml_dtypes.bfloat16) as a tensor sharing its memory; read-only input is copied."""
    if not array.flags.writeable:
        array = np.array(array)
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def load_model(name_or_path: str, dtype: str = "auto", *, map_files: bool = False):
    """``(model, tokenizer)`` via ``AutoModelForCausalLM`` / ``AutoTokenizer`` (a local path or a hub id).

    ``map_files=True`` (a local directory) points the weights at their files (``map_weights``):
    the next worker then reuses this one's fingerprint. Only for files nobody rewrites in place
    while a worker runs (replace them with a new file and a rename): mapped weights follow their
    file's pages."""
    require("torch", "hf")
    transformers = require("transformers", "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype).eval()
    if map_files and os.path.isdir(name_or_path):
        map_weights(model, name_or_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(name_or_path)
    return model, tokenizer


def map_weights(model, directory) -> int:
    """Point the model's parameters and buffers at a private mapping of its safetensors files,
    where they hold exactly the file's bytes; the number of tensors mapped.

    Why: the loaded copies become the files' pages (shared by every worker of the model through
    the page cache), and a worker can then prove its weights are the files' bytes without reading
    them, so it reuses the fingerprint another worker hashed (``pion.client.weight_files``). A
    tensor whose name, dtype or shape the file does not have, or whose loaded values differ from
    the file's (a conversion on load), keeps its copy. Writes to a mapped tensor stay private
    (copy on write) and are seen by the next fingerprint. The price: a mapped tensor follows its
    file, so a file rewritten in place (not replaced by a rename) changes or truncates the
    running model's weights under its fingerprint; map only files that are never rewritten so.
    """
    import struct
    from pathlib import Path

    torch = require("torch", "hf")
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(dict(model.named_buffers(remove_duplicate=False)))
    from pion.client import weight_files

    mapped = 0
    for path in sorted(Path(directory).glob("*.safetensors")):
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        mapping = weight_files.map_file(str(path))
        storage = torch.frombuffer(mapping, dtype=torch.uint8).untyped_storage()
        matches = []
        for name, info in header.items():
            tensor, dtype = named.get(name), dtypes.get(info.get("dtype", "")) if isinstance(info, dict) else None
            if tensor is None or dtype is None or tensor.dtype != dtype or list(tensor.shape) != info["shape"]:
                continue
            start = 8 + length + info["data_offsets"][0]
            if tensor.device.type != "cpu" or start % tensor.element_size():
                continue
            view = torch.empty(0, dtype=dtype).set_(storage, start // tensor.element_size(), tuple(info["shape"]))
            with torch.no_grad():
                if torch.equal(tensor, view):
                    matches.append((tensor, view))
        # the kernel tracks writes from here on, before any tensor can write to the mapping
        weight_files.track_writes(storage.data_ptr(), storage.nbytes(), mapping)
        for tensor, view in matches:
            tensor.data = view
        mapped += len(matches)
        del storage, mapping  # the views keep the mapping alive, and it goes with them
    return mapped


def load_demo(path, dtype: str = "float32", *, map_files: bool = False):
    """The built-in demo model (``pion.client.demo_model``) as a ``LlamaForCausalLM``
    (``map_files``: as for ``load_model``)."""
    torch = require("torch", "hf")
    transformers = require("transformers", "hf")
    transformers.utils.logging.disable_progress_bar()  # the demo prints its own progress
    model = transformers.LlamaForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype))
    if map_files:
        map_weights(model, path)
    return model.eval()
