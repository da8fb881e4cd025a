"""The portable prefix artifact: one stored prefix as a safetensors file a caller owns.

``KV.PREFIX.EXPORT ns`` answers these bytes and ``KV.PREFIX.IMPORT`` takes them back, on this
server or on another machine's; ``PionPromptCache.export`` / ``import_`` write and read the file.
Client and server both use this module (a leaf: numpy, json and hashlib only), so the format is
defined once.

Layout: a standard safetensors file (``[u64 header length][JSON header][data]``), readable by
the ``safetensors`` library. Tensors: ``tokens`` (U32, the token ids), ``k.<i>`` and ``v.<i>``
(U8, layer i's rows exactly as stored, in the layer's codec), ``state.<slot>`` (U8, the
recurrent-state blob of that cache slot). ``__metadata__`` (strings): ``format``
(``pion-prefix-artifact``), ``version``, ``ns`` (hex), ``kv_dim``, ``vquant``, ``manifest`` (the
prefix's manifest JSON, unchanged), ``k_codecs``/``v_codecs`` (JSON lists), ``block_size`` and
``seed`` (hex) of the token chain, ``prefill_us``, and ``sha256``: the SHA-256 of the whole file
with those 64 hex digits written as zeros. Any flipped byte or a truncation fails the check.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field

import numpy as np

from pion.protocol.json_input import loads_bounded

FORMAT = "pion-prefix-artifact"
VERSION = "1"
ALIGN = 8
_ZEROS = "0" * 64


class ArtifactError(ValueError):
    """The bytes are not a valid, intact prefix artifact; the message says why."""


@dataclass
class Artifact:
    ns: bytes
    kv_dim: int
    vquant: str
    manifest_raw: bytes
    tokens: np.ndarray
    k_codecs: list[str]
    v_codecs: list[str]
    #: per layer: (K rows, V rows), encoded as stored
    rows: list[tuple[bytes, bytes]]
    states: dict[int, bytes] = field(default_factory=dict)
    block_size: int = 0
    seed: bytes = b""
    prefill_us: int | None = None

    @property
    def manifest(self) -> dict:
        return loads_bounded(self.manifest_raw)


def pack(art: Artifact) -> bytes:
    """The artifact's file bytes."""
    parts: list[tuple[str, str, list[int], bytes]] = [("tokens", "U32", [len(art.tokens)],
                                                        np.asarray(art.tokens, "<u4").tobytes())]
    for index, (k, v) in enumerate(art.rows):
        parts += [(f"k.{index}", "U8", [len(k)], bytes(k)), (f"v.{index}", "U8", [len(v)], bytes(v))]
    parts += [(f"state.{slot}", "U8", [len(blob)], bytes(blob)) for slot, blob in sorted(art.states.items())]
    metadata = {
        "format": FORMAT, "version": VERSION, "ns": art.ns.hex(), "kv_dim": str(art.kv_dim), "vquant": art.vquant,
        "manifest": art.manifest_raw.decode("utf-8"), "k_codecs": json.dumps(art.k_codecs),
        "v_codecs": json.dumps(art.v_codecs), "block_size": str(art.block_size), "seed": art.seed.hex(),
        "prefill_us": "" if art.prefill_us is None else str(art.prefill_us), "sha256": _ZEROS,
    }
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape, data in parts:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % ALIGN)
    body = b"".join([struct.pack("<Q", len(text)), text, *(data for _, _, _, data in parts)])
    digest = hashlib.sha256(body).hexdigest().encode()
    at = body.index(b'"sha256":"' + _ZEROS.encode() + b'"') + len(b'"sha256":"')
    return body[:at] + digest + body[at + 64:]


def unpack(data: bytes | memoryview) -> Artifact:
    """Parse and verify an artifact (checksum first, then structure); raises ArtifactError."""
    data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    if len(data) < 8:
        raise ArtifactError(f"not a prefix artifact: {len(data)} bytes")
    (length,) = struct.unpack_from("<Q", data, 0)
    if length > len(data) - 8 or length > 64 * 1024 * 1024:
        raise ArtifactError("the header length does not fit the file (truncated or not an artifact)")
    raw = bytes(data[8:8 + length])
    try:
        header = loads_bounded(raw)  # a caller's bytes: no nesting deep enough to recurse out
        metadata = header["__metadata__"]
        expected = metadata["sha256"]
    except (ValueError, KeyError, TypeError):
        raise ArtifactError("not a prefix artifact: its header is not the expected JSON") from None
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        raise ArtifactError(f"not a {FORMAT} version {VERSION} (format {metadata.get('format')!r})")
    marker = b'"sha256":"' + str(expected).encode() + b'"'
    if raw.count(marker) != 1 or len(str(expected)) != 64:
        raise ArtifactError("the checksum field is malformed")
    at = raw.index(marker) + len(b'"sha256":"')
    digest = hashlib.sha256()
    digest.update(data[:8])
    digest.update(raw[:at] + _ZEROS.encode() + raw[at + 64:])
    digest.update(data[8 + length:])
    if digest.hexdigest() != expected:
        raise ArtifactError("the checksum does not match: the file is damaged or truncated")
    return _build(header, metadata, data[8 + length:])


def _build(header: dict, metadata: dict, body) -> Artifact:
    def tensor(name: str) -> bytes:
        entry = header.get(name)
        if not isinstance(entry, dict):
            raise ArtifactError(f"tensor {name} is missing")
        begin, end = entry["data_offsets"]
        if not 0 <= begin <= end <= len(body):
            raise ArtifactError(f"tensor {name} lies outside the file")
        return bytes(body[begin:end])

    try:
        k_codecs, v_codecs = loads_bounded(metadata["k_codecs"].encode()), loads_bounded(metadata["v_codecs"].encode())
        rows = [(tensor(f"k.{i}"), tensor(f"v.{i}")) for i in range(len(k_codecs))]
        states = {int(name.split(".", 1)[1]): tensor(name) for name in header if name.startswith("state.")}
        return Artifact(
            ns=bytes.fromhex(metadata["ns"]), kv_dim=int(metadata["kv_dim"]), vquant=metadata["vquant"],
            manifest_raw=metadata["manifest"].encode("utf-8"), tokens=np.frombuffer(tensor("tokens"), "<u4").copy(),
            k_codecs=k_codecs, v_codecs=v_codecs, rows=rows, states=states, block_size=int(metadata["block_size"]),
            seed=bytes.fromhex(metadata["seed"]),
            prefill_us=int(metadata["prefill_us"]) if metadata["prefill_us"] else None,
        )
    except (KeyError, ValueError, TypeError) as exc:
        if isinstance(exc, ArtifactError):
            raise
        raise ArtifactError(f"a field of the artifact is malformed ({exc})") from None
