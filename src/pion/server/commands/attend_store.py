"""``ATTEND.PREFIX.STORE`` and ``KV.PREFIX.WARM``: putting Stage-2 prefixes in, and bringing cold ones back.

STORE takes the reference's ``[H, N, D]`` fp32 blobs, turns them into token-major rows (one row
per token, heads concatenated) and stores them as layer ``layer`` of V-store sessions
``<sid>_pk`` / ``<sid>_pv`` in fp32: durable as every K/V row (logged as ``V.CREATE``,
``V.TRUNCATE`` and ``V.STOREBATCH ... FMT RAW``, the rows in a log arena), evictable under
``kv-maxmemory`` like any prefix, and warm at once (the view keeps the blobs, head-major as they came).
The transposition, the block summaries and the arena writes run in the worker pool.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from pion.attention.select import DEFAULT_BLOCK, summarize
from pion.attention.tier import PrefixView
from pion.kvcache.layer import LayerSpec
from pion.kvcache.space import sides
from pion.kvcache.vstore import MAX_DIM, MAX_TOKENS
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.resp import OK, Status
from pion.server.commands.attend_prefix import (
    MAX_HEAD_DIM,
    MAX_HEADS,
    attention_engine,
    build_view,
    parse_heads_dim,
    parse_layer,
    read_source,
    source_current,
    tenant_of,
)
from pion.server.commands.kvcache import (
    arena_view,
    arg,
    check_ns,
    durable_arenas,
    make_room,
    space,
    strict_int,
    write_reserved,
    write_seq,
)
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command

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
    crcs = [None, None] if rooms is None else [write_reserved(arenas, room, b) for room, b in zip(rooms, blobs, strict=True)]
    summary = summarize(cubes[0], DEFAULT_BLOCK) if n >= DEFAULT_BLOCK else None
    return cubes, blobs, crcs, summary


@command("ATTEND.PREFIX.STORE", 8, "write denyoom zero_copy", categories="@write @pion", group="pion", since="0.1.0")
def attend_prefix_store(ctx, argv):
    """ATTEND.PREFIX.STORE sid layer H N D K_blob V_blob: keep a prefix's K/V ([H, N, D] fp32 each) for Stage 2.

    Replaces the layer's rows; stored durably as V-store sessions ``<sid>_pk`` / ``<sid>_pv`` (fp32).
    """
    sid, layer_id, heads, n, dim = parse_store(argv)
    sp = space(ctx)
    check_sessions(sp, sid, layer_id, heads * dim)
    size = heads * n * dim * 4
    arenas = durable_arenas(ctx, size)
    if not can_defer(ctx):
        return finish_store(ctx, argv, prepare(argv, heads, n, dim, None, None), None)
    rooms = None if arenas is None else [arenas.reserve(size), arenas.reserve(size)]
    job = partial(prepare, argv, heads, n, dim, arenas, rooms)
    abandon = None if rooms is None else lambda: [arenas.cancel(room) for room in rooms]
    return Deferred([job], lambda ctx, results: finish_store(ctx, argv, results[0], rooms), abandon)


def finish_store(ctx, argv, prepared: tuple, rooms) -> object:
    """On the loop: create the sessions, store and log both sides, make the view warm."""
    sid, layer_id, heads, n, dim = parse_store(argv)
    cubes, blobs, crcs, summary = prepared
    sp = space(ctx)
    arenas = ctx.server.engines.get("arenas")
    try:
        check_sessions(sp, sid, layer_id, heads * dim)  # another client may have made them meanwhile
    except ReplyError:
        if rooms is not None:
            for room in rooms:
                arenas.cancel(room)
        raise
    effects: list[list[bytes]] = make_room(ctx, sp, 2 * len(blobs[0]), sid)
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
        durable = arena_view(ctx, blob) if rooms is None else arenas.view(arenas.commit(rooms[side], blob, crcs[side]))
        sp.vstore.store(session, layer_id, 0, n, blob, write_seq(ctx), durable)
        sp.touch(name)
        effects.append([b"V.STOREBATCH", name, layer_arg, b"0", b"%d" % n, blob, b"FMT", b"RAW"])
    ctx.dirty()
    ctx.rewrite(*effects)
    view = PrefixView(cubes[0], cubes[1], cubes[0].nbytes + cubes[1].nbytes, read_source(sp, sid, layer_id), sid)
    if summary is not None:
        view.summaries[(DEFAULT_BLOCK, 0)] = summary
    attention_engine(ctx.server).tier.put((tenant_of(ctx), sid, layer_id), view)
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
    sp = space(ctx)
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
    jobs = [partial(build_view, source, heads, dim) for source in sources]
    finish = partial(finish_warm, attend_sid=attend_sid, skipped=skipped)
    if can_defer(ctx) and jobs:
        return Deferred(jobs, finish)
    return finish(ctx, [job() for job in jobs])


def finish_warm(ctx, views: list[PrefixView], *, attend_sid: bytes, skipped: int) -> Status:
    engine = attention_engine(ctx.server)
    sp = space(ctx)
    keys = []
    for view in views:
        if source_current(sp, view.source):
            key = (tenant_of(ctx), attend_sid, view.source.layer)
            engine.tier.put(key, view)
            engine.counts["views_built"] += 1
            keys.append(key)
    warm = sum(1 for key in keys if key in engine.tier.entries)
    text = f"{warm}" + (f" skipped_dim={skipped}" if skipped else "")
    if warm < len(keys):
        text += f" over_budget={len(keys) - warm}"
    return Status(text)
