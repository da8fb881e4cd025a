"""The runtime shim the chunk cache talks to: one per model runtime (transformers, mlx-lm).

Each shim offers the same operations (``rope_apply``, ``prefill_at``, ``run_in_place``,
``deviation``) through the runtime's own code, and ``rope``: the model's RoPE as a
``RopeSpec``, probed once from ``rope_apply``.
"""

from __future__ import annotations

from pion.client.retrieval.shim import RuntimeShim, StopForward

__all__ = ["RuntimeShim", "StopForward", "runtime_for"]


def runtime_for(adapter) -> RuntimeShim:
    if adapter.runtime == "hf":
        from pion.client.retrieval.runtime_hf import HfRuntime

        return HfRuntime(adapter)
    from pion.client.retrieval.runtime_mlx import MlxRuntime

    return MlxRuntime(adapter)
