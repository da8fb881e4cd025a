"""Planning and applying a ``V.STOREBATCH`` (the handler is in ``kv_vstore``): the parsed,
checked request (``StorePlan``), and storing its encoded rows, at once or as the second half of
a deferred store (``pion.server.deferred``) whose workers encoded them and wrote their arena room.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pion.kvcache.batch import encode_now, input_rows
from pion.kvcache.eviction import unit_of
from pion.kvcache.layer import LayerSpec
from pion.kvcache.vstore import MAX_LAYERS, MAX_TOKENS, Session
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.commands.kv_stage import refuse_if_owned, split_token, staging_for
from pion.server.commands.kvcache import arena_view, arg, log_with, make_room, space, strict_int, write_seq

INPUT_WIDTH = {b"F32": 4, b"F16": 2, b"BF16": 2}


def parse_store_options(argv: list[bytes]) -> tuple[bytes, bytes | None]:
    """``(FMT, TOKEN or None)`` from ``[FMT F32|F16|BF16|RAW] [TOKEN token]``."""
    argv, token = split_token(argv, "V.STOREBATCH")
    if len(argv) == 6:
        return b"F32", token
    if len(argv) == 8 and arg(argv[6]).upper() == b"FMT" and arg(argv[7]).upper() in (*INPUT_WIDTH, b"RAW"):
        return arg(argv[7]).upper(), token
    raise ReplyError("ERR V.STOREBATCH: unknown option (expected FMT F32|F16|BF16|RAW, TOKEN token)")


@dataclass(frozen=True, slots=True)
class StorePlan:
    """A parsed and checked V.STOREBATCH (nothing changed yet): ``rows`` are the input rows to
    encode, or None when ``blob`` already is the layer's encoding."""

    sid: bytes
    layer_id: int
    start: int
    count: int
    spec: LayerSpec
    blob: bytes | memoryview
    rows: np.ndarray | None
    #: a staged store's TOKEN: the rows go to its detached session
    token: bytes | None = None


def target_session(ctx, sp, sid: bytes, token: bytes | None, layer: int, start: int, count: int) -> Session:
    """The session a write goes to: the staging's (TOKEN), else the named one, which a manifest
    must not own (``kv_stage.refuse_if_owned``)."""
    if token is not None:
        staging = staging_for(sp, token, sid, "V.STOREBATCH")
        staging.check_rows(layer, start, count, "V.STOREBATCH")
        return staging.session(sid)
    refuse_if_owned(ctx, sp, sid, "V.STOREBATCH")
    return sp.vstore.require(sid)


def plan_store(ctx, argv: list[bytes]) -> StorePlan:
    bad = "ERR invalid layer_id/start_id/count"
    layer_id = strict_int(argv[2], 0, 1 << 62, bad)
    start = strict_int(argv[3], 0, 1 << 62, bad)
    count = strict_int(argv[4], 1, 1 << 62, bad)
    if layer_id >= MAX_LAYERS:
        raise ReplyError("ERR V.STOREBATCH: layer_id exceeds MAX_VS_LAYERS")
    fmt, token = parse_store_options(argv)
    sid = arg(argv[1])
    session = target_session(ctx, space(ctx), sid, token, layer_id, start, count)
    spec = session.spec(layer_id)
    blob = argv[5]
    if blob.__class__ is memoryview and blob.format != "B":
        blob = blob.cast("B")
    rows = input_rows_checked(spec, fmt, blob, count)
    if start + count > MAX_TOKENS:
        raise ReplyError("ERR V.STOREBATCH failed")
    return StorePlan(sid, layer_id, start, count, spec, blob, rows, token)


def input_rows_checked(spec: LayerSpec, fmt: bytes, blob, count: int) -> np.ndarray | None:
    """The size check; then the rows to encode, or None when the blob is stored as it is."""
    if fmt == b"RAW":
        row_bytes = spec.codec().bytes_per_row(spec.dim)
        expected, why = count * row_bytes, f"count={count} × row_bytes={row_bytes}, FMT RAW"
    else:
        width = INPUT_WIDTH[fmt]
        expected, why = count * spec.dim * width, f"count={count} × per_layer_dim={spec.dim} × {width}"
    if len(blob) != expected:
        raise ReplyError(f"ERR V.STOREBATCH: blob size {len(blob)} != expected {expected} ({why})")
    if fmt == b"RAW" or (fmt, spec.fmt) in ((b"F32", "fp32"), (b"F16", "fp16"), (b"BF16", "bf16")):
        return None
    return input_rows(blob, fmt, count, spec.dim)


def finish_store(ctx, argv: list[bytes], plan: StorePlan, encoded: memoryview, room=None, crc: int | None = None):
    """The deferred store's second half: commit the arena room the workers wrote and store. If
    the session went away or changed shape meanwhile, the command is planned again as it stands."""
    arenas = ctx.server.parts.arenas
    session = current_session(space(ctx), plan)
    if session is None or session.spec(plan.layer_id) != plan.spec:
        if room is not None:
            arenas.cancel(room)
        plan = plan_store(ctx, argv)
        return store_rows(ctx, plan, plan.blob if plan.rows is None else encode_now(plan.spec.codec(), plan.rows))
    if room is None:
        return store_rows(ctx, plan, encoded)
    try:
        return store_rows(ctx, plan, encoded, lambda: arenas.view(arenas.commit(room, encoded, crc)))
    except ReplyError:
        arenas.cancel(room)  # nothing if it was committed
        raise


def store_rows(ctx, plan: StorePlan, encoded, durable_of=None) -> object:
    """Keep the encoded rows (evicting for room first) and log them in their encoded form;
    ``durable_of()`` gives their arena view when the caller already wrote them (else it is put now)."""
    sp = space(ctx)
    session = current_session(sp, plan)
    if session is None:  # the staging went between plan and store
        session = target_session(ctx, sp, plan.sid, plan.token, plan.layer_id, plan.start, plan.count)
    elif plan.token is None:  # a deferred store: a manifest may have taken the namespace meanwhile
        refuse_if_owned(ctx, sp, plan.sid, "V.STOREBATCH")
    staging = sp.stagings.get(plan.token) if plan.token is not None else None
    incoming = len(encoded) if staging is None else max(0, len(encoded) - staging.outstanding)
    durable = arena_view(ctx, encoded) if durable_of is None else durable_of()  # a full disk: nothing evicted
    effects = make_room(ctx, sp, incoming, unit_of(plan.sid))
    sp.vstore.store(session, plan.layer_id, plan.start, plan.count, encoded, write_seq(ctx), durable)
    own = [b"V.STOREBATCH", plan.sid, b"%d" % plan.layer_id, b"%d" % plan.start, b"%d" % plan.count, encoded,
           b"FMT", b"RAW"]
    if staging is not None:
        staging.touched = time.monotonic()
        own += [b"TOKEN", plan.token]
    else:
        sp.touch(plan.sid)
    log_with(ctx, effects, own)
    return OK


def current_session(sp, plan: StorePlan) -> Session | None:
    """The session a planned store still goes to (None if it went meanwhile)."""
    if plan.token is None:
        return sp.vstore.get(plan.sid)
    staging = sp.stagings.get(plan.token)
    return None if staging is None else staging.session(plan.sid)
