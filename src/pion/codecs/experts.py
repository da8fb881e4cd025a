"""Expert-weight byte layouts shared by the server's expert tier and the client (spec 10.3).

- The ``MOE.EXPERT.FETCH`` blob: ``[u8 n_blobs]`` then per blob ``[u8 proj][u8 comp][u32 LE
  len][bytes]``; proj 0/1/2 = gate/up/down, comp 0/1/2 = weight/scales/biases (a float expert
  has only weights; an affine-quantized one has all three, as in mlx checkpoints).
- The ``MHST`` histogram file: ``b"MHST"``, ``u32 version``, ``u32 count``, then per entry
  ``[u8 layer][u8 expert][u64 count]`` (version 1, the reference's). Models with more than 256
  layers or experts per layer get version 2, the same with ``u16`` layer and expert (ours).
- Affine quantization in mlx's layout: per group of ``group_size`` values along a row, ``w =
  scale * q + bias``; the codes are a little-endian bit stream packed into ``uint32`` words
  (8 four-bit codes a word; 3-, 5- and 6-bit codes straddle words, as mlx packs them).

Pure functions, numpy only.
"""

from __future__ import annotations

import struct

import numpy as np

PROJS = ("gate", "up", "down")
COMPS = ("weight", "scales", "biases")
MHST_MAGIC = b"MHST"
_BLOB_HEAD = struct.Struct("<BBI")
_MHST_HEAD = struct.Struct("<4sII")
_MHST_ENTRY = {1: np.dtype([("layer", "u1"), ("expert", "u1"), ("count", "<u8")]),
               2: np.dtype([("layer", "<u2"), ("expert", "<u2"), ("count", "<u8")])}
MAX_BLOBS = 255


class LayoutError(ValueError):
    """Bytes that are not the layout they claim to be (the message says where)."""


def fetch_pieces(parts: list[tuple[int, int, memoryview | bytes]]) -> list[bytes | memoryview]:
    """The FETCH blob as pieces (small headers between the payloads, which are not copied)."""
    if len(parts) > MAX_BLOBS:
        raise LayoutError(f"an expert has {len(parts)} blobs, more than {MAX_BLOBS}")
    pieces: list[bytes | memoryview] = [bytes((len(parts),))]
    for proj, comp, data in parts:
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        pieces.append(_BLOB_HEAD.pack(proj, comp, size))
        pieces.append(data)
    return pieces


def fetch_size(sizes: list[int]) -> int:
    """Bytes of a FETCH blob whose payloads have ``sizes``."""
    return 1 + sum(_BLOB_HEAD.size + size for size in sizes)


def decode_fetch(blob: bytes | memoryview) -> list[tuple[int, int, memoryview]]:
    """``[(proj, comp, payload view)]`` of a FETCH blob; LayoutError if it is not one."""
    view = memoryview(blob).cast("B")
    if not view.nbytes:
        raise LayoutError("empty FETCH blob")
    count, offset, out = view[0], 1, []
    for index in range(count):
        if offset + _BLOB_HEAD.size > view.nbytes:
            raise LayoutError(f"FETCH blob ends inside the header of blob {index}")
        proj, comp, size = _BLOB_HEAD.unpack_from(view, offset)
        offset += _BLOB_HEAD.size
        if proj >= len(PROJS) or comp >= len(COMPS) or offset + size > view.nbytes:
            raise LayoutError(f"FETCH blob {index}: proj {proj} comp {comp} len {size} does not fit")
        out.append((proj, comp, view[offset:offset + size]))
        offset += size
    if offset != view.nbytes:
        raise LayoutError(f"FETCH blob has {view.nbytes - offset} bytes after its last blob")
    return out


def encode_mhst(entries: list[tuple[int, int, int]]) -> bytes:
    """An MHST file of ``(layer, expert, count)`` entries (version 2 only if an index > 255)."""
    wide = any(layer > 255 or expert > 255 for layer, expert, _ in entries)
    version = 2 if wide else 1
    table = np.array([tuple(e) for e in entries], dtype=_MHST_ENTRY[version])
    return _MHST_HEAD.pack(MHST_MAGIC, version, len(entries)) + table.tobytes()


