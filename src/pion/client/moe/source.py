"""``ExpertSource``: one model's experts, fetched from a Pion server's expert tier.

Two lanes, chosen per source:

- **local** (the server is on this host and its files are readable): ``MOE.EXPERT.LOCAL`` names
  the file and byte range of each part (a resident file in shared memory, or the shard itself
  when the server's budget does not hold the expert); the source maps it read-only and returns
  views: no bytes cross the socket, and a float expert's gate and up parts are one fused view.
- **resp**: ``MOE.EXPERT.FETCH`` ships the blob; the parts are views of the reply bytes.

Either way ``fetch`` returns ``{(proj, comp): ndarray}`` with each part's dtype and shape from
``MOE.EXPERT.INFO``, checked against the bytes received (a mismatch raises ``CorruptReply``).
A pruned expert raises ``ExpertPruned``. Thread-safe: the client's prefetch thread and the
model's forward fetch at the same time over redis-py's connection pool.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import threading
from collections import OrderedDict

import numpy as np

from pion.client.client import PionClient
from pion.client.errors import CorruptReply, PionResponseError
from pion.client.local_lane import is_local
from pion.codecs.experts import LayoutError, decode_fetch

#: safetensors dtype -> numpy dtype name (bf16 and fp8 through ml_dtypes)
_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
          "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}
MAX_OPEN_MAPS = 64


class ExpertPruned(PionResponseError):
    """PRUNED: the server's operator pruned this expert (``MOE.EXPERT.PRUNE``)."""


def numpy_dtype(name: str) -> np.dtype:
    if name in _NUMPY:
        return np.dtype(_NUMPY[name])
    import ml_dtypes

    special = {"BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2}
    if name not in special:
        raise CorruptReply(f"expert parts of dtype {name} cannot be read by this client")
    return np.dtype(special[name])


class ExpertSource:
    """The experts of ``model_id`` on the server at ``client``; ``lane`` is ``auto|local|resp``."""

    def __init__(self, client: PionClient, model_id: str, *, namespace: str | None = None, lane: str = "auto") -> None:
        if lane not in ("auto", "local", "resp"):
            raise ValueError("lane must be auto, local or resp")
        self.client = client
        self.model_id = model_id
        self.namespace = namespace
        self.info = json.loads(client.execute("MOE.EXPERT.INFO", model_id))
        self.specs = {(p["proj"], p["comp"]): (numpy_dtype(p["dtype"]), tuple(p["shape"]), p["nbytes"])
                      for p in self.info["parts"]}
        self.lane = "local" if lane == "local" or (lane == "auto" and is_local(client.url)) else "resp"
        self._maps: OrderedDict[str, mmap.mmap] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes_received = 0

    @classmethod
    def load(cls, client: PionClient, directory: str, **options) -> ExpertSource:
        """``MOE.EXPERT.LOAD directory`` (relative to the server's --moe-cache), then a source."""
        model_id = client.execute("MOE.EXPERT.LOAD", directory)
        return cls(client, model_id.decode() if isinstance(model_id, bytes) else model_id, **options)

    def _ns(self) -> list[str]:
        return ["NS", self.namespace] if self.namespace else []

    def fetch(self, layer: int, expert: int) -> dict[tuple[int, int], np.ndarray]:
        """The expert's parts as arrays (views of a mapping or of the reply; read-only)."""
        if self.lane == "local":
            try:
                return self._fetch_local(layer, expert)
            except OSError:
                self.lane = "resp"  # the server's files are not readable from here: use the socket
        return self._fetch_resp(layer, expert)

    def prefetch_on_server(self, layer: int, experts: list[int]) -> None:
        """``MOE.EXPERT.PREFETCH``: let the server start reading them (no bytes come back)."""
        if experts:
            self._call("MOE.EXPERT.PREFETCH", self.model_id, layer, *experts)

    def _call(self, *args):
        try:
            return self.client.execute(*args)
        except PionResponseError as exc:
            if exc.prefix == "PRUNED":
                raise ExpertPruned(exc.message, "PRUNED") from exc
            raise

    def _fetch_resp(self, layer: int, expert: int) -> dict:
        blob = self._call("MOE.EXPERT.FETCH", self.model_id, layer, expert, *self._ns())
        self.bytes_received += len(blob)
        try:
            parts = decode_fetch(blob)
        except LayoutError as exc:
            raise CorruptReply(f"MOE.EXPERT.FETCH {layer} {expert}: {exc}") from None
        return {(proj, comp): self._array(proj, comp, view) for proj, comp, view in parts}

    def _fetch_local(self, layer: int, expert: int) -> dict:
        located = self._call("MOE.EXPERT.LOCAL", self.model_id, layer, expert, *self._ns())
        out: dict = {}
        where = {}
        for path, proj, comp, offset, nbytes in located:
            name = path.decode() if isinstance(path, bytes) else path
            mapped = self._map(name, offset + nbytes)
            out[(proj, comp)] = self._array(proj, comp, memoryview(mapped)[offset:offset + nbytes])
            where[(proj, comp)] = (name, mapped, offset, nbytes)
        gate, up = where.get((0, 0)), where.get((1, 0))
        if gate and up and (1, 1) not in where and gate[0] == up[0] and gate[2] + gate[3] == up[2]:
            rows, cols = out[(0, 0)].shape[0] + out[(1, 0)].shape[0], out[(0, 0)].shape[1]
            span = memoryview(gate[1])[gate[2]:up[2] + up[3]]
            out["gate_up"] = np.frombuffer(span, dtype=out[(0, 0)].dtype).reshape(rows, cols)  # one fused view
        return out

    def _map(self, path: str, needed: int) -> mmap.mmap:
        """A read-only shared mapping of ``path`` (kept for shards; resident files are mapped
        whole with their pages populated: they are small and used at once)."""
        with self._lock:
            found = self._maps.get(path)
            if found is not None and len(found) >= needed:
                self._maps.move_to_end(path)
                return found
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < needed:
                raise CorruptReply(f"{path} has {size} bytes, fewer than the {needed} named")
            flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if path.endswith(".expert") else 0)
            mapped = mmap.mmap(handle.fileno(), size, flags=flags, prot=mmap.PROT_READ)
        with self._lock:
            self._maps[path] = mapped
            while len(self._maps) > MAX_OPEN_MAPS:
                self._maps.popitem(last=False)  # the arrays still viewing it keep it alive
        return mapped

    def _array(self, proj: int, comp: int, view: memoryview) -> np.ndarray:
        spec = self.specs.get((proj, comp))
        if spec is None or view.nbytes != spec[2]:
            raise CorruptReply(f"expert part proj={proj} comp={comp} has {view.nbytes} bytes, "
                               f"INFO says {None if spec is None else spec[2]}")
        dtype, shape, _ = spec
        return np.frombuffer(view, dtype=dtype).reshape(shape)

    def close(self) -> None:
        with self._lock:
            maps, self._maps = list(self._maps.values()), OrderedDict()
        for mapped in maps:
            with contextlib.suppress(BufferError):
                mapped.close()  # refused while arrays still view it; those keep it alive
