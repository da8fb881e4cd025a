"""The local lane: on the server's own host, a hit maps the server's ``V.EXPORT`` file.

Why: through loopback TCP a 2,048-token prefix of a small model is ~94 MB that the server copies
into the socket and the client copies out (tens of milliseconds each). A client on the same
host can instead ask the server to render the rows once into a safetensors file
(``V.EXPORT``, head-major, in the model's dtype) and map it: the pages are already in the page
cache, so a hit costs one small round trip and page-table entries.

The mapping is private and copy-on-write: the runtime may write into its cache tensors without
touching the file, and the server may unlink the file (a newer export replaced it) while this
process still reads it. Where the file cannot be opened (the server runs in another container
or as another user), the caller falls back to the RESP lane.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import urllib.parse

import numpy as np

#: model dtype (numpy name) -> V.EXPORT's DTYPE
EXPORT_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "bfloat16"}
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
MAX_HEADER = 100 * 1024 * 1024


def is_local(url: str) -> bool:
    """Does ``url`` reach a server on this host (a unix socket, or a loopback address)?"""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "unix":
        return True
    host = (parts.hostname or "127.0.0.1").lower()
    return host in _LOOPBACK or host.startswith("127.")


def can_export(layout) -> bool:
    """Can V.EXPORT's one shape hold this layout? (every layer the same heads, K and V the same
    head dim, a dtype it writes)"""
    return (bool(layout.attn) and len(set(layout.heads)) == 1 and layout.heads[0][1] == layout.heads[0][2]
            and layout.dtype in EXPORT_DTYPE)


def export_args(pk: str, pv: str, n_tokens: int, layout) -> list | None:
    """The ``V.EXPORT`` command for a layout, or None when the layout cannot use it."""
    if not can_export(layout):
        return None
    heads, dim, _ = layout.heads[0]
    return ["V.EXPORT", pk, pv, 0, n_tokens, len(layout.attn), heads, dim, "DTYPE", EXPORT_DTYPE[layout.dtype]]


def open_export(path: str, n_layers: int, shape: tuple[int, ...], dtype: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(K, V)`` arrays ``[1, heads, n, dim]`` per layer, viewing a private mapping of ``path``.

    Every tensor's dtype, shape and byte range is checked against what was asked, so a file that
    is not the expected export fails with ValueError instead of loading the wrong values.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise ValueError(f"{path}: not a safetensors file ({size} bytes)")
        mapped = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    (header_len,) = struct.unpack_from("<Q", mapped, 0)
    if header_len > min(MAX_HEADER, size - 8):
        raise ValueError(f"{path}: header length {header_len} does not fit the file")
    header = json.loads(bytes(mapped[8:8 + header_len]))
    base = 8 + header_len
    element = np.dtype(_numpy_dtype(dtype))
    count = int(np.prod(shape))
    out = []
    for layer in range(n_layers):
        pair = []
        for side in "kv":
            entry = header.get(f"{side}.{layer}")
            if not isinstance(entry, dict) or entry.get("dtype") != dtype or tuple(entry.get("shape", ())) != shape:
                raise ValueError(f"{path}: tensor {side}.{layer} is {entry!r}, expected {dtype} {list(shape)}")
            begin, end = entry["data_offsets"]
            if end - begin != count * element.itemsize or base + end > size:
                raise ValueError(f"{path}: tensor {side}.{layer} has a bad byte range {begin}..{end}")
            pair.append(np.frombuffer(mapped, dtype=element, count=count, offset=base + begin).reshape(shape))
        out.append((pair[0], pair[1]))
    return out


def _numpy_dtype(name: str):
    if name == "BF16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _ST_DTYPES[name]
