"""``V.*``: the raw V-store (sessions of per-layer rows by token position), as the reference.

Rows arrive as fp32 (or ``FMT F16``/``BF16``, or ``FMT RAW``: already in the layer's codec),
are encoded once and stored encoded; each store is logged in its encoded form (``FMT RAW``), so
replay keeps the log's bytes as they are. Fetches decode to fp32 (``F32``), fp16 (``F16``), the
reference's ``NATIVE`` (raw bytes for fp16 layers, fp32 otherwise) or ``RAW`` (stored bytes,
for the client to decode with ``pion.codecs``).
"""

from __future__ import annotations

from bisect import bisect_right
from functools import partial

from pion.codecs import CODECS, CodecError
from pion.kvcache.batch import encode_jobs, encode_now, job_count, render, sent_as_stored
from pion.kvcache.integrity import drop_damaged
from pion.kvcache.layer import Layer, LayerSpec
from pion.kvcache.vstore import MAX_DIM, MAX_LAYERS, MAX_TOKENS, parse_layer_spec
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.resp import OK, Payloads
from pion.server.commands.kv_rows import finish_store, plan_store, store_rows
from pion.server.commands.kv_stage import refuse_if_owned
from pion.server.commands.kvcache import (
    arg,
    charge,
    durable_arenas,
    info_text,
    ledger,
    space,
    strict_int,
    write_reserved,
)
from pion.server.deferred import WORKERS, Deferred, can_defer
from pion.server.registry import command

#: the reference's own codecs, in the order its error texts list them
_REFERENCE_ORDER = ("int8", "turbo4", "turbo3", "turbo2", "fp16", "fp8", "mlx4g32")
#: every uniform codec (one format for all layers), from ``codecs.CODECS``: the reference's first,
#: in its order, then ours in registry order (a new codec is accepted and listed without an edit here)
UNIFORM_NAMES = "|".join(sorted(CODECS, key=lambda name: (
    _REFERENCE_ORDER.index(name) if name in _REFERENCE_ORDER else len(_REFERENCE_ORDER) + list(CODECS).index(name))))
FETCH_FORMATS = (b"F32", b"F16", b"NATIVE", b"RAW")
MAX_IDS = 1024
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
    sp = space(ctx)
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
    arenas = durable_arenas(ctx, size)
    work = (0 if plan.rows is None else plan.rows.nbytes) + (0 if arenas is None else size)
    if work < DEFER_MIN or not can_defer(ctx):
        return store_rows(ctx, plan, plan.blob if plan.rows is None else encode_now(codec, plan.rows))
    room = None if arenas is None else arenas.reserve(size)
    abandon = None if arenas is None else partial(arenas.cancel, room)
    if plan.rows is None:
        jobs = [partial(write_reserved, arenas, room, plan.blob)]
        return Deferred(jobs, lambda ctx, crcs: finish_store(ctx, argv, plan, plan.blob, room, crcs[0]), abandon)
    write = None if arenas is None else partial(write_reserved, arenas, room)
    out, jobs = encode_jobs(codec, plan.rows, job_count(plan.rows, WORKERS), write)
    return Deferred(jobs, lambda ctx, _: finish_store(ctx, argv, plan, memoryview(out), room), abandon)


# -- V.FETCH ---------------------------------------------------------------------------------


def fetch_fmt(words: list[bytes]) -> tuple[list[bytes], bytes]:
    """Split a trailing ``FMT <F32|F16|NATIVE|RAW>`` off the arguments."""
    if len(words) >= 2 and words[-2].upper() == b"FMT":
        fmt = words[-1].upper()
        if fmt not in FETCH_FORMATS:
            raise ReplyError("ERR V.FETCH: unknown FMT (expected F32|F16|NATIVE|RAW)")
        return words[:-2], fmt
    return words, b"F32"


