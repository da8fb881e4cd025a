"""A vector set as a stored value: its DUMP/RESTORE and snapshot form, size and type name.

The form keeps the whole graph (vectors as stored, norms, levels, node ids, every link), so a
restart or RESTORE loads it with numpy instead of rebuilding the HNSW, as Redis's RDB does.
Slots are renumbered densely on the way out. Loading trusts nothing: a payload whose checksum
is right but whose content is inconsistent (a link past the end, a duplicate name, a level out
of range) is refused with ``PayloadError``, never half-loaded.

Registered here (the engine imports storage, never the server): TYPE ``vectorset``, codec id
16, a size function for INFO's used_memory and maxmemory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pion.storage.keyspace import register_type
from pion.storage.memory import register_sizer
from pion.storage.serialize import PayloadError, pack_tree, register_codec, unpack_tree
from pion.vector.vset import quant
from pion.vector.vset.graph import MAX_LEVEL, MAX_M, MIN_M
from pion.vector.vset.vectorset import MAX_DIM, VectorSet

TYPE_ID = 16
FORMAT = 1


def dump(vs: VectorSet) -> bytes:
    g = vs.graph
    live = g.live_slots()
    remap = np.full(g.cap, -1, dtype=np.int32)
    remap[live] = np.arange(live.size, dtype=np.int32)
    links0 = g.links0[live]
    links0 = np.where(links0 >= 0, remap[np.where(links0 >= 0, links0, 0)], -1).astype("<i4")
    upper: list[int] = []
    for slot in live.tolist():
        for row in g.upper.get(slot, ()):
            upper.append(int(row[0]))
            upper.extend(remap[row[1 : 1 + row[0]]].tolist())
    tree = {
        b"format": FORMAT,
        b"dim": g.dim,
        b"quant": g.quant,
        b"m": g.m,
        b"proj_in": vs.proj_in,
        b"last_id": g.last_id,
        b"entry": int(remap[g.entry]) if g.entry >= 0 else -1,
        b"names": [vs.names[s] for s in live.tolist()],
        b"attrs": [vs.attrs[s] for s in live.tolist()],
        b"rows": np.ascontiguousarray(g.rows[live]).tobytes(),
        b"ranges": g.ranges[live].astype("<f4").tobytes(),
        b"norms": g.norms[live].astype("<f4").tobytes(),
        b"levels": g.levels[live].tobytes(),
        b"uids": g.uids[live].astype("<i8").tobytes(),
        b"links0": links0.tobytes(),
        b"n0": g.n0[live].astype("<i4").tobytes(),
        b"upper": np.array(upper, dtype="<i4").tobytes(),
    }
    return pack_tree(tree)


def _field(tree: dict, name: bytes, kind: type) -> Any:
    value = tree.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PayloadError(f"vector set payload: bad or missing {name.decode()}")
    return value


def _array(tree: dict, name: bytes, dtype: str, count: int) -> np.ndarray:
    raw = _field(tree, name, bytes)
    arr = np.frombuffer(raw, dtype=dtype)
    if arr.size != count:
        raise PayloadError(f"vector set payload: {name.decode()} has {arr.size} items, expected {count}")
    return arr


def load(body: bytes) -> VectorSet:
    tree = unpack_tree(body)
    if not isinstance(tree, dict) or tree.get(b"format") != FORMAT:
        raise PayloadError("vector set payload: unknown format")
    dim, qt, m = _field(tree, b"dim", int), _field(tree, b"quant", int), _field(tree, b"m", int)
    proj_in = _field(tree, b"proj_in", int)
    if not (0 < dim <= MAX_DIM and qt in quant.QUANT_NAMES and MIN_M <= m <= MAX_M):
        raise PayloadError("vector set payload: bad dimension, quantization or M")
    if proj_in and not dim <= proj_in <= MAX_DIM:
        raise PayloadError("vector set payload: bad projection size")
    names, attrs = _field(tree, b"names", list), _field(tree, b"attrs", list)
    n = len(names)
    if n == 0 or len(attrs) != n or len(set(names)) != n or not all(isinstance(x, bytes) for x in names):
        raise PayloadError("vector set payload: bad element names")
    if not all(a is None or isinstance(a, bytes) for a in attrs):
        raise PayloadError("vector set payload: bad attributes")
    width = quant.row_width(qt, dim)
    rows = _array(tree, b"rows", quant.row_dtype(qt).str, n * width).reshape(n, width)
    levels = _array(tree, b"levels", "i1", n)
    n0 = _array(tree, b"n0", "<i4", n)
    links0 = _array(tree, b"links0", "<i4", n * 2 * m).reshape(n, 2 * m).copy()
    if levels.min() < 0 or levels.max() > MAX_LEVEL or n0.min() < 0 or n0.max() > 2 * m:
        raise PayloadError("vector set payload: bad levels or link counts")
    used = np.arange(2 * m)[None, :] < n0[:, None]
    targets = links0[used]
    owners = np.nonzero(used)[0]
    if targets.size and (targets.min() < 0 or targets.max() >= n or (targets == owners).any()):
        raise PayloadError("vector set payload: a level-0 link points outside the set")
    links0[~used] = -1
    upper = _upper_links(_array_any(tree, b"upper"), levels, m, n)
    entry = _field(tree, b"entry", int)
    if not 0 <= entry < n or levels[entry] != levels.max():
        raise PayloadError("vector set payload: bad entry point")
    vs = VectorSet(dim, qt, m, proj_in)
    g = vs.graph
    g._allocate(max(16, n))
    g.rows[:n] = rows
    g.ranges[:n] = _array(tree, b"ranges", "<f4", n)
    g.norms[:n] = _array(tree, b"norms", "<f4", n)
    g.levels[:n] = levels
    g.uids[:n] = _array(tree, b"uids", "<i8", n)
    g.links0[:n] = links0
    g.n0[:n] = n0
    g.upper = upper
    g.hw = g.count = n
    g.entry, g.max_level = entry, int(levels[entry])
    g.last_id = max(_field(tree, b"last_id", int), int(g.uids[:n].max()))
    vs.names = list(names)
    vs.attrs = [a if a else None for a in attrs]
    vs.parsed = [None] * n
    vs.index = {name: i for i, name in enumerate(names)}
    vs.numattribs = sum(a is not None for a in vs.attrs)
    return vs


def _array_any(tree: dict, name: bytes) -> np.ndarray:
    return np.frombuffer(_field(tree, name, bytes), dtype="<i4")


def _upper_links(flat: np.ndarray, levels: np.ndarray, m: int, n: int) -> dict[int, np.ndarray]:
    """Rebuild ``Graph.upper`` from its flat form: per node with level > 0, per level, a count
    then that many slots; every slot must exist and live on that level."""
    values = flat.tolist()
    pos = 0
    upper: dict[int, np.ndarray] = {}
    for slot in np.flatnonzero(levels > 0).tolist():
        layers = np.zeros((int(levels[slot]), m + 1), dtype=np.int32)
        for level in range(1, int(levels[slot]) + 1):
            if pos >= len(values) or not 0 <= values[pos] <= m:
                raise PayloadError("vector set payload: bad upper-level links")
            count = values[pos]
            layer = values[pos + 1 : pos + 1 + count]
            pos += 1 + count
            if len(layer) != count or any(not 0 <= s < n or s == slot or levels[s] < level for s in layer):
                raise PayloadError("vector set payload: an upper-level link points outside the set")
            layers[level - 1, 0] = count
            layers[level - 1, 1 : 1 + count] = layer
        upper[slot] = layers
    if pos != len(values):
        raise PayloadError("vector set payload: trailing upper-level links")
    return upper


register_type(VectorSet, "vectorset")
register_codec(VectorSet, TYPE_ID, dump, load)
register_sizer(VectorSet, lambda vs: vs.nbytes())
