"""Stage-2 prefixes in the V-store: the attention engine's views of them, STORE and KV.PREFIX.WARM.

A Stage-2 prefix is a V-store namespace: layer L's K rows in session ``<sid>_pk``, its V rows in
``<sid>_pv``, one row per token (kv heads concatenated), in any codec; a prompt cache's own
prefix already is one, so a client stores once and both stages read the same durable rows. The
engine keeps *views* of them ready: decoded to fp32, head-major ``[H_kv, N, D]``, with block
summaries, under ``attention-warm-bytes``; a view remembers the chunks it was read from and is
rebuilt (or forgotten, by a cron sweep) when they change.

STORE takes the reference's ``[H, N, D]`` fp32 blobs, keeps them as the view and stores their
token-major rows as layer ``layer`` of ``<sid>_pk`` / ``<sid>_pv`` in fp32: durable as every K/V
row (logged as ``V.CREATE``, ``V.TRUNCATE`` and ``V.STOREBATCH ... FMT RAW``, the rows in a log
arena), evictable under ``kv-maxmemory`` like any prefix. The transposition, the block summaries
and the arena writes run in the worker pool, on threads niced below the event loop.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from functools import partial

import numpy as np
import threadpoolctl

from pion.attention.engine import AttentionEngine
from pion.attention.select import DEFAULT_BLOCK, summarize
from pion.attention.tier import PrefixView
from pion.kvcache import rows as kv_rows
from pion.kvcache.layer import LayerSpec
from pion.kvcache.space import sides
from pion.kvcache.vstore import MAX_DIM, MAX_LAYERS, MAX_TOKENS
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.resp import OK, Status
from pion.server.args import arg, check_ns, strict_int
from pion.server.commands.kv.stage import refuse_if_owned
from pion.server.component import Component
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command

MAX_HEADS = 256
MAX_HEAD_DIM = 1024
SWEEP_EVERY = 10  # cron ticks between checks for views whose rows changed


# -- the engine and its views ------------------------------------------------------------------


def attention_engine(server) -> AttentionEngine:
    """The server's Stage-2 engine (made at first use), following ``attention-warm-bytes``."""
    found = server.parts.attention
    if found is None:
        # one BLAS thread per kernel call: the worker pool spreads a query over the cores, and
        # BLAS's own threads spinning against the pool (or other processes) cost 2-5x under load
        threadpoolctl.threadpool_limits(1, user_api="blas")
        found = server.parts.attention = AttentionEngine(server.settings.attention_warm_bytes)
        server.add_component(AttentionPart(server, found))
        tenants = server.parts.tenants
        if tenants is not None:  # a tenant's warm views count against its quota (issue #13, item 6)
            tier = found.tier
            tenants.usage_sources.append(lambda name: tier.bytes_of(lambda key, owner=name.encode(): key[0] == owner))
    found.set_budget(server.settings.attention_warm_bytes)
    return found


class AttentionPart(Component):
    """The attention engine, made at first use: its cron forgets views of rows dropped, evicted or
    overwritten (a view pins the chunks it was read from); CONFIG RESETSTAT clears its counts."""

    name = "attention"

    def __init__(self, server, engine: AttentionEngine) -> None:
        self.server, self.engine, self.ticks = server, engine, 0

    def cron(self) -> None:
        self.ticks += 1
        if self.ticks % SWEEP_EVERY or self.server.loading:
            return
        kv = self.server.parts.kvcache
        if kv is not None:
            self.engine.sweep(lambda key, view: source_current(kv.space(key[0]), view.source))

    def resetstat(self) -> None:
        self.engine.reset_stats()


def keep_warm(ctx, engine: AttentionEngine, key, view: PrefixView) -> None:
    """Keep ``view`` in the warm tier, unless the client's tenant has no quota left for it: the
    warm tier is a cache, so a full quota means the view serves this query and is not kept."""
    tenants = ctx.server.parts.tenants
    if tenants is not None and ctx.client is not None and ctx.client.tenant is not None:
        held = engine.tier.entries.get(key)
        if tenants.charge(ctx.client, view.nbytes - (held.nbytes if held is not None else 0)) is not None:
            engine.tier.drop(key)
            return
    engine.tier.put(key, view)


def tenant_of(ctx) -> bytes:
    tenant = getattr(ctx.client, "tenant", None) or b""
    return tenant.encode() if isinstance(tenant, str) else tenant