def read_rows(layer: Layer, index: int, start: int, end: int):
    """Rows ``[start, end)`` of a layer, all of them stored: a range past what was stored, or
    with rows never stored (or dropped as damaged) in it, is refused rather than zero-filled (a
    tiny session must not make a fetch render gigabytes of zeros, nor serve a hole as zeros)."""
    if not holds(layer, start, end):
        raise ReplyError(f"ERR V.FETCH: layer {index} does not hold rows [{start}, {end}) "
                         f"({layer.rows} rows stored, up to position {layer.tokens})")
    return layer.read(start, end)


def holds(layer: Layer, start: int, end: int) -> bool:
    """Is every row of ``[start, end)`` stored?"""
    if layer.tokens < end:
        return False
    if layer.rows == layer.tokens:
        return True
    pos = max(bisect_right(layer.starts, start) - 1, 0)
    reached = start
    for chunk in layer.chunks[pos:]:
        if chunk.start > reached:
            return False
        reached = max(reached, chunk.end)
        if reached >= end:
            return True
    return False


def reply_bytes(layer: Layer, rows: int, fmt: bytes) -> int:
    """Bytes a layer's rows take in the reply, in the fetch format."""
    if sent_as_stored(layer, fmt):
        return rows * layer.row_bytes
    return rows * layer.spec.dim * (2 if fmt == b"F16" else 4)


def admit(ctx, total: int) -> None:
    """A fetch reply is bounded by its total size (``proto-max-bulk-len``, over all its layers)
    and counted, with the replies other connections still hold, against ``maxmemory`` and the
    tenant's quota before anything is rendered (``MemoryManager.admit``)."""
    limit = ctx.server.settings.proto_max_bulk_len
    if total > limit:
        raise ReplyError(f"ERR V.FETCH: the reply would be {total} bytes, more than proto-max-bulk-len ({limit})")
    charge(ctx, total, "reply")


def check_blobs(sp, session, layers) -> None:
    """Drop the rows of damaged arena blobs before they can be served (pion.kvcache.integrity)."""
    if sp.blob_ok is not None:
        drop_damaged(sp.vstore, session, layers, sp.blob_ok)


def account(ctx, sp, payloads: list, rows: int) -> None:
    ledger(ctx).bump("kvprefix_bytes_served", sum(len(p) for p in payloads if p is not None))
    sp.vstore.total_fetches += rows


