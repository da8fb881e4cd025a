"""HNSW graphs saved beside the snapshot and loaded at start, so a restart does not rebuild them.

SVS-VAMANA fields' graphs (``svs_graph``) are saved the same way; a compressed one holds int8
codes, so its file also carries the trained code map and its vectors are compared as codes.

Every snapshot (BGSAVE, BGREWRITEAOF, SAVE, a save rule) and a clean shutdown write one file per
HNSW field, ``search/<name>.hnsw`` in the data directory (``name``: a hash of the database,
index and field names). Layout, little-endian::

    PIONHNSW  u16 version  u16 0  u32 meta length  u64 keys length  u64 graph length
    meta      pack_tree({db, index, field, dim, metric, m, ef_construction, count
                         [, compression, codes: [center, scale]]})  (a compressed SVS-VAMANA field)
    keys      u64 slot[count], u32 key length[count], the keys one after another
    graph     usearch's own serialization (``Index.save()``)
    u32       crc32c of every byte before it

The file is written to ``<name>.hnsw.tmp``, fsynced, renamed over the old one and the directory
fsynced, as the snapshot is: a kill -9 at any point leaves the old file or the new one.

**Why a wrong graph is never served.** The file is not trusted to match the keyspace: at start
the crc must hold and the meta must name the field's current parameters (else the file is
ignored and the graph rebuilt), and then each graph entry is *claimed* by a document only if the
document's key is the one the file names for that slot **and** its vector (after the field's
normalisation) equals, bit for bit, the vector the loaded graph holds at that slot. So a file
from an older snapshot, or from a newer one than the log replayed, or written while the builder
was still adding, only costs entries: writes replayed from the log after the snapshot changed a
document's vector, so it does not claim its old entry and is queued for the builder like any
write; entries nobody claims are removed from the graph when the rebuild scan finishes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np

from pion.storage import faults
from pion.storage.fileops import fsync_dir
from pion.storage.serialize import PayloadError, pack_tree, unpack_tree

log = logging.getLogger("pion.search")

DIRNAME = "search"
MAGIC = b"PIONHNSW"
VERSION = 1
SUFFIX = ".hnsw"
_HEAD = struct.Struct("<8sHHIQQ")


def file_name(db_id: int, index: str, field: str) -> str:
    digest = hashlib.sha1(f"{db_id}\0{index}\0{field}".encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:32] + SUFFIX


def _meta(db_id: int, index: str, field: str, params: Any, count: int) -> dict:
    meta = {b"db": db_id, b"index": index.encode("utf-8", "replace"), b"field": field.encode("utf-8", "replace"),
            b"dim": params.dim, b"metric": params.metric.encode(), b"m": params.m,
            b"ef_construction": params.ef_construction, b"count": count}
    if getattr(params, "compression", None) is not None:  # an SVS-VAMANA graph of int8 codes (svs_graph)
        meta[b"compression"] = b"GlobalSQ8"
    return meta


@dataclass(slots=True)
class GraphImage:
    """What the loop captures of one field at a snapshot's consistent point; ``write`` turns it
    into a file on the save's worker thread (where the graph itself is serialized)."""

    db_id: int
    index: str
    field: str
    params: Any
    graph: Any  # vectors._Graph
    slots: np.ndarray  # uint64: slots whose graph entry is the slot's live vector
    keys: list[bytes]  # the document key of each of those slots


@dataclass(slots=True)
class LoadedGraph:
    """A graph file read back and checked: the usearch index and which key may claim each slot."""

    index: Any  # usearch.index.Index
    claims: dict[bytes, list[int]]  # key -> its slots
    vectors: tuple  # float32 (dim,) arrays: the loaded graph's vector of each slot, by position
    position: np.ndarray  # int64 slot -> row of ``vectors`` (-1: not in the graph)
    high: int  # 1 + the largest slot in the graph
    #: a compressed SVS-VAMANA graph's trained code map (center, scale); None: float32 vectors
    codes: tuple[float, float] | None = None


def encode(image: GraphImage, graph_bytes: bytes | bytearray) -> list[bytes | bytearray]:
    """The file's pieces (header, meta, keys, graph, crc), in order."""
    count = len(image.keys)
    fields = _meta(image.db_id, image.index, image.field, image.params, count)
    code_map = getattr(image.graph, "code_map", None)
    if code_map is not None and code_map() is not None:
        fields[b"codes"] = list(code_map())
    meta = pack_tree(fields)
    lengths = np.fromiter((len(k) for k in image.keys), dtype=np.uint32, count=count)
    keys = np.ascontiguousarray(image.slots, dtype="<u8").tobytes() + lengths.astype("<u4").tobytes() + b"".join(image.keys)
    head = _HEAD.pack(MAGIC, VERSION, 0, len(meta), len(keys), len(graph_bytes))
    crc = 0
    pieces = [head, meta, keys, graph_bytes]
    for piece in pieces:
        crc = crc32c.crc32c(piece, crc)
    pieces.append(struct.pack("<I", crc))
    return pieces