def decode_mhst(data: bytes) -> list[tuple[int, int, int]]:
    if len(data) < _MHST_HEAD.size:
        raise LayoutError(f"not an MHST file ({len(data)} bytes)")
    magic, version, count = _MHST_HEAD.unpack_from(data)
    if magic != MHST_MAGIC or version not in _MHST_ENTRY:
        raise LayoutError(f"not an MHST file (magic {magic!r}, version {version})")
    dtype = _MHST_ENTRY[version]
    if len(data) != _MHST_HEAD.size + count * dtype.itemsize:
        raise LayoutError(f"MHST file: {count} entries need {count * dtype.itemsize} bytes, "
                          f"the file has {len(data) - _MHST_HEAD.size}")
    table = np.frombuffer(data, dtype=dtype, count=count, offset=_MHST_HEAD.size)
    return [(int(r["layer"]), int(r["expert"]), int(r["count"])) for r in table]


def quantize_affine(w: np.ndarray, bits: int, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes as uint32 words, scales, biases)`` of a 2-D float array, mlx's affine layout.

    Scales and biases are float32 here; a checkpoint may store them as float16 or bfloat16.
    """
    rows, cols = w.shape
    _check_shape(cols, bits, group_size)
    groups = w.astype(np.float32).reshape(rows, cols // group_size, group_size)
    low, high = groups.min(axis=-1), groups.max(axis=-1)
    scales = (high - low) / np.float32(2**bits - 1)
    scales[scales == 0] = 1.0
    codes = np.clip(np.rint((groups - low[..., None]) / scales[..., None]), 0, 2**bits - 1).astype(np.uint8)
    bitplanes = (codes.reshape(rows, cols, 1) >> np.arange(bits, dtype=np.uint8)) & 1
    packed = np.packbits(bitplanes.reshape(rows, cols * bits), axis=1, bitorder="little")
    return packed.view("<u4"), scales, low.astype(np.float32)


def dequantize_affine(codes: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int,
                      group_size: int) -> np.ndarray:
    """float32 ``[rows, cols]`` from mlx-layout codes (uint32 words) and per-group scales/biases."""
    rows = codes.shape[0]
    cols = codes.shape[1] * 32 // bits
    _check_shape(cols, bits, group_size)
    if scales.shape != (rows, cols // group_size) or biases.shape != scales.shape:
        raise LayoutError(f"scales {scales.shape} / biases {biases.shape} do not match codes {codes.shape} "
                          f"at {bits} bits, group {group_size}")
    raw = np.ascontiguousarray(codes).view(np.uint8).reshape(rows, -1)
    if bits == 8:
        values = raw.astype(np.float32)
    elif bits == 4:
        values = np.empty((rows, cols), dtype=np.float32)
        values[:, 0::2] = raw & 0x0F
        values[:, 1::2] = raw >> 4
    else:
        planes = np.unpackbits(raw, axis=1, bitorder="little").reshape(rows, cols, bits)
        values = (planes * (1 << np.arange(bits, dtype=np.uint16))).sum(axis=-1, dtype=np.uint16).astype(np.float32)
    grouped = values.reshape(rows, -1, group_size)
    out = grouped * scales.astype(np.float32)[..., None] + biases.astype(np.float32)[..., None]
    return out.reshape(rows, cols)


def _check_shape(cols: int, bits: int, group_size: int) -> None:
    if bits not in (2, 3, 4, 5, 6, 8):
        raise LayoutError(f"affine quantization with {bits} bits is not supported (2, 3, 4, 5, 6 or 8)")
    if group_size <= 0 or cols % group_size or (cols * bits) % 32:
        raise LayoutError(f"{cols} columns do not split into groups of {group_size} of whole u32 words at {bits} bits")