@dataclass(frozen=True, slots=True, eq=False)
class Source:
    """One layer of a namespace's rows as the V-store holds them now (chunks are immutable)."""

    origin: bytes
    layer: int
    n_tokens: int
    dim: int
    sessions: tuple
    chunks: tuple[tuple, tuple]
    fmts: tuple[str, str]
    codecs: tuple
    row_bytes: tuple[int, int]


def read_source(sp, ns: bytes, layer_id: int) -> Source | None:
    """Rows ``[0, N)`` of layer ``layer_id`` of ``ns`` (N = min of both sides), or None if absent."""
    sessions = tuple(sp.vstore.get(sid) for sid in sides(ns))
    if None in sessions:
        return None
    layers = [s.layer(layer_id) for s in sessions]
    if None in layers or not layers[0].tokens or not layers[1].tokens:
        return None
    n_tokens = min(layer.tokens for layer in layers)
    if layers[0].spec.dim != layers[1].spec.dim:
        raise ReplyError(f"ERR layer {layer_id} of '{ns.decode('utf-8', 'replace')}' has K and V rows of other widths")
    if not all(layer.covers(n_tokens) for layer in layers):
        raise ReplyError(f"ERR layer {layer_id} of '{ns.decode('utf-8', 'replace')}' has rows missing before {n_tokens}")
    return Source(ns, layer_id, n_tokens, layers[0].spec.dim, sessions,
                  (tuple(layers[0].chunks), tuple(layers[1].chunks)), (layers[0].spec.fmt, layers[1].spec.fmt),
                  (layers[0].codec, layers[1].codec), (layers[0].row_bytes, layers[1].row_bytes))


def source_current(sp, source: Source | None) -> bool:
    """Does the V-store still hold exactly the rows ``source`` was read from?"""
    if source is None:
        return True
    for sid, session, chunks in zip(sides(source.origin), source.sessions, source.chunks, strict=True):
        if sp.vstore.get(sid) is not session:
            return False
        layer = session.layer(source.layer)
        if layer is None or len(layer.chunks) != len(chunks) or any(a is not b for a, b in zip(layer.chunks, chunks, strict=True)):
            return False
    return True


def gather(chunks: tuple, n_tokens: int, row_bytes: int):
    """Encoded rows ``[0, n_tokens)`` from a gap-free chunk list: a view when one chunk holds them."""
    first = chunks[0]
    if first.start == 0 and first.end >= n_tokens:
        return first.part(0, n_tokens, row_bytes).data, True
    out = bytearray(n_tokens * row_bytes)
    for chunk in chunks:
        if chunk.start >= n_tokens:
            break
        end = min(chunk.end, n_tokens)
        out[chunk.start * row_bytes:end * row_bytes] = chunk.part(chunk.start, end, row_bytes).data
    return out, False


def build_view(source: Source, kv_heads: int, head_dim: int) -> PrefixView:
    """Decode a source into a head-major view with its default block summary (a worker job:
    it reads only immutable rows)."""
    arrays = []
    for side in (0, 1):
        data, _ = gather(source.chunks[side], source.n_tokens, source.row_bytes[side])
        if source.fmts[side] == "fp32":
            rows = np.frombuffer(data, dtype="<f4").reshape(source.n_tokens, source.dim)
        else:
            rows = source.codecs[side].decode(data, (source.n_tokens, source.dim))
        arrays.append(head_major(rows, kv_heads, head_dim))
    view = PrefixView(arrays[0], arrays[1], arrays[0].nbytes + arrays[1].nbytes, source, source.origin)
    if source.n_tokens >= DEFAULT_BLOCK:
        view.summaries[(DEFAULT_BLOCK, 0)] = summarize(view.k, DEFAULT_BLOCK)
    return view


def head_major(rows: np.ndarray, kv_heads: int, head_dim: int) -> np.ndarray:
    """Token-major rows ``[N, H*D]`` as a contiguous ``[H, N, D]`` float32 copy."""
    cube = rows.reshape(rows.shape[0], kv_heads, head_dim).transpose(1, 0, 2)
    return np.ascontiguousarray(cube, dtype=np.float32)


_BACKGROUND_NICE = 5
_reniced: set[int] = set()


def background(job):
    """Run a kernel job on a worker thread niced below the event loop (once per thread): when the
    cores are saturated the scheduler then prefers the loop, so other clients' small commands
    are not queued behind kernel threads of the same process."""
    tid = threading.get_native_id()
    if tid not in _reniced:
        _reniced.add(tid)
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + _BACKGROUND_NICE)
    return job()


# -- argument parsing ---------------------------------------------------------------------------