@command("V.FETCH", -4, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def v_fetch(ctx, argv):
    """V.FETCH sid layer id [id ...] | sid layer RANGE start end | sid BATCH start end [layers] [FMT F32|F16|NATIVE|RAW]."""
    words, fmt = fetch_fmt([arg(a) for a in argv])
    sp = space(ctx)
    session = sp.vstore.require(words[1])
    sp.touch(words[1])
    if words[2].upper() == b"BATCH":
        return fetch_batch(ctx, sp, session, words, fmt)
    layer_id = strict_int(words[2], 0, 1 << 62, "ERR invalid layer_id")
    check_blobs(sp, session, (layer_id,))
    layer = session.layer(layer_id)
    if len(words) > 3 and words[3].upper() == b"RANGE":
        start, end = parse_range(words, 4, 6)
        if layer is None or layer.tokens == 0:  # nothing ever stored (rows dropped as damaged: refused)
            return None
        data = read_rows(layer, layer_id, start, end)
        admit(ctx, reply_bytes(layer, end - start, fmt))
        payload = render(layer, data, end - start, fmt)
        account(ctx, sp, [payload], end - start)
        return payload
    return fetch_ids(ctx, sp, layer, words[3:], fmt)


def parse_range(words: list[bytes], at: int, length: int) -> tuple[int, int]:
    if len(words) < at + 2 or len(words) > length:
        raise ReplyError(SYNTAX)
    bad = "ERR invalid RANGE: end must exceed start (>=0)"
    start = strict_int(words[at], 0, MAX_TOKENS, bad)
    end = strict_int(words[at + 1], 0, MAX_TOKENS, bad)
    if end <= start:
        raise ReplyError(bad)
    return start, end


def fetch_ids(ctx, sp, layer: Layer | None, ids: list[bytes], fmt: bytes):
    """The reference's id form: at most 1024 ids, rows not stored are zero-filled (bounded)."""
    if fmt == b"NATIVE":
        raise ReplyError("ERR FMT NATIVE requires the RANGE or BATCH form")
    if len(ids) > MAX_IDS:
        raise ReplyError(f"ERR V.FETCH: at most {MAX_IDS} ids (use RANGE or BATCH)")
    positions = [strict_int(i, 0, MAX_TOKENS, "ERR invalid token id") for i in ids]
    if layer is None or layer.rows == 0:
        return None
    admit(ctx, reply_bytes(layer, len(positions), fmt))
    data = b"".join([layer.read(p, p + 1) for p in positions])
    payload = render(layer, data, len(positions), fmt)
    account(ctx, sp, [payload], len(positions))
    return payload


def fetch_batch(ctx, sp, session, words: list[bytes], fmt: bytes):
    start, end = parse_range(words, 3, 6)
    layers = session.num_layers
    if len(words) == 6:
        asked = strict_int(words[5], 0, MAX_LAYERS, "ERR invalid num_layers")
        layers = min(asked, layers) if asked else layers
    if layers == 0:
        return None
    check_blobs(sp, session, range(layers))
    rows = end - start
    reads: list = []
    total = 0
    for index in range(layers):
        layer = session.layer(index)
        empty = layer is None or layer.tokens == 0
        reads.append(None if empty else partial(render, layer, read_rows(layer, index, start, end), rows, fmt))
        total += 0 if empty else reply_bytes(layer, rows, fmt)
    admit(ctx, total)
    jobs = [job for job in reads if job is not None]
    decoded = [job.args[0].spec.dim for job in jobs if not sent_as_stored(job.args[0], fmt)]
    if 4 * rows * sum(decoded) >= DEFER_MIN and can_defer(ctx):  # decoding in the pool, a layer a job
        return Deferred(jobs, lambda ctx, rendered: batch_reply(ctx, sp, reads, rendered, rows))
    return batch_reply(ctx, sp, reads, [job() for job in jobs], rows)


def batch_reply(ctx, sp, reads: list, rendered: list, rows: int) -> list:
    """One payload per layer (nil for the empty ones), counted as served."""
    payloads = iter(rendered)
    out = Payloads(None if read is None else next(payloads) for read in reads)
    account(ctx, sp, out, rows * len(rendered))
    return out


# -- V.INFO, rollback, drop ------------------------------------------------------------------


@command("V.INFO", -1, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def v_info(ctx, argv):
    """V.INFO [sid]: key:value lines about the store or one session."""
    sp = space(ctx)
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
    sp = space(ctx)
    session = sp.vstore.require(arg(argv[1]))
    snap_id = sp.next_snap_id + 1
    sp.vstore.snapshot(session, snap_id)
    sp.next_snap_id = snap_id
    return snap_id


@command("V.RESTORE", 3, "write", categories="@write @pion", group="pion", since="0.1.0")
def v_restore(ctx, argv):
    """V.RESTORE sid snap_id: put every layer back as it was at the snapshot (the snapshot stays)."""
    sp = space(ctx)
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
    session = space(ctx).vstore.require(arg(argv[1]))
    snap_id = strict_int(argv[2], 0, 1 << 62, "ERR invalid snap_id")
    return 1 if session.snapshots.pop(snap_id, None) is not None else 0


@command("V.TRUNCATE", 4, "write", categories="@write @pion", group="pion", since="0.1.0")
def v_truncate(ctx, argv):
    """V.TRUNCATE sid layer tokens: forget a layer's rows at and past ``tokens`` (Pion's)."""
    sp = space(ctx)
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
    sp = space(ctx)
    sid = arg(argv[1])
    if not sp.vstore.drop(sid):
        return 0
    ctx.dirty()
    return 1

