"""``make_provider``: the provider a ``ProviderSpec`` names. Apart from ``providers`` because it
imports the implementations (``openai``, ``worker_client``), which import ``providers``' errors
and helpers: a factory inside ``providers`` tied the three in an import cycle.
"""

from __future__ import annotations

from pion.embedding.providers import DisabledProvider, HashProvider, ProviderSpec


def make_provider(spec: ProviderSpec, *, url: str = "", model: str = "", api_key: str = "", dim: int = 0,
                  threads: int = 1, timeout: float = 60.0):
    """A provider for ``spec`` (nothing is started or loaded yet)."""
    if spec.kind == "hash":
        return HashProvider(spec.dim)
    if spec.kind == "none":
        return DisabledProvider()
    if spec.kind == "openai":
        from pion.embedding.openai import OpenAIProvider

        return OpenAIProvider(url, model, api_key=api_key, dim=dim, timeout=timeout)
    from pion.embedding.worker_client import WorkerProvider

    return WorkerProvider(spec.kind, spec.path, threads=threads, timeout=timeout)