def parse_layer(raw) -> int:
    return strict_int(raw, 0, MAX_LAYERS - 1, "ERR invalid layer")


def parse_heads_dim(h_raw, d_raw, error: str = "ERR invalid H/D (1..256 / 1..1024)") -> tuple[int, int]:
    return strict_int(h_raw, 1, MAX_HEADS, error), strict_int(d_raw, 1, MAX_HEAD_DIM, error)


STORE_LIMITS = f"supported: D 1..{MAX_HEAD_DIM}, H 1..{MAX_HEADS}, H*D <= {MAX_DIM}, N <= {MAX_TOKENS}"


def parse_store(argv) -> tuple[bytes, int, int, int, int]:
    sid, layer_id = check_ns(argv[1]), parse_layer(argv[2])
    bad = "ERR invalid H/N/D (must be > 0)"
    heads, n, dim = (strict_int(raw, 1, 1 << 62, bad) for raw in argv[3:6])
    if heads > MAX_HEADS or dim > MAX_HEAD_DIM or heads * dim > MAX_DIM or n > MAX_TOKENS:
        raise ReplyError(f"ERR ATTEND.PREFIX.STORE failed (unsupported D? {STORE_LIMITS})")
    size = heads * n * dim * 4
    if len(argv[6]) != size or len(argv[7]) != size:
        raise ReplyError("ERR K/V blob size mismatch (expected H*N*D*4 each)")
    return sid, layer_id, heads, n, dim


def check_sessions(sp, sid: bytes, layer_id: int, width: int) -> None:
    """STORE keeps fp32 rows of ``width``: refuse a session that holds something else there."""
    for name in sides(sid):
        session = sp.vstore.get(name)
        if session is None:
            continue
        spec = session.spec(layer_id)
        if spec.fmt != "fp32" or spec.dim != width:
            shown = name.decode("utf-8", "replace")
            raise ReplyError(f"ERR ATTEND.PREFIX.STORE: session '{shown}' holds {spec.fmt} rows {spec.dim} wide at this "
                             f"layer; STORE keeps fp32 rows H*D={width} wide (use another sid, or FROM to read it)")


def prepare(argv, heads: int, n: int, dim: int, arenas, rooms) -> tuple:
    """Worker job: the view's arrays (the blobs themselves), token-major rows, the K summary, the crcs."""
    cubes = [np.frombuffer(blob, dtype="<f4").reshape(heads, n, dim) for blob in argv[6:8]]
    rows = [np.ascontiguousarray(cube.transpose(1, 0, 2)).reshape(n, heads * dim) for cube in cubes]
    blobs = [memoryview(r.view(np.uint8).reshape(-1)) for r in rows]
    crcs = [None, None] if rooms is None else [kv_rows.write_reserved(arenas, room, b) for room, b in zip(rooms, blobs, strict=True)]
    summary = summarize(cubes[0], DEFAULT_BLOCK) if n >= DEFAULT_BLOCK else None
    return cubes, blobs, crcs, summary


@command("ATTEND.PREFIX.STORE", 8, "write denyoom zero_copy", categories="@write @pion", group="pion", since="0.1.0")
def attend_prefix_store(ctx, argv):
    """ATTEND.PREFIX.STORE sid layer H N D K_blob V_blob: keep a prefix's K/V ([H, N, D] fp32 each) for Stage 2.

    Replaces the layer's rows; stored durably as V-store sessions ``<sid>_pk`` / ``<sid>_pv`` (fp32).
    """
    sid, layer_id, heads, n, dim = parse_store(argv)
    sp = ctx.kv_space()
    refuse_if_owned(ctx, sp, sides(sid)[0], "ATTEND.PREFIX.STORE")  # a manifest's rows change only by a publish
    check_sessions(sp, sid, layer_id, heads * dim)
    size = heads * n * dim * 4
    arenas = ctx.blob_arenas(size)
    if not can_defer(ctx):
        return finish_store(ctx, argv, prepare(argv, heads, n, dim, None, None), None)
    rooms = None if arenas is None else [arenas.reserve(size), arenas.reserve(size)]
    job = partial(background, partial(prepare, argv, heads, n, dim, arenas, rooms))
    abandon = None if rooms is None else lambda: [arenas.cancel(room) for room in rooms]
    return Deferred([job], lambda ctx, results: finish_store(ctx, argv, results[0], rooms), abandon)


