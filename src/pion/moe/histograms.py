"""Per-(layer, expert) counters of one model, per namespace (spec 10.3, ``MOE.EXPERT.HIST``).

Every FETCH counts in the namespace it names (``NS name``; without one, ns 0 = ``default``),
at most ``MAX_NAMESPACES`` a model. Each namespace keeps three tables ``[n_layers][n_experts]``:
fetches (the reference's histogram), misses (fetches that had to read the shard) and prefetched
hits (first fetches of an expert a PREFETCH had brought in), so a trace's hit rate can be read
per expert. The tables are what ``HIST SAVE`` writes (fetches, as an MHST file) and what seeds
the cache policy after ``HIST LOAD``. Counters live in memory only: they are telemetry, saved
when the operator asks.
"""

from __future__ import annotations

import json

import numpy as np

from pion.codecs.experts import decode_mhst, encode_mhst

MAX_NAMESPACES = 8
DEFAULT_NS = "default"
MAX_NS_NAME = 128


class HistogramError(ValueError):
    """A namespace or file the histograms refuse (the message is the reply's text)."""


class Namespace:
    __slots__ = ("name", "fetches", "misses", "prefetched_hits")

    def __init__(self, name: str, n_layers: int, n_experts: int) -> None:
        self.name = name
        self.fetches = np.zeros((n_layers, n_experts), dtype=np.uint64)
        self.misses = np.zeros_like(self.fetches)
        self.prefetched_hits = np.zeros_like(self.fetches)


class Histograms:
    """The namespaces of one model, in creation order (ns 0 is ``default``, always there)."""

    def __init__(self, n_layers: int, n_experts: int) -> None:
        self.n_layers = n_layers
        self.n_experts = n_experts
        self.spaces: dict[str, Namespace] = {}
        self.get(DEFAULT_NS, create=True)

    def get(self, name: str, create: bool = False) -> Namespace:
        found = self.spaces.get(name)
        if found is not None:
            return found
        if not create:
            raise HistogramError(f"ERR no such namespace '{name}'")
        if not 1 <= len(name) <= MAX_NS_NAME:
            raise HistogramError(f"ERR namespace name must be 1..{MAX_NS_NAME} bytes")
        if len(self.spaces) >= MAX_NAMESPACES:
            raise HistogramError(f"ERR too many namespaces (at most {MAX_NAMESPACES} per model)")
        found = self.spaces[name] = Namespace(name, self.n_layers, self.n_experts)
        return found

    def find(self, ref: str) -> Namespace:
        """A namespace by name, or by its number (``0`` = default) when no name matches."""
        if ref in self.spaces:
            return self.spaces[ref]
        if ref.isdigit() and int(ref) < len(self.spaces):
            return list(self.spaces.values())[int(ref)]
        raise HistogramError(f"ERR no such namespace '{ref}'")

    def count(self, name: str, layer: int, expert: int, miss: bool, prefetched_hit: bool) -> None:
        ns = self.get(name, create=True)
        ns.fetches[layer, expert] += 1
        if miss:
            ns.misses[layer, expert] += 1
        if prefetched_hit:
            ns.prefetched_hits[layer, expert] += 1

    def total(self) -> np.ndarray:
        """Fetches over every namespace (what the cache policy is seeded from)."""
        return sum((ns.fetches for ns in self.spaces.values()), np.zeros((self.n_layers, self.n_experts), np.uint64))

    def render(self, ns: Namespace) -> str:
        """The reference's JSON, plus this namespace's misses and prefetched hits."""
        return json.dumps({
            "n_layers": self.n_layers, "n_experts": self.n_experts, "namespace": ns.name,
            "total_fetches": int(ns.fetches.sum()), "active": _active(ns.fetches),
            "total_misses": int(ns.misses.sum()), "misses": _active(ns.misses),
            "prefetched_hits": _active(ns.prefetched_hits),
        }, separators=(",", ":"))

    def render_list(self, visible: list[str] | None = None) -> str:
        return json.dumps([
            {"id": index, "name": ns.name, "total_fetches": int(ns.fetches.sum())}
            for index, ns in enumerate(self.spaces.values()) if visible is None or ns.name in visible
        ], separators=(",", ":"))

    def encode(self, ns: Namespace) -> bytes:
        return encode_mhst(_active(ns.fetches))

    def load(self, ns: Namespace, data: bytes) -> int:
        """Replace ``ns``'s fetch counts with an MHST file's; the number of entries read."""
        try:
            entries = decode_mhst(data)
        except ValueError as exc:
            raise HistogramError(f"ERR {exc}") from None
        table = np.zeros_like(ns.fetches)
        for layer, expert, count in entries:
            if layer >= self.n_layers or expert >= self.n_experts:
                raise HistogramError(f"ERR MHST entry layer={layer} expert={expert} is outside this model "
                                     f"({self.n_layers} layers, {self.n_experts} experts)")
            table[layer, expert] += np.uint64(count)
        ns.fetches = table
        return len(entries)


def _active(table: np.ndarray) -> list[list[int]]:
    layers, experts = np.nonzero(table)
    return [[int(layer), int(expert), int(table[layer, expert])] for layer, expert in zip(layers, experts, strict=True)]
