"""The wire side of the prompt cache: one pipeline to store a prefix, one to fetch it.

Store (one round trip, all or nothing): a staged store. ``KV.PREFIX.REGISTER`` with
``PREFILL_MS``, ``CHAIN``, ``MANIFEST`` and ``STAGE <random token>`` (the server derives a
per-layer schema from the manifest's codecs), every layer's K and V rows (``V.STOREBATCH ... FMT
RAW TOKEN <token>``, encoded here with ``pion.codecs``), the state blobs (``SSM.PREFIX.STORE ...
TOKEN <token>``), then ``KV.PREFIX.PUBLISH``: the server makes the prefix readable in one step
once everything is in, or discards it (another prefix holds the namespace, a part is missing).
A refused REGISTER makes every later write of the pipeline fail too: nothing lands anywhere.

Fetch (one round trip): ``KV.PREFIX.LOOKUP``, ``KV.PREFIX.GENERATION``, ``KV.PREFIX.MANIFEST``,
``V.FETCH <ns>_pk BATCH ... FMT RAW``, the same for ``_pv``, each state blob, and
``KV.PREFIX.GENERATION`` again. Rows come back encoded and are decoded here (the float codecs by
a zero-copy view). A pipeline is not a transaction: the server may run other clients' commands
between ours (it does whenever our replies back up). The two generations must be equal and
non-zero, else the namespace's entry changed meanwhile (replaced, or evicted and stored again by
another model) and the replies may mix two prefixes: a miss, never a mixed cache.
"""

from __future__ import annotations

import secrets
from typing import NamedTuple

import numpy as np

from pion.client.blocks import token_blob
from pion.client.client import PionClient
from pion.client.errors import CorruptReply, PionError
from pion.client.rows import bytes_per_row, decode_rows, is_uniform, native_dtype


def sides(ns: str) -> tuple[str, str]:
    return f"{ns}_pk", f"{ns}_pv"


def encode_layer(rows: np.ndarray, codec: str) -> bytes | memoryview:
    """Rows in the layer's codec, ready for ``FMT RAW`` (no copy when they already are)."""
    native = native_dtype(codec)
    if native is not None:
        if rows.dtype != native:
            rows = rows.astype(native)
        return memoryview(np.ascontiguousarray(rows).view(np.uint8)).cast("B")
    from pion.codecs import get_codec

    return get_codec(codec).encode(rows.astype(np.float32, copy=False))


def store(client: PionClient, ns: str, ids: list[int], kv: list[tuple[np.ndarray, np.ndarray]],
          states: dict[int, bytes], schema: dict, manifest: bytes, block_size: int, prefill_ms: float | None,
          after: list[list] = (), seed: bytes | None = None, replace: bool = False) -> list:
    """Store one prefix, all or nothing, in one pipeline; raises the first error reply of the store.

    A staged store (``KV.PREFIX.REGISTER ... STAGE token``): the rows and state blobs go into
    the server's staging for a fresh random token and become readable only at the final
    ``KV.PREFIX.PUBLISH``, which the server refuses (discarding them) when the namespace holds
    another prefix (unless ``replace``) or when anything is missing. ``after``: commands to run
    in the same round trip once the prefix is published (the local lane's ``V.EXPORT``); their
    replies, errors included, are returned.
    """
    pk, pv = sides(ns)
    dims = {rows.shape[1] for pair in kv for rows in pair}
    if len(dims) > 1:
        raise NotImplementedError(f"layers of different widths {sorted(dims)} cannot be registered as one prefix")
    kv_dim = dims.pop() if dims else 1
    n = len(ids)
    token = secrets.token_hex(16)
    vquant = (schema["k"][0] if schema["k"] else "fp16") if is_uniform(schema) else schema["k"][0]
    commands: list[list] = [PionClient.register_args(
        ns, kv_dim, vquant, prefill_ms=prefill_ms, chain=(block_size, token_blob(ids)), manifest=manifest,
        stage=token, replace=replace, **({"seed": seed} if seed is not None else {}))]
    for layer, (k_rows, v_rows) in enumerate(kv):
        commands.append(["V.STOREBATCH", pk, layer, 0, n, encode_layer(k_rows, schema["k"][layer]), "FMT", "RAW",
                         "TOKEN", token])
        commands.append(["V.STOREBATCH", pv, layer, 0, n, encode_layer(v_rows, schema["v"][layer]), "FMT", "RAW",
                         "TOKEN", token])
    commands += [["SSM.PREFIX.STORE", ns, slot, blob, "TOKEN", token] for slot, blob in states.items()]
    commands.append(["KV.PREFIX.PUBLISH", ns, token])
    replies = client.pipeline_execute([*commands, *after])
    for reply in replies[:len(commands)]:
        if isinstance(reply, PionError):
            raise reply
    return replies[len(commands):]


class Fetched(NamedTuple):
    manifest: bytes
    k_raw: list
    v_raw: list
    states: dict[int, bytes]
    nbytes: int


