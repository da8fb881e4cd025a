"""What the chunk cache needs from an mlx-lm model beyond the prompt-cache adapter.

The same three operations as ``runtime_hf``, through mlx-lm's own code: the attention
modules' ``rope`` (``rope_apply``), a prefill at a start position (a cache slot whose
``offset`` says where the tokens sit but that holds nothing before them), and a forward of
chosen tokens in place (``run_in_place``): cache slots whose ``update_and_fetch`` writes the
new K/V over the cached rows at the tokens' positions and whose ``make_mask`` lets each token
see the cache up to its own position. mlx-lm's attention takes one start ``offset`` for RoPE,
so for the scattered positions of a repair each attention's ``rope`` is swapped, for that one
forward, for ``TableRope``: the same rotation, applied from the table of cos/sin that the
model's own RoPE produced (``RopeSpec``), at the tokens' positions.

mlx is imported by the adapter (``pion.client.adapters.mlx_lm``), never at module import.
"""

from __future__ import annotations

import numpy as np

from pion.client.retrieval.rope import RotationRefused
from pion.client.retrieval.shim import RuntimeShim, StopForward


class MlxRuntime(RuntimeShim):
    """Chunk-cache operations on an mlx-lm model (via its ``MlxLmAdapter``)."""

    def __init__(self, adapter) -> None:
        self.adapter = adapter
        self.model = adapter.model
        self.mx = adapter.mx
        self.attention = self._find_attention()

    def _find_attention(self) -> list:
        found = [m for _, m in self.model.named_modules() if isinstance(m, dict) and "rope" in m and "k_proj" in m]
        if not found:
            raise RotationRefused(f"{type(self.model).__name__}: no attention module with a 'rope' found")
        return found

    def rope_limit(self) -> int | None:
        args = getattr(self.model, "args", None)
        scaling = getattr(args, "rope_scaling", None) or {}
        kind = scaling.get("type") or scaling.get("rope_type") or "default"
        if "dynamic" in kind:
            return int(getattr(args, "max_position_embeddings", 0) or 0) or None
        return None

    def rope_apply(self, x: np.ndarray, start: int) -> np.ndarray:
        """The first attention's RoPE on ``x [n_vec, n_pos, D]`` at positions ``start...``; every
        attention module must give the same result (one RoPE for the whole model)."""
        mx = self.mx
        arr = mx.array(x)[None]
        ropes = list({id(attn.rope): attn.rope for attn in self.attention}.values())
        outs = [np.array(rope(arr, offset=start).astype(mx.float32))[0] for rope in ropes]
        for other in outs[1:]:
            if not np.array_equal(other, outs[0]):
                raise RotationRefused("the attention layers use different RoPEs; chunk composition needs one")
        return outs[0]

    # -- forwards ------------------------------------------------------------------------

    def prefill_at(self, token_ids, start: int, first_layer_only: bool = False) -> list:
        """A prompt cache of ``token_ids`` placed at positions ``start...`` (nothing before them);
        ``first_layer_only`` fills only the first attention layer (the others stay empty)."""
        mx = self.mx
        attn = self.adapter.layout.attn
        slots = self.adapter.new_cache()
        for slot in attn:
            slots[slot] = _OffsetSlot(start, stop=first_layer_only and slot > attn[0])
        try:
            self.model(mx.array([[int(t) for t in token_ids]]), cache=slots)
        except StopForward:
            pass
        filled = [slots[s] for s in attn if slots[s].keys is not None]
        mx.eval([s.keys for s in filled] + [s.values for s in filled])
        cache = self.adapter.new_cache()
        for slot in attn:
            if slots[slot].keys is not None:
                cache[slot].keys, cache[slot].values = slots[slot].keys, slots[slot].values
                cache[slot].offset = len(token_ids)
        return cache

    def first_layer_k(self, cache) -> np.ndarray:
        kv = cache[self.adapter.layout.attn[0]]
        return self.adapter._rows(kv.keys[..., : kv.offset, :])

    def run_in_place(self, cache: list, token_ids, positions: np.ndarray, *, on_update=None,
                     stop_after: int | None = None) -> None:
        """Recompute ``token_ids`` at ``positions`` inside ``cache`` (see ``HfRuntime.run_in_place``)."""
        mx = self.mx
        index = mx.array(np.asarray(positions, dtype=np.int32))
        attn_slots = self.adapter.layout.attn
        end = int(np.max(positions)) + 1  # nothing past the last token is visible: attend to [0, end) only
        visible = mx.arange(end)[None, :] <= index[:, None]
        slots = list(cache)
        for slot in attn_slots:
            slots[slot] = _ScatterSlot(cache[slot], slot, index, visible, on_update, stop_after, end)
        swapped = [(attn, attn.rope) for attn in self.attention]
        table = TableRope(self.rope, np.asarray(positions))
        try:
            for attn, _ in swapped:
                attn.rope = table
            try:
                self.model(mx.array([[int(t) for t in token_ids]]), cache=slots)
            except StopForward:
                pass
            mx.eval([cache[s].keys for s in attn_slots] + [cache[s].values for s in attn_slots])
        finally:
            for attn, rope in swapped:
                attn.rope = rope

    # -- cache access --------------------------------------------------------------------

    def cache_rows(self, cache) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.adapter.export(cache)[0]

    def deviation(self, new, old) -> np.ndarray:
        mx = self.mx
        diff = (new.astype(mx.float32) - old.astype(mx.float32)) ** 2
        return np.array(diff.sum(axis=(0, 1, 3)))


