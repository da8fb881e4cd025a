"""The byte format of one recurrent-state layer as stored with ``SSM.PREFIX.STORE``.

A layer's state is a few named arrays (conv state, recurrent state, ...) plus small scalars
(flags, kernel sizes). The blob is self-describing so any version of the client can read it:

    b"PSTB" | u32 version=1 | u32 header_len | header (JSON) | array bytes, back to back

The header is ``{"type": <runtime class>, "meta": {...}, "arrays": [[name, dtype, shape], ...]}``;
an array entry with dtype ``null`` stands for a missing (None) array. Array bytes are the raw
little-endian values in C order, bf16 kept as bf16 (ml_dtypes), so a round trip is bit-exact.
"""

from __future__ import annotations

import json
import struct

import numpy as np

MAGIC = b"PSTB"
VERSION = 1
_HEAD = struct.Struct("<4sII")


def _dtype_name(arr: np.ndarray) -> str:
    return "bfloat16" if arr.dtype.name == "bfloat16" else arr.dtype.newbyteorder("<").str


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def pack_state(type_name: str, arrays: list[tuple[str, np.ndarray | None]], meta: dict | None = None) -> bytes:
    """One layer's state as a blob; ``arrays`` keeps its order (None entries allowed)."""
    entries, chunks = [], []
    for name, arr in arrays:
        if arr is None:
            entries.append([name, None, None])
            continue
        arr = np.ascontiguousarray(arr)
        entries.append([name, _dtype_name(arr), list(arr.shape)])
        chunks.append(arr.tobytes())
    header = json.dumps({"type": type_name, "meta": meta or {}, "arrays": entries}, separators=(",", ":")).encode()
    return b"".join([_HEAD.pack(MAGIC, VERSION, len(header)), header, *chunks])


def unpack_state(blob: bytes) -> tuple[str, list[tuple[str, np.ndarray | None]], dict]:
    """``(type_name, [(name, array or None), ...], meta)``; raises ValueError on a foreign blob."""
    if len(blob) < _HEAD.size:
        raise ValueError("state blob too short")
    magic, version, header_len = _HEAD.unpack_from(blob)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a Pion state blob (magic {magic!r}, version {version})")
    header = json.loads(bytes(blob[_HEAD.size:_HEAD.size + header_len]))
    offset = _HEAD.size + header_len
    arrays: list[tuple[str, np.ndarray | None]] = []
    for name, dtype_name, shape in header["arrays"]:
        if dtype_name is None:
            arrays.append((name, None))
            continue
        dtype = _dtype(dtype_name)
        count = int(np.prod(shape, dtype=np.int64))
        arr = np.frombuffer(blob, dtype=dtype, count=count, offset=offset).reshape(shape)
        arrays.append((name, arr))
        offset += count * dtype.itemsize
    if offset != len(blob):
        raise ValueError(f"state blob has {len(blob) - offset} trailing bytes")
    return header["type"], arrays, header.get("meta", {})
