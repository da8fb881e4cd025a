"""The weights part of a model fingerprint: a hash of every parameter's bytes, once per model.

Why every byte: a fine-tune that touches only some layers (a LoRA merged into q and v, PEFT's
and mlx-lm's default targets) keeps the shapes and the config. A sampled probe misses it and
loads the base model's K/V. So the adapters hash every parameter and buffer (name, dtype, shape
and raw bytes, in order) with xxh3-128, which runs at memory speed (docs/client.md has the
measured cost), plus the state of unmerged adapters (PEFT/LoRA layers: which adapters are
active, merged or disabled, and their scaling), which changes what the same bytes compute.

The digest is computed once per model object and kept in a ``WeakKeyDictionary``, keyed by the
identity and (torch) version counter of every parameter: replacing a parameter or changing one
in place (``load_state_dict``, ``merge_adapter``, an optimizer step) makes the next call hash
again; checking costs microseconds per parameter. The cache holds references to the arrays it
hashed, so their identities cannot be reused by other arrays while it stands.

A caller who already knows what the weights are (a hub id with its commit hash, a digest of the
checkpoint) passes ``fingerprint=`` to ``PionPromptCache`` and no byte is hashed; the contract
is theirs: that string must change whenever any weight or adapter changes, and must be equal
only for models whose K/V are interchangeable.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable

#: model -> (identity key, digest, references that keep the key's identities unique)
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
PREFIX = "xxh3-128:"


def _xxh3():
    try:
        import xxhash
    except ImportError as exc:  # pragma: no cover - a dependency of the hf and mlx extras
        raise ImportError("xxhash is not installed; install it with: pip install 'pion[hf]' (or pion[mlx]), "
                          "or pass fingerprint= to PionPromptCache") from exc
    return xxhash.xxh3_128()


def digest(items: Iterable[tuple[str, str, tuple, object]], extra: object = None) -> str:
    """xxh3-128 over ``(name, dtype, shape, buffer)`` items in order, then ``extra`` as JSON."""
    h = _xxh3()
    for name, dtype, shape, buffer in items:
        h.update(f"{name}|{dtype}|{tuple(shape)}|".encode())
        h.update(buffer)
    if extra is not None:
        h.update(json.dumps(extra, sort_keys=True, default=str, separators=(",", ":")).encode())
    return PREFIX + h.hexdigest()


def cached(model, key: tuple, refs: list, compute: Callable[[], str]) -> str:
    """The model's digest for this identity ``key``, computed (``compute()``) only when it changed."""
    try:
        found = _CACHE.get(model)
    except TypeError:  # not weak-referenceable: hash every time
        return compute()
    if found is not None and found[0] == key:
        return found[1]
    value = compute()
    _CACHE[model] = (key, value, refs)
    return value


def forget(model) -> None:
    """Drop a model's cached digest (the next fingerprint hashes every byte again)."""
    _CACHE.pop(model, None)
