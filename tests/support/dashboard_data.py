"""Prefixes for the dashboard's tests and screenshot, stored over the wire as any client would.

``store_prefix`` registers a namespace and stores its K and V rows; with ``model`` it is a
staged store with a manifest (REGISTER ... MANIFEST ... STAGE, the rows with TOKEN, PUBLISH),
which is what ``PionPromptCache`` writes, so the table's model column has something to show.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np


def manifest(model: str, tokens: int, layers: int) -> str:
    fingerprint = {"runtime": "transformers", "class": model, "dtype": "float16"}
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    return json.dumps({"format": "pion-prefix-v1", "fingerprint": fingerprint, "fingerprint_sha256": digest,
                       "n_layers": layers, "token_count": tokens, "state_layers": []})


def store_commands(ns: str, tokens: int, *, layers: int = 2, dim: int = 32, codec: str = "fp16",
                   model: str | None = None, prefill_ms: int | None = None) -> list[list]:
    data = np.ones((tokens, dim), np.float32).tobytes()
    extra: list = ["PREFILL_MS", prefill_ms] if prefill_ms else []
    if model is None:
        commands: list[list] = [["KV.PREFIX.REGISTER", ns, dim, codec, *extra]]
        token: list = []
    else:
        stage = f"t-{ns}"
        commands = [["KV.PREFIX.REGISTER", ns, dim, codec, *extra, "MANIFEST", manifest(model, tokens, layers),
                     "STAGE", stage]]
        token = ["TOKEN", stage]
    for side in ("_pk", "_pv"):
        for layer in range(layers):
            commands.append(["V.STOREBATCH", ns + side, layer, 0, tokens, data, *token])
    if model is not None:
        commands.append(["KV.PREFIX.PUBLISH", ns, f"t-{ns}"])
    return commands


def store_prefix(r, ns: str, tokens: int, **options) -> None:
    pipe = r.pipeline(transaction=False)
    for command in store_commands(ns, tokens, **options):
        pipe.execute_command(*command)
    for reply in pipe.execute(raise_on_error=False):
        if isinstance(reply, Exception):
            raise reply


def store_many(r, count: int, prefix: str = "p", tokens: int = 1, batch: int = 500) -> None:
    """``count`` small prefixes ``prefix00000``... registered only (no rows): the table's load."""
    for start in range(0, count, batch):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + batch, count)):
            pipe.execute_command("KV.PREFIX.REGISTER", f"{prefix}{i:05d}", 32, "fp16")
        pipe.execute()


def hit(r, ns: str, times: int = 1) -> None:
    for _ in range(times):
        assert r.execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT"