def finish_store(ctx, argv, prepared: tuple, rooms) -> object:
    """On the loop: create the sessions, store and log both sides, make the view warm."""
    sid, layer_id, heads, n, dim = parse_store(argv)
    cubes, blobs, crcs, summary = prepared
    sp = ctx.kv_space()
    arenas = ctx.server.parts.arenas
    try:
        refuse_if_owned(ctx, sp, sides(sid)[0], "ATTEND.PREFIX.STORE")  # a staged store may have published
        check_sessions(sp, sid, layer_id, heads * dim)  # another client may have made them meanwhile
    except ReplyError:
        if rooms is not None:
            for room in rooms:
                arenas.cancel(room)
        raise
    effects: list[list[bytes]] = sp.make_room(ctx.kv_budget, 2 * len(blobs[0]), sid)
    layer_arg = b"%d" % layer_id
    for side, name in enumerate(sides(sid)):
        session = sp.vstore.get(name)
        if session is None:
            session = sp.vstore.create(name, LayerSpec(heads * dim, "fp32"))
            effects.append([b"V.CREATE", name, b"%d" % (heads * dim), b"VQUANT", b"fp32"])
        layer = session.layer(layer_id)
        if layer is not None and layer.tokens > n:
            sp.vstore.truncate(session, layer_id, n)
            effects.append([b"V.TRUNCATE", name, layer_arg, b"%d" % n])
        blob = blobs[side]
        durable = (kv_rows.place(ctx.blob_arenas(len(blob)), blob, ctx.replaying) if rooms is None
                   else kv_rows.commit_reserved(arenas, rooms[side], blob, crcs[side]))
        sp.vstore.store(session, layer_id, 0, n, blob, ctx.write_seq(), durable)
        sp.touch(name)
        logged = blob if durable is None else durable  # the journal references the arena view
        effects.append([b"V.STOREBATCH", name, layer_arg, b"0", b"%d" % n, logged, b"FMT", b"RAW"])
    ctx.dirty()
    ctx.rewrite(*effects)
    view = PrefixView(cubes[0], cubes[1], cubes[0].nbytes + cubes[1].nbytes, read_source(sp, sid, layer_id), sid)
    if summary is not None:
        view.summaries[(DEFAULT_BLOCK, 0)] = summary
    keep_warm(ctx, attention_engine(ctx.server), (tenant_of(ctx), sid, layer_id), view)
    return OK


@command("KV.PREFIX.WARM", -4, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_warm(ctx, argv):
    """KV.PREFIX.WARM ns H D [attend_sid]: load every layer of ns whose rows are H*D wide for Stage 2.

    The views go under ``attend_sid`` (default ``ns``). Replies ``+<layers warm>``, plus
    `` skipped_dim=<k>`` for layers of another width and `` over_budget=<k>`` for views larger
    than ``attention-warm-bytes`` (or pushed out by this same call).
    """
    if len(argv) > 5:
        raise ReplyError(SYNTAX)
    ns = check_ns(argv[1])
    heads, dim = parse_heads_dim(argv[2], argv[3])
    attend_sid = arg(argv[4]) if len(argv) == 5 else ns
    sp = ctx.kv_space()
    pk, pv = (sp.vstore.get(name) for name in sides(ns))
    if pk is None or pv is None:
        raise ReplyError("ERR KV.PREFIX.WARM namespace not registered (call KV.PREFIX.REGISTER first)")
    sources, skipped = [], 0
    for layer_id in range(max(pk.num_layers, pv.num_layers)):
        source = read_source(sp, ns, layer_id)
        if source is None:
            continue
        if source.dim != heads * dim:
            skipped += 1
            continue
        sources.append(source)
    jobs = [partial(background, partial(build_view, source, heads, dim)) for source in sources]
    finish = partial(finish_warm, attend_sid=attend_sid, skipped=skipped)
    if can_defer(ctx) and jobs:
        return Deferred(jobs, finish)
    return finish(ctx, [build_view(source, heads, dim) for source in sources])


def finish_warm(ctx, views: list[PrefixView], *, attend_sid: bytes, skipped: int) -> Status:
    engine = attention_engine(ctx.server)
    sp = ctx.kv_space()
    keys = []
    for view in views:
        if source_current(sp, view.source):
            key = (tenant_of(ctx), attend_sid, view.source.layer)
            keep_warm(ctx, engine, key, view)
            engine.counts["views_built"] += 1
            keys.append(key)
    warm = sum(1 for key in keys if key in engine.tier.entries)
    text = f"{warm}" + (f" skipped_dim={skipped}" if skipped else "")
    if warm < len(keys):
        text += f" over_budget={len(keys) - warm}"
    return Status(text)
