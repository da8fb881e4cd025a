"""Namespaces and model fingerprints: the prefix contract (docs/design.md section 1).

A namespace names one cached prefix. ``make_namespace(*parts)`` is the reference's contract
(first 32 hex chars of sha256 over the parts joined by ``|``), so namespaces made by reference
clients and ours agree. When the caller gives no namespace, the client derives one from the
model fingerprint, the codec schema and the exact token ids: anything that would make the
stored K/V wrong for this request changes the name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

#: config keys that do not change what the model computes
VOLATILE_CONFIG_KEYS = frozenset({
    "transformers_version", "_name_or_path", "architectures", "torch_dtype", "dtype", "use_cache",
    "output_attentions", "output_hidden_states", "return_dict", "_commit_hash", "_attn_implementation",
    "_attn_implementation_autoset", "auto_map", "id2label", "label2id", "problem_type", "tokenizer_class",
})


def make_namespace(*parts: object) -> str:
    """First 32 hex chars of sha256 of the parts (as text) joined by ``|``."""
    text = "|".join(str(part) for part in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def tokens_text(token_ids: Iterable[int]) -> str:
    """Token ids as the reference writes them inside a namespace: comma-joined decimals."""
    return ",".join(str(int(t)) for t in token_ids)


def config_hash(config: dict) -> str:
    """sha256 of the canonical JSON of a model config, without keys that do not affect the math."""
    kept = {k: v for k, v in config.items() if k not in VOLATILE_CONFIG_KEYS}
    text = json.dumps(kept, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def tokenizer_hash(tokenizer: object) -> str:
    """A stable hash of a tokenizer's vocabulary and special tokens (empty if it has none we can read)."""
    if tokenizer is None:
        return ""
    if isinstance(tokenizer, str):
        return hashlib.sha256(tokenizer.encode()).hexdigest()
    fingerprint = getattr(tokenizer, "pion_fingerprint", None)
    if fingerprint:
        return hashlib.sha256(str(fingerprint).encode()).hexdigest()
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if get_vocab is None:
        raise TypeError(f"cannot fingerprint tokenizer of type {type(tokenizer).__name__}; pass a hash string")
    vocab = sorted(get_vocab().items())
    specials = sorted(str(t) for t in getattr(tokenizer, "all_special_tokens", []))
    text = json.dumps([vocab, specials], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint_hash(fingerprint: dict) -> str:
    """The digest of a model fingerprint dict: what manifests and namespaces carry."""
    text = json.dumps(fingerprint, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def prefix_namespace(fp_hash: str, schema_tag: str, token_ids: Sequence[int]) -> str:
    """The namespace of a prefix when the caller gave none."""
    return make_namespace("pion", fp_hash, schema_tag, tokens_text(token_ids))


def weights_digest(samples) -> str:
    """sha256 over ``(name, shape, bytes)`` triples.

    Not what Pion's adapters use for weights any more: a strided sample of a few parameters
    misses fine-tunes (issue 12); they hash every byte (``pion.client.fingerprint.digest``).
    Kept for callers that hash what they have by other means.
    """
    digest = hashlib.sha256()
    for name, shape, data in samples:
        digest.update(f"{name}|{tuple(shape)}|".encode())
        digest.update(data)
    return digest.hexdigest()


def pick_probe(items: list, count: int = 8) -> list:
    """About ``count`` entries spread evenly over ``items``, always the first and the last (not
    for weights: a probe misses fine-tunes; see ``weights_digest``)."""
    if len(items) <= count:
        return list(items)
    step = max(1, len(items) // count)
    picked = items[::step]
    return picked if picked[-1] is items[-1] else [*picked, items[-1]]
