"""``V.*``: the raw V-store (sessions of per-layer rows by token position), as the reference;
``V.FETCH`` is in ``kv_fetch``.

Rows arrive as fp32 (or ``FMT F16``/``BF16``, or ``FMT RAW``: already in the layer's codec),
are encoded once and stored encoded; each store is logged in its encoded form (``FMT RAW``), so
replay keeps the log's bytes as they are.

The store path runs one way: the handler parses and checks the request (``plan_store``), then
hands the encoded rows, the arena store (``Ctx.blob_arenas``: None without the log) and the
journal sequence to the engine's row writer (``pion.kvcache.rows.write``), which places the blob
in an arena once, evicts for room and keeps the rows in the V-store. The record logged names
the arena view the writer returns, so the journal references the blob (``ArenaStore.ref_of``)
instead of writing it again. A large batch is encoded (and written to its arena room) in the
worker pool first (``Deferred``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import numpy as np

from pion.codecs import CODECS, CodecError
from pion.kvcache import rows as kv_rows
from pion.kvcache.batch import encode_jobs, encode_now, input_rows, job_count
from pion.kvcache.eviction import unit_of
from pion.kvcache.layer import LayerSpec
from pion.kvcache.vstore import MAX_DIM, MAX_LAYERS, MAX_TOKENS, Session, parse_layer_spec
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.resp import OK
from pion.server.args import arg, info_text, strict_int
from pion.server.commands.kv.stage import refuse_if_owned, split_token, staging_for
from pion.server.deferred import WORKERS, Deferred, can_defer
from pion.server.registry import command

#: the reference's own codecs, in the order its error texts list them
_REFERENCE_ORDER = ("int8", "turbo4", "turbo3", "turbo2", "fp16", "fp8", "mlx4g32")
#: every uniform codec (one format for all layers), from ``codecs.CODECS``: the reference's first,
#: in its order, then ours in registry order (a new codec is accepted and listed without an edit here)
UNIFORM_NAMES = "|".join(sorted(CODECS, key=lambda name: (
    _REFERENCE_ORDER.index(name) if name in _REFERENCE_ORDER else len(_REFERENCE_ORDER) + list(CODECS).index(name))))
INPUT_WIDTH = {b"F32": 4, b"F16": 2, b"BF16": 2}
#: a store or fetch moving at least this many bytes through a codec runs in the worker pool
DEFER_MIN = 256 * 1024


# -- V.CREATE ------------------------------------------------------------------------------


def parse_uniform_fmt(raw: bytes, dim: int, where: str) -> str:
    fmt = arg(raw).decode("latin-1").lower()
    if fmt == "bf16_rope_fp8_body":
        raise ReplyError(f"ERR {where}: bf16_rope_fp8_body requires SCHEMA form with per-layer rope=N")
    if fmt not in UNIFORM_NAMES.split("|"):
        raise ReplyError(f"ERR {where}: unknown VQUANT format '{fmt}' (want {UNIFORM_NAMES})")
    try:
        LayerSpec(dim, fmt).codec().check_dim(dim)
    except CodecError:
        raise ReplyError(f"ERR {where}: VQUANT '{fmt}' needs value_dim divisible by 32 (got {dim})") from None
    return fmt


def parse_create(argv: list[bytes]) -> tuple[LayerSpec, tuple[LayerSpec, ...] | None, bool]:
    """``(default spec, schema or None, VQUANT given)`` of a V.CREATE."""
    words = [arg(a) for a in argv]
    if words[2].upper() == b"SCHEMA":
        return LayerSpec(0, "int8"), parse_schema(words, 3, 0), True
    if len(words) > 3 and words[3].upper() == b"SCHEMA":
        default_dim = strict_int(words[2], 0, MAX_DIM, f"ERR V.CREATE SCHEMA: default_dim must be 0..{MAX_DIM}")
        return LayerSpec(default_dim, "int8"), parse_schema(words, 4, default_dim), True
    dim = strict_int(words[2], 1, MAX_DIM, "ERR invalid value_dim (must be 1-8192)")
    if len(words) == 3:
        return LayerSpec(dim, "int8"), None, False
    if len(words) != 5 or words[3].upper() != b"VQUANT":
        raise ReplyError(SYNTAX)
    return LayerSpec(dim, parse_uniform_fmt(words[4], dim, "V.CREATE")), None, True


def parse_schema(words: list[bytes], at: int, default_dim: int) -> tuple[LayerSpec, ...]:
    if at >= len(words):
        raise ReplyError("ERR V.CREATE SCHEMA: missing N")
    count = strict_int(words[at], 1, MAX_LAYERS, f"ERR V.CREATE SCHEMA: N must be 1..{MAX_LAYERS}")
    specs = words[at + 1:]
    if len(specs) != count:
        raise ReplyError(f"ERR V.CREATE SCHEMA: expected {count} layer specs, got {len(specs)}")
    return tuple(parse_layer_spec(s.decode("latin-1"), i, default_dim) for i, s in enumerate(specs))


@command("V.CREATE", -3, "write denyoom", categories="@write @pion", group="pion", since="0.1.0")
def v_create(ctx, argv):
    """V.CREATE sid value_dim [VQUANT fmt] | V.CREATE sid [default_dim] SCHEMA N spec...: a session, its index.

    Re-creating an existing session with the same shape touches it; a different dim, codec or
    schema is refused (the reference silently kept the old one).
    """
    sid = arg(argv[1])
    default, schema, explicit = parse_create(argv)
    sp = ctx.kv_space()
    session = sp.vstore.get(sid)
    if session is None:
        refuse_if_owned(ctx, sp, sid, "V.CREATE")
    if session is not None:
        same_dim = session.default.dim == default.dim and session.schema == schema
        if not same_dim or (explicit and session.default.fmt != default.fmt):
            raise ReplyError(f"ERR V.CREATE: session '{sid.decode('utf-8', 'replace')}' exists with a different shape")
        sp.touch(sid)
        return session.index
    session = sp.vstore.create(sid, default, schema)
    sp.touch(sid)
    ctx.dirty()
    return session.index


# -- V.STOREBATCH ----------------------------------------------------------------------------


@command("V.STOREBATCH", -6, "write denyoom zero_copy", categories="@write @pion", group="pion", since="0.1.0")
def v_storebatch(ctx, argv):
    """V.STOREBATCH sid layer start count blob [FMT F32|F16|BF16|RAW] [TOKEN token]: store rows [start, start+count).

    A large batch is encoded, and written to its log arena, in the worker pool (``Deferred``);
    the rows are stored and logged when that is done, as if the command arrived then. TOKEN
    writes into a staged store (``KV.PREFIX.REGISTER ... STAGE``); without it, the session of a
    namespace registered with a manifest refuses the write.
    """
    plan = plan_store(ctx, argv)
    codec = plan.spec.codec()
    size = len(plan.blob) if plan.rows is None else plan.count * codec.bytes_per_row(plan.spec.dim)
    arenas = ctx.blob_arenas(size)
    work = (0 if plan.rows is None else plan.rows.nbytes) + (0 if arenas is None else size)
    if work < DEFER_MIN or not can_defer(ctx):
        return store_rows(ctx, plan, plan.blob if plan.rows is None else encode_now(codec, plan.rows))
    if arenas is None:
        out, jobs = encode_jobs(codec, plan.rows, job_count(plan.rows, WORKERS), None)
        return Deferred(jobs, lambda ctx, _: finish_store(ctx, argv, plan, memoryview(out)))
    room = arenas.reserve(size)
    if plan.rows is None:
        jobs = [partial(kv_rows.write_reserved, arenas, room, plan.blob)]
        return Deferred(jobs, lambda ctx, crcs: finish_store(ctx, argv, plan, plan.blob, (arenas, room, crcs[0])),
                        partial(arenas.cancel, room))
    out, jobs = encode_jobs(codec, plan.rows, job_count(plan.rows, WORKERS), partial(kv_rows.write_reserved, arenas, room))
    return Deferred(jobs, lambda ctx, _: finish_store(ctx, argv, plan, memoryview(out), (arenas, room, None)),
                    partial(arenas.cancel, room))


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
    session = target_session(ctx, ctx.kv_space(), sid, token, layer_id, start, count)
    spec = session.spec(layer_id)
    blob = argv[5]
    if blob.__class__ is memoryview and blob.format != "B":
        blob = blob.cast("B")
    rows_in = input_rows_checked(spec, fmt, blob, count)
    if start + count > MAX_TOKENS:
        raise ReplyError("ERR V.STOREBATCH failed")
    return StorePlan(sid, layer_id, start, count, spec, blob, rows_in, token)


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


def finish_store(ctx, argv: list[bytes], plan: StorePlan, encoded: memoryview, reserved=None):
    """The deferred store's second half: commit the arena room the workers wrote
    (``reserved``: arenas, room, crc or None) and store. If the session went away or changed
    shape meanwhile, the command is planned again as it stands."""
    session = current_session(ctx.kv_space(), plan)
    if session is None or session.spec(plan.layer_id) != plan.spec:
        if reserved is not None:
            reserved[0].cancel(reserved[1])
        plan = plan_store(ctx, argv)
        return store_rows(ctx, plan, plan.blob if plan.rows is None else encode_now(plan.spec.codec(), plan.rows))
    if reserved is None:
        return store_rows(ctx, plan, encoded)
    arenas, room, crc = reserved
    try:
        return store_rows(ctx, plan, encoded, lambda: kv_rows.commit_reserved(arenas, room, encoded, crc))
    except ReplyError:
        arenas.cancel(room)  # nothing if it was committed
        raise


def store_rows(ctx, plan: StorePlan, encoded, durable_of=None) -> object:
    """Hand the encoded rows to the row writer (``kvcache.rows.write``) and log them in their
    encoded form, naming the arena view it placed them in; ``durable_of()`` gives that view when
    the workers already wrote them."""
    sp = ctx.kv_space()
    session = current_session(sp, plan)
    if session is None:  # the staging went between plan and store
        session = target_session(ctx, sp, plan.sid, plan.token, plan.layer_id, plan.start, plan.count)
    elif plan.token is None:  # a deferred store: a manifest may have taken the namespace meanwhile
        refuse_if_owned(ctx, sp, plan.sid, "V.STOREBATCH")
    staging = sp.stagings.get(plan.token) if plan.token is not None else None
    incoming = len(encoded) if staging is None else max(0, len(encoded) - staging.outstanding)
    durable = durable_of() if durable_of is not None else kv_rows.place(None, encoded, ctx.replaying)
    written = kv_rows.write(sp, session, plan.layer_id, plan.start, plan.count, encoded, ctx.write_seq(),
                         arenas=None if durable is not None else ctx.blob_arenas(len(encoded)), durable=durable,
                         budget=ctx.kv_budget, incoming=incoming, protect=unit_of(plan.sid))
    own = [b"V.STOREBATCH", plan.sid, b"%d" % plan.layer_id, b"%d" % plan.start, b"%d" % plan.count,
           written.logged, b"FMT", b"RAW"]
    if staging is not None:
        staging.touched = time.monotonic()
        own += [b"TOKEN", plan.token]
    else:
        sp.touch(plan.sid)
    ctx.log_with(written.evicted, own)
    return OK


def current_session(sp, plan: StorePlan) -> Session | None:
    """The session a planned store still goes to (None if it went meanwhile)."""
    if plan.token is None:
        return sp.vstore.get(plan.sid)
    staging = sp.stagings.get(plan.token)
    return None if staging is None else staging.session(plan.sid)


# -- V.INFO, rollback, drop ------------------------------------------------------------------


@command("V.INFO", -1, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def v_info(ctx, argv):
    """V.INFO [sid]: key:value lines about the store or one session."""
    sp = ctx.kv_space()
    store = sp.vstore
    if len(argv) == 1:
        total = sum(s.total_tokens() for s in store.sessions.values())
        return info_text([("enabled", 1), ("sessions", len(store)), ("total_tokens", total),
                          ("total_fetches", store.total_fetches), ("bytes", store.nbytes)])
    if len(argv) > 2:
        raise ReplyError(SYNTAX)
    session = store.require(arg(argv[1]))
    rows: list[tuple[str, object]] = [
        ("session_idx", session.index), ("value_dim", session.value_dim()), ("v_format", session.format_name()),
        ("num_layers", session.num_layers), ("schema", "heterogeneous" if session.heterogeneous else "uniform"),
    ]
    for index in sorted(session.layers):
        if session.layers[index].tokens:
            rows.append((f"layer_{index}_tokens", session.layers[index].tokens))
    for index, spec in enumerate(session.schema or ()):
        rows.extend([(f"layer_{index}_dim", spec.dim), (f"layer_{index}_fmt", spec.fmt)])
        if spec.fmt == "bf16_rope_fp8_body":
            rows.append((f"layer_{index}_rope", spec.rope))
    rows.extend([("total_tokens", session.total_tokens()), ("bytes", session.nbytes)])
    return info_text(rows)


@command("V.SNAPSHOT", 2, "fast", categories="@pion", group="pion", since="0.1.0")
def v_snapshot(ctx, argv):
    """V.SNAPSHOT sid: remember every layer's rows (in memory, for speculative rollback); the snap id."""
    sp = ctx.kv_space()
    session = sp.vstore.require(arg(argv[1]))
    snap_id = sp.next_snap_id + 1
    sp.vstore.snapshot(session, snap_id)
    sp.next_snap_id = snap_id
    return snap_id