class _OffsetSlot:
    """A cache slot for one forward whose tokens sit at ``offset...`` with nothing cached before."""

    def __init__(self, offset: int, stop: bool = False) -> None:
        self.offset, self.stop = offset, stop
        self.keys = self.values = None

    def update_and_fetch(self, keys, values):
        if self.stop:
            raise StopForward
        self.keys, self.values = keys, values
        return keys, values

    def make_mask(self, n: int, return_array: bool = False, window_size=None):
        from mlx_lm.models.cache import create_attention_mask

        return create_attention_mask(n, 0, return_array, window_size)

    @property
    def state(self):
        return self.keys, self.values


class _ScatterSlot:
    """Wraps a ``KVCache`` for one in-place forward: writes at ``index``, masks by position."""

    def __init__(self, kv, slot: int, index, visible, on_update, stop_after, end: int) -> None:
        self.kv, self.slot, self.index, self.visible = kv, slot, index, visible
        self.on_update, self.stop_after, self.end = on_update, stop_after, end
        self.offset = kv.offset

    def update_and_fetch(self, keys, values):
        kv = self.kv
        if self.stop_after is not None and self.slot > self.stop_after:
            raise StopForward
        if self.on_update is not None:
            self.on_update(self.slot, keys, values, kv.keys[..., self.index, :], kv.values[..., self.index, :])
        kv.keys[..., self.index, :] = keys.astype(kv.keys.dtype)
        kv.values[..., self.index, :] = values.astype(kv.values.dtype)
        return kv.keys[..., : self.end, :], kv.values[..., : self.end, :]

    def make_mask(self, n: int, return_array: bool = False, window_size=None):
        if window_size is not None:
            raise NotImplementedError("sliding-window attention cannot be repaired in place")
        return self.visible

    @property
    def state(self):
        return self.kv.state


class TableRope:
    """RoPE at explicit positions from the runtime's own cos/sin table (``RopeSpec.raw``)."""

    def __init__(self, spec, positions: np.ndarray) -> None:
        import mlx.core as mx

        cos, sin = spec.raw(positions)
        self.mx = mx
        self.cos, self.sin = mx.array(cos), mx.array(sin)
        order = np.concatenate([spec.first, spec.second, spec.keep])
        self.keep = mx.array(spec.keep.astype(np.int32))
        self.inverse = mx.array(np.argsort(order).astype(np.int32))
        self.keep_scale = mx.array(spec.keep_scale.astype(np.float32))
        self.mx_first, self.mx_second = mx.array(spec.first.astype(np.int32)), mx.array(spec.second.astype(np.int32))

    def __call__(self, x, offset=0):
        mx = self.mx
        xf = x.astype(mx.float32)
        xa, xb = mx.take(xf, self.mx_first, axis=-1), mx.take(xf, self.mx_second, axis=-1)
        ya = xa * self.cos - xb * self.sin
        yb = xa * self.sin + xb * self.cos
        parts = [ya, yb]
        if self.keep.size:
            parts.append(mx.take(xf, self.keep, axis=-1) * self.keep_scale)
        return mx.take(mx.concatenate(parts, axis=-1), self.inverse, axis=-1).astype(x.dtype)