def fetch(client: PionClient, ns: str, n_tokens: int, layout, partial: bool = False,
          form: str = "range", generation: int | None = None) -> Fetched | None:
    """Manifest, encoded K and V rows ``[0, n_tokens)`` and state blobs of ``ns``; None on a miss.

    ``partial``: only the head of the prefix is used, so the server's receipt credits
    ``n_tokens`` (``LOOKUP ... TOKENS``) rather than the whole prefix. ``form``: ``"range"``
    asks for each layer with its own ``V.FETCH ... RANGE`` (all in the same pipeline, so still
    one round trip), which lets the server start sending layer 0 while it renders the rest;
    ``"batch"`` asks with one ``V.FETCH ... BATCH`` per side (measured slower for large
    prefixes: the whole side is rendered before the first byte leaves). ``generation``: the entry
    expected (what MATCH answered); another one is a miss.
    """
    n_layers = len(layout.attn)
    lookup = ["KV.PREFIX.LOOKUP", ns] + (["TOKENS", n_tokens] if partial else [])
    asked = ["KV.PREFIX.GENERATION", ns]
    commands: list[list] = [lookup, asked, ["KV.PREFIX.MANIFEST", ns],
                            *row_commands(ns, n_tokens, n_layers, form)]
    commands += [["SSM.PREFIX.FETCH", ns, slot] for slot in layout.state]
    replies = client.pipeline_execute([*commands, asked], fast=True)
    hit, manifest = replies[0], replies[2]
    if isinstance(hit, PionError):
        raise hit
    if _text(hit).upper() != "HIT" or not isinstance(manifest, bytes | bytearray):
        return None
    if not one_entry(replies[1], replies[-1], generation):
        return None  # replaced, or dropped and stored again, while we read: the replies may mix two prefixes
    row_count = 0 if not n_layers else 2 if form == "batch" else 2 * n_layers
    rows, state_raw = replies[3:3 + row_count], replies[3 + row_count:-1]
    if any(isinstance(r, PionError) or r is None for r in (*rows, *state_raw)):
        return None  # dropped or evicted between LOOKUP and FETCH: a miss
    k_raw, v_raw = (rows[0], rows[1]) if form == "batch" and n_layers else (rows[:n_layers], rows[n_layers:])
    nbytes = sum(len(x) for x in (*k_raw, *v_raw, *state_raw) if x is not None)
    return Fetched(manifest, k_raw, v_raw, dict(zip(layout.state, state_raw, strict=True)), nbytes)


class Exported(NamedTuple):
    manifest: bytes
    #: the export file's path, or the server's error (V.EXPORT disabled, a full disk)
    path: str | PionError
    states: dict[int, bytes]


def fetch_export(client: PionClient, ns: str, n_tokens: int, layout, export: list,
                 partial: bool = False, generation: int | None = None) -> Exported | None:
    """The local lane's round trip: LOOKUP, MANIFEST, ``export`` (a V.EXPORT) and the state
    blobs; None on a miss. The rows stay on the server's disk for the caller to map."""
    lookup = ["KV.PREFIX.LOOKUP", ns] + (["TOKENS", n_tokens] if partial else [])
    asked = ["KV.PREFIX.GENERATION", ns]
    commands = [lookup, asked, ["KV.PREFIX.MANIFEST", ns], export, *[["SSM.PREFIX.FETCH", ns, s] for s in layout.state],
                asked]
    replies = client.pipeline_execute(commands)
    hit, manifest, path, state_raw = replies[0], replies[2], replies[3], replies[4:-1]
    if isinstance(hit, PionError):
        raise hit
    if _text(hit).upper() != "HIT" or not isinstance(manifest, bytes | bytearray):
        return None
    if not one_entry(replies[1], replies[-1], generation):
        return None  # the entry changed while we read (see ``fetch``)
    if any(isinstance(r, PionError) or r is None for r in state_raw):
        return None  # dropped or evicted meanwhile: a miss
    if isinstance(path, PionError) and "session not found" in str(path):
        return None
    path = path if isinstance(path, PionError) else _text(path)
    return Exported(bytes(manifest), path, dict(zip(layout.state, state_raw, strict=True)))


def one_entry(first, last, expected: int | None = None) -> bool:
    """Did every reply between two ``KV.PREFIX.GENERATION`` replies come from one entry (the
    ``expected`` one, when given)?"""
    for reply in (first, last):
        if isinstance(reply, PionError):
            raise reply
    return isinstance(first, int) and first != 0 and first == last and expected in (None, first)


def row_commands(ns: str, n_tokens: int, n_layers: int, form: str) -> list[list]:
    if not n_layers:
        return []
    if form == "batch":
        return [["V.FETCH", sid, "BATCH", 0, n_tokens, n_layers, "FMT", "RAW"] for sid in sides(ns)]
    return [["V.FETCH", sid, layer, "RANGE", 0, n_tokens, "FMT", "RAW"] for sid in sides(ns) for layer in range(n_layers)]


def text(value) -> str:
    """A simple-string or bulk reply as text."""
    return _text(value)


def _text(value) -> str:
    return value.decode("latin-1") if isinstance(value, bytes | bytearray) else str(value)


def decode(fetched: Fetched, n: int, schema: dict, layout) -> list[tuple[np.ndarray, np.ndarray]]:
    """K and V rows per attention layer, checked against the expected sizes."""
    return _decode_sides(fetched.k_raw, fetched.v_raw, n, schema, layout)


def _decode_sides(k_raw: list, v_raw: list, n: int, schema: dict, layout) -> list[tuple[np.ndarray, np.ndarray]]:
    if len(k_raw) != len(layout.attn) or len(v_raw) != len(layout.attn):
        raise CorruptReply(f"BATCH answered {len(k_raw)}/{len(v_raw)} layers, {len(layout.attn)} expected")
    kv = []
    for layer, (k, v) in enumerate(zip(k_raw, v_raw, strict=True)):
        if k is None or v is None:
            raise CorruptReply(f"layer {layer} holds no rows")
        k_dim, v_dim = layout.k_dims[layer], layout.v_dims[layer]
        for raw, codec, dim in ((k, schema["k"][layer], k_dim), (v, schema["v"][layer], v_dim)):
            if len(raw) != n * bytes_per_row(codec, dim):
                raise CorruptReply(f"layer {layer}: {len(raw)} bytes for {n} {codec} rows of {dim}")
        kv.append((decode_rows(k, schema["k"][layer], n, k_dim), decode_rows(v, schema["v"][layer], n, v_dim)))
    return kv