def write(directory: str, images: list[GraphImage], keep: set[str] | frozenset[str] = frozenset()) -> int:
    """Write each image's file (temp, fsync, rename, directory fsync); returns how many were written.

    Files of fields no longer present (neither an image nor named in ``keep``) are removed. A
    field whose graph cannot be written keeps its previous file (still safe to load: see the
    module docstring)."""
    folder = os.path.join(directory, DIRNAME)
    if not images and not os.path.isdir(folder):
        return 0
    os.makedirs(folder, exist_ok=True)
    written = 0
    wanted = set(keep)
    for image in images:
        name = file_name(image.db_id, image.index, image.field)
        wanted.add(name)
        path = os.path.join(folder, name)
        tmp = path + ".tmp"
        try:
            graph_bytes = image.graph.save_bytes()
            if graph_bytes is None:
                continue
            faults.check("snapshot.write")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for piece in encode(image, graph_bytes):
                    view = memoryview(piece)
                    while view:
                        view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            written += 1
        except OSError as exc:
            log.warning("HNSW graph of %s.%s not saved (%s): the next start rebuilds what it lacks", image.index,
                        image.field, exc)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    for entry in os.listdir(folder):
        if (entry.endswith(SUFFIX) and entry not in wanted) or entry.endswith(SUFFIX + ".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, entry))
    fsync_dir(folder)
    return written


class GraphFileError(ValueError):
    """A graph file that is missing, damaged or made for other parameters (rebuild instead)."""


def read(directory: str, db_id: int, index: str, field: str, params: Any) -> LoadedGraph:
    """The field's saved graph, checked (crc, version, parameters); raises ``GraphFileError``."""
    from usearch.index import Index

    path = os.path.join(directory, DIRNAME, file_name(db_id, index, field))
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise GraphFileError("no saved graph") from None
    except OSError as exc:
        raise GraphFileError(f"cannot read {path}: {exc}") from None
    if len(data) < _HEAD.size + 4:
        raise GraphFileError(f"{path} is truncated")
    if crc32c.crc32c(memoryview(data)[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
        raise GraphFileError(f"{path}: checksum mismatch")
    magic, version, _, meta_len, keys_len, graph_len = _HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        raise GraphFileError(f"{path}: not a version {VERSION} graph file")
    if _HEAD.size + meta_len + keys_len + graph_len + 4 != len(data):
        raise GraphFileError(f"{path}: section lengths do not add up")
    pos = _HEAD.size
    try:
        meta = unpack_tree(data[pos:pos + meta_len])
    except PayloadError as exc:
        raise GraphFileError(f"{path}: {exc}") from None
    pos += meta_len
    codes = meta.pop(b"codes", None)
    want = _meta(db_id, index, field, params, meta.get(b"count", -1))
    if meta != want:
        raise GraphFileError(f"{path} was saved for other parameters")
    count = int(meta[b"count"])
    slots = np.frombuffer(data, dtype="<u8", count=count, offset=pos).astype(np.int64)
    lengths = np.frombuffer(data, dtype="<u4", count=count, offset=pos + 8 * count).astype(np.int64)
    start = pos + 12 * count
    if start + int(lengths.sum()) != pos + keys_len:
        raise GraphFileError(f"{path}: key section is inconsistent")
    ends = (start + np.cumsum(lengths)).tolist()
    starts = [start] + ends[:-1]
    claims: dict[bytes, list[int]] = {}
    for slot, lo, hi in zip(slots.tolist(), starts, ends, strict=True):
        claims.setdefault(data[lo:hi], []).append(slot)
    pos += keys_len
    compressed = b"compression" in meta
    if compressed and (not isinstance(codes, list) or len(codes) != 2):
        raise GraphFileError(f"{path}: a compressed graph without its code map")
    graph = Index(ndim=params.dim, metric={"COSINE": "ip", "IP": "ip", "L2": "l2sq"}[params.metric],
                  dtype="i8" if compressed else "f32", connectivity=params.m, expansion_add=params.ef_construction,
                  expansion_search=params.ef_runtime)
    try:
        graph.load(memoryview(data)[pos:pos + graph_len])
    except Exception as exc:  # noqa: BLE001 - usearch raises RuntimeError on a bad stream
        raise GraphFileError(f"{path}: usearch cannot load it ({exc})") from None
    if graph.ndim != params.dim or graph.connectivity != params.m:
        raise GraphFileError(f"{path}: the graph has other dimensions")
    graph.expansion_add = params.ef_construction
    graph.expansion_search = params.ef_runtime
    keys = np.asarray(graph.keys, dtype=np.int64)
    high = int(keys.max()) + 1 if len(keys) else 0
    position = np.full(high, -1, dtype=np.int64)
    position[keys] = np.arange(len(keys), dtype=np.int64)
    # one array per entry, not stacked: ``Index.vectors`` stacks them, which costs twice the lookup
    vectors = tuple(graph.get(keys.astype(np.uint64))) if len(keys) else ()
    return LoadedGraph(graph, claims, vectors, position, high,
                       (float(codes[0]), float(codes[1])) if compressed and codes is not None else None)
