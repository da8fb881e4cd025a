"""The V-store: sessions of per-layer encoded rows (``V.*``), kept apart from the keyspace.

A session is named by an arbitrary byte string. It is *uniform* (one dim and codec for every
layer, created lazily at the first store) or carries a per-layer *schema* (``V.CREATE ...
SCHEMA``); layers past a schema use its default dim with int8, as in the reference. A prefix
namespace ``ns`` owns the sessions ``ns_pk`` (K) and ``ns_pv`` (V). The store counts the bytes
it holds so the evictor can keep it under ``--kv-maxmemory``.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from pion.codecs import CODEC_NAMES, CodecError
from pion.kvcache.layer import Chunk, Layer, LayerSpec
from pion.protocol.errors import ReplyError

MAX_DIM = 8192
#: layers a session may have (the reference stops at 80, its SCHEMA form at 59; we do not)
MAX_LAYERS = 4096
#: token positions a layer may hold (the reference: 200,000)
MAX_TOKENS = 1 << 24
MAX_SNAPSHOTS = 16
SESSION_NOT_FOUND = "ERR session not found"
#: stamps of session contents: a new one at every create and change, never reused in a process,
#: so "same stamp" means "same rows" even across a drop and re-create (V.EXPORT's cache key)
_stamps = itertools.count(1)


@dataclass(slots=True)
class SessionSnapshot:
    """V.SNAPSHOT: the chunk lists of every layer (chunks are immutable, so this is cheap)."""

    layers: dict[int, list[Chunk]]


class Session:
    __slots__ = ("sid", "index", "default", "schema", "layers", "snapshots", "nbytes", "version")

    def __init__(self, sid: bytes, index: int, default: LayerSpec, schema: tuple[LayerSpec, ...] | None) -> None:
        self.sid = sid
        self.index = index
        #: spec of every layer of a uniform session, of layers past the schema otherwise
        self.default = default
        self.schema = schema
        self.layers: dict[int, Layer] = {}
        self.snapshots: dict[int, SessionSnapshot] = {}
        self.nbytes = 0
        self.version = next(_stamps)

    @property
    def heterogeneous(self) -> bool:
        return self.schema is not None

    @property
    def num_layers(self) -> int:
        stored = max(self.layers) + 1 if self.layers else 0
        return max(stored, len(self.schema)) if self.schema else stored

    def spec(self, layer: int) -> LayerSpec:
        if self.schema is not None and layer < len(self.schema):
            return self.schema[layer]
        if self.default.dim == 0:
            raise ReplyError(f"ERR layer {layer} is past the session's SCHEMA and it has no default dim")
        return self.default

    def layer(self, layer: int) -> Layer | None:
        return self.layers.get(layer)

    def layer_for_write(self, layer: int) -> Layer:
        found = self.layers.get(layer)
        if found is None:
            found = self.layers[layer] = Layer(self.spec(layer))
        return found

    def format_name(self) -> str:
        """The reference's ``v_format``: layer 0's codec."""
        return (self.schema[0] if self.schema else self.default).fmt

    def value_dim(self) -> int:
        return (self.schema[0] if self.schema else self.default).dim

    def total_tokens(self) -> int:
        return sum(layer.tokens for layer in self.layers.values())

    def seq(self) -> int:
        return max((layer.seq for layer in self.layers.values()), default=0)

    def same_shape(self, default: LayerSpec, schema: tuple[LayerSpec, ...] | None) -> bool:
        return self.default == default and self.schema == schema


class VStore:
    """All sessions of one tenant, with the byte and fetch counters INFO reports."""

    def __init__(self) -> None:
        self.sessions: dict[bytes, Session] = {}
        self._free: list[int] = []
        self._next_index = 0
        self.nbytes = 0
        self.total_fetches = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, sid: bytes) -> Session | None:
        return self.sessions.get(sid)

    def require(self, sid: bytes) -> Session:
        session = self.sessions.get(sid)
        if session is None:
            raise ReplyError(SESSION_NOT_FOUND)
        return session

    def create(
        self, sid: bytes, default: LayerSpec, schema: tuple[LayerSpec, ...] | None = None, index: int | None = None,
    ) -> Session:
        """A new session (the caller checked that ``sid`` is free and the specs are valid).

        It gets the lowest free index, or ``index`` (a session loaded from a snapshot).
        """
        if index is not None:
            self._take_index(index)
        elif self._free:
            index = heapq.heappop(self._free)
        else:
            index = self._next_index
            self._next_index += 1
        session = self.sessions[sid] = Session(sid, index, default, schema)
        return session

    def _take_index(self, index: int) -> None:
        if index >= self._next_index:
            self._free.extend(range(self._next_index, index))
            self._next_index = index + 1
        else:
            self._free.remove(index)
        heapq.heapify(self._free)

    def detached(self, sid: bytes, default: LayerSpec, schema: tuple[LayerSpec, ...] | None = None) -> Session:
        """A session no ``V.*`` name reaches (a staged store's): its bytes count, it has no index yet."""
        return Session(sid, -1, default, schema)

    def adopt(self, session: Session) -> None:
        """Make a detached session the one named ``session.sid`` (the caller dropped any other)."""
        session.index = heapq.heappop(self._free) if self._free else self._next_index
        if session.index == self._next_index:
            self._next_index += 1
        session.version = next(_stamps)
        self.sessions[session.sid] = session

    def discard(self, session: Session) -> None:
        """Forget a detached session's rows (a staged store that is not published)."""
        self.nbytes -= session.nbytes
        session.nbytes = 0
        session.layers.clear()

    def drop(self, sid: bytes) -> bool:
        session = self.sessions.pop(sid, None)
        if session is None:
            return False
        self.nbytes -= session.nbytes
        heapq.heappush(self._free, session.index)
        return True

    def store(
        self, session: Session, layer: int, start: int, count: int, data: bytes | memoryview, seq: int,
        durable: memoryview | None = None,
    ) -> None:
        delta = session.layer_for_write(layer).store(start, count, data, seq, durable)
        session.version = next(_stamps)
        session.nbytes += delta
        self.nbytes += delta

    def truncate(self, session: Session, layer: int, tokens: int) -> None:
        found = session.layer(layer)
        if found is not None:
            delta = found.truncate(tokens)
            session.version = next(_stamps)
            session.nbytes += delta
            self.nbytes += delta

    # -- speculative rollback ------------------------------------------------------------------

    def snapshot(self, session: Session, snap_id: int) -> None:
        if len(session.snapshots) >= MAX_SNAPSHOTS:
            raise ReplyError("ERR V.SNAPSHOT: no free snapshot slot (max 16 per session)")
        session.snapshots[snap_id] = SessionSnapshot({i: layer.chunk_list() for i, layer in session.layers.items()})

    def restore(self, session: Session, snap_id: int) -> list[tuple[int, list[Chunk]]]:
        """Put every layer back as it was; returns ``(layer, chunks)`` for each layer changed."""
        snap = session.snapshots.get(snap_id)
        if snap is None:
            raise ReplyError("ERR V.RESTORE: unknown snap_id for this session")
        changed: list[tuple[int, list[Chunk]]] = []
        for index, layer in session.layers.items():
            saved = snap.layers.get(index, [])
            if [id(c) for c in saved] == [id(c) for c in layer.chunks]:
                continue
            delta = layer.replace_chunks(saved)
            session.version = next(_stamps)
            session.nbytes += delta
            self.nbytes += delta
            changed.append((index, saved))
        return changed


def parse_layer_spec(text: str, index: int, default_dim: int) -> LayerSpec:
    """One SCHEMA entry, ``fmt=<name>,dim=<n>,rope=<n>`` (any order, any subset)."""
    fmt, dim, rope = "int8", default_dim, 0
    where = f"ERR V.CREATE SCHEMA: layer {index}"
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if not eq:
            raise ReplyError(f"{where} spec '{part}' is not key=value")
        if key == "fmt":
            fmt = value.strip().lower()
        elif key in ("dim", "rope"):
            if not value.isdigit() or not 1 <= int(value) <= MAX_DIM:
                raise ReplyError(f"{where} {key} must be 1..{MAX_DIM}")
            dim, rope = (int(value), rope) if key == "dim" else (dim, int(value))
        elif key == "s":
            raise ReplyError(f"{where} S-tensor reserved (route SSM/SWA-tail state through STATE.*)")
        else:
            raise ReplyError(f"{where} unknown key '{key}' (want fmt, dim, rope)")
    if dim == 0:
        raise ReplyError(f"{where} needs dim= (the default dim is 0)")
    return check_spec(LayerSpec(dim, fmt, rope), where)


def check_spec(spec: LayerSpec, where: str) -> LayerSpec:
    """Refuse a codec that cannot take the dim, with the reference's wording where it has one."""
    if spec.fmt not in CODEC_NAMES:
        raise ReplyError(f"{where} unknown fmt '{spec.fmt}' (want {'|'.join(CODEC_NAMES)})")
    if spec.fmt == "bf16_rope_fp8_body":
        if not 0 < spec.rope < spec.dim or (spec.dim - spec.rope) % 32:
            raise ReplyError(f"{where} bf16_rope_fp8_body needs 0<rope<dim and (dim-rope)%32==0")
        return spec
    try:
        spec.codec().check_dim(spec.dim)
    except CodecError:
        kind = "mlx4g32" if spec.fmt == "mlx4g32" else "turbo/fp8"
        raise ReplyError(f"{where} {kind} dim must be multiple of 32") from None
    return spec
