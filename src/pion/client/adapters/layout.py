"""What every adapter shares: the ``CacheLayout`` of a model's cache, the heads-major row view,
and ``require``, which imports a runtime or names the extra that installs it. A leaf of the
adapters package: the adapters import it, it imports none of them.
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


def require(module_name: str, extra: str):
    """Import a runtime module, or raise ImportError naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"{module_name} is not installed; install it with: pip install 'pion[{extra}]'"
        ) from exc