@command("V.RESTORE", 3, "write", categories="@write @pion", group="pion", since="0.1.0")
def v_restore(ctx, argv):
    """V.RESTORE sid snap_id: put every layer back as it was at the snapshot (the snapshot stays)."""
    sp = ctx.kv_space()
    sid = arg(argv[1])
    session = sp.vstore.require(sid)
    refuse_if_owned(ctx, sp, sid, "V.RESTORE")
    snap_id = strict_int(argv[2], 0, 1 << 62, "ERR V.RESTORE: unknown snap_id for this session")
    changed = sp.vstore.restore(session, snap_id)
    effects: list[list[bytes]] = []
    for index, chunks in changed:
        effects.append([b"V.TRUNCATE", sid, b"%d" % index, b"0"])
        for chunk in chunks:
            effects.append([b"V.STOREBATCH", sid, b"%d" % index, b"%d" % chunk.start, b"%d" % chunk.count,
                            bytes(chunk.data), b"FMT", b"RAW"])
    ctx.dirty()
    ctx.rewrite(*effects)
    return OK


@command("V.COMMIT", 3, "fast", categories="@pion", group="pion", since="0.1.0")
def v_commit(ctx, argv):
    """V.COMMIT sid snap_id: release a snapshot; 1 if it existed."""
    session = ctx.kv_space().vstore.require(arg(argv[1]))
    snap_id = strict_int(argv[2], 0, 1 << 62, "ERR invalid snap_id")
    return 1 if session.snapshots.pop(snap_id, None) is not None else 0


@command("V.TRUNCATE", 4, "write", categories="@write @pion", group="pion", since="0.1.0")
def v_truncate(ctx, argv):
    """V.TRUNCATE sid layer tokens: forget a layer's rows at and past ``tokens`` (Pion's)."""
    sp = ctx.kv_space()
    session = sp.vstore.require(arg(argv[1]))
    refuse_if_owned(ctx, sp, session.sid, "V.TRUNCATE")
    layer_id = strict_int(argv[2], 0, MAX_LAYERS - 1, "ERR invalid layer_id")
    tokens = strict_int(argv[3], 0, MAX_TOKENS, "ERR invalid tokens")
    sp.vstore.truncate(session, layer_id, tokens)
    ctx.dirty()
    return OK


@command("V.DROP", 2, "write", categories="@write @pion", group="pion", since="0.1.0")
def v_drop(ctx, argv):
    """V.DROP sid: free a session; 1 if it existed."""
    sp = ctx.kv_space()
    sid = arg(argv[1])
    if not sp.vstore.drop(sid):
        return 0
    ctx.dirty()
    return 1

