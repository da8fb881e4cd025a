"""The runtime shim the chunk cache talks to: one per model runtime (transformers, mlx-lm).

Each shim offers the same operations (``rope_apply``, ``prefill_at``, ``run_in_place``,
``deviation``) through the runtime's own code, and ``rope``: the model's RoPE as a
``RopeSpec``, probed once from ``rope_apply``.
"""

from __future__ import annotations

from pion.client.retrieval.rope import RopeSpec


class StopForward(Exception):
    """Raised from inside a forward to end it after the layers that were needed."""


class RuntimeShim:
    """What both shims share: the lazily probed ``RopeSpec``."""

    adapter = None
    _rope: RopeSpec | None = None

    def head_dim(self) -> int:
        heads = {h[1] for h in self.adapter.layout.heads}
        if len(heads) != 1:
            raise NotImplementedError("layers with different head sizes cannot be composed")
        return heads.pop()

    @property
    def rope(self) -> RopeSpec:
        if self._rope is None:
            self._rope = RopeSpec.probe(self.rope_apply, self.head_dim(), self.rope_limit())
        return self._rope

    def rope_apply(self, x, start):  # pragma: no cover - each shim defines it
        raise NotImplementedError

    def rope_limit(self) -> int | None:
        return None


def runtime_for(adapter) -> RuntimeShim:
    if adapter.runtime == "hf":
        from pion.client.retrieval.runtime_hf import HfRuntime

        return HfRuntime(adapter)
    from pion.client.retrieval.runtime_mlx import MlxRuntime

    return MlxRuntime(adapter)
