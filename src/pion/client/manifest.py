"""Manifests: what a stored prefix says about itself, and the check a client runs before loading.

The client writes a manifest with every prefix it stores (``KV.PREFIX.REGISTER ... MANIFEST``)
and checks it on every hit, full or partial: a prefix made by another model, another dtype,
another codec schema or other tokens is a *miss* (counted in ``manifest_mismatches``), never
loaded. This is the fail-closed half of the prefix contract (docs/design.md section 1): a namespace
collision or a caller's reused namespace cannot silently feed wrong K/V to the model.

Field names the server also reads: ``n_layers`` (V-store layers), ``token_count``,
``n_kv_heads``/``head_dim`` (when every layer agrees), ``tokens_sha256``, ``codecs``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np

FORMAT = "pion-prefix-v1"


def tokens_sha256(token_ids: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(token_ids, dtype="<u4").tobytes()).hexdigest()


def build_manifest(*, fingerprint: dict, fp_hash: str, layout: dict, codecs: dict, token_ids: Sequence[int],
                   block_size: int) -> dict:
    """The manifest of a prefix about to be stored.

    It holds nothing that differs between two stores of the same prefix (no times), so two
    processes that both missed can both register it: the server refuses a changed manifest.
    """
    heads = {tuple(h) for h in layout["heads"]}
    manifest = {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "fingerprint_sha256": fp_hash,
        "layout": layout,
        "n_layers": len(layout["attn"]),
        "state_layers": list(layout["state"]),
        "token_count": len(token_ids),
        "tokens_sha256": tokens_sha256(token_ids),
        "block_size": block_size,
        "codecs": codecs,
    }
    if len(heads) == 1:
        n_kv_heads, k_dim, v_dim = heads.pop()
        if k_dim == v_dim:
            manifest["n_kv_heads"], manifest["head_dim"] = n_kv_heads, k_dim
    return manifest


def encode_manifest(manifest: dict) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def parse_manifest(raw: bytes | str | dict | None) -> dict | None:
    """The manifest as a dict, or None when absent or not JSON."""
    if raw is None or isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def mismatch(manifest: dict | None, *, fp_hash: str, layout: dict, codecs: dict, token_ids: Sequence[int] | None,
             min_tokens: int = 0) -> str | None:
    """Why this manifest must not be loaded for this model and request; None when it may.

    ``token_ids`` given: the prefix must hold exactly these tokens. Otherwise (a partial
    reuse found by block hashes) it must hold at least ``min_tokens``.
    """
    if manifest is None:
        return "no manifest"
    if manifest.get("format") != FORMAT:
        return f"unknown manifest format {manifest.get('format')!r}"
    if manifest.get("fingerprint_sha256") != fp_hash:
        return "another model (fingerprint differs)"
    if manifest.get("layout") != layout:
        return "another cache layout"
    if manifest.get("codecs") != codecs:
        return "another codec schema"
    count = manifest.get("token_count")
    if not isinstance(count, int):
        return "no token count"
    if token_ids is not None:
        if count != len(token_ids) or manifest.get("tokens_sha256") != tokens_sha256(token_ids):
            return "other tokens"
    elif count < min_tokens:
        return f"holds {count} tokens, {min_tokens} needed"
    return None
