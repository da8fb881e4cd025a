"""The Pion client: ``PionClient`` (typed commands on redis-py) and ``PionPromptCache``.

Importing this package needs neither a server nor a model runtime: torch/transformers and
mlx/mlx-lm are imported by ``pion.client.adapters`` only when a prompt cache is made for a
model of that runtime.
"""

from __future__ import annotations

from pion.client.client import DEFAULT_URL, PionClient
from pion.client.errors import (
    AuthError,
    CodecRefused,
    ColdMiss,
    CorruptReply,
    KVCacheDisabled,
    Loading,
    NamespaceRefused,
    OutOfMemory,
    PionConnectionError,
    PionError,
    PionResponseError,
    PionTimeoutError,
    SessionNotFound,
    Unavailable,
    UnknownCommand,
    WriteRefused,
)
from pion.client.namespace import make_namespace
from pion.client.portable import ArtifactRefused
from pion.client.prompt_cache import PionPromptCache

__all__ = [
    "DEFAULT_URL", "ArtifactRefused", "AuthError", "CodecRefused", "ColdMiss", "CorruptReply", "KVCacheDisabled", "Loading",
    "NamespaceRefused", "OutOfMemory", "PionClient", "PionConnectionError", "PionError", "PionPromptCache",
    "PionResponseError", "PionTimeoutError", "SessionNotFound", "Unavailable", "UnknownCommand", "WriteRefused",
    "make_namespace",
]
