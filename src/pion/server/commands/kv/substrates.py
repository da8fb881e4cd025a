"""The other memory substrates and the value receipt: ``SSM.PREFIX.*`` (opaque recurrent-state
blobs per session and layer, durable, evicted with their prefix), ``STATE.*`` (fixed-size
buffers overwritten in place) and ``PION.STATS`` (with INFO's ``# Pion`` section).
"""

from __future__ import annotations

import time

from pion.kvcache import rows as kv_rows
from pion.kvcache.eviction import unit_of
from pion.kvcache.state import MAX_BUFFER
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.resp import OK
from pion.server.args import arg, info_text, strict_int
from pion.server.commands.kv.stage import refuse_if_owned, split_token, staging_for
from pion.server.registry import command

LAYER_ERROR = "ERR invalid layer_id (must be >= 0)"


# -- SSM.PREFIX ----------------------------------------------------------------------------------


@command("SSM.PREFIX.STORE", -4, "write denyoom zero_copy", categories="@write @pion", group="pion", since="0.1.0")
def ssm_prefix_store(ctx, argv):
    """SSM.PREFIX.STORE sid layer blob [TOKEN token]: keep (or replace) one layer's recurrent state, as given.

    TOKEN stores into a staged store of namespace ``sid``; without it, the state of a namespace
    registered with a manifest refuses the write.
    """
    words, token = split_token(list(argv), "SSM.PREFIX.STORE")
    if len(words) != 4:
        raise ReplyError(SYNTAX)
    sid = arg(words[1])
    layer = strict_int(words[2], 0, 1 << 31, LAYER_ERROR)
    blob = words[3]
    sp = ctx.kv_space()
    if token is not None:
        return store_staged_state(ctx, sp, sid, layer, blob, token)
    refuse_if_owned(ctx, sp, sid, "SSM.PREFIX.STORE", ssm=True)
    effects = sp.make_room(ctx.kv_budget, len(blob), unit_of(sid))
    durable = kv_rows.place(ctx.blob_arenas(len(blob)), blob, ctx.replaying)
    kept = durable if durable is not None else blob
    sp.ssm.store(sid, layer, kept)  # SSM state lives off the heap
    sp.touch(sid)
    ctx.log_with(effects, [b"SSM.PREFIX.STORE", sid, b"%d" % layer, kept])  # the journal references the arena view
    return OK


def store_staged_state(ctx, sp, sid: bytes, layer: int, blob, token: bytes):
    staging = staging_for(sp, token, sid, "SSM.PREFIX.STORE", ssm=True)
    if layer not in staging.state_layers:
        raise ReplyError(f"ERR SSM.PREFIX.STORE: the staged prefix declares state slots {list(staging.state_layers)} "
                         f"(slot {layer} given)")
    old = staging.ssm.get(layer)
    effects = sp.make_room(ctx.kv_budget, max(0, len(blob) - (0 if old is None else len(old))), unit_of(sid))
    durable = kv_rows.place(ctx.blob_arenas(len(blob)), blob, ctx.replaying)
    kept = staging.ssm[layer] = durable if durable is not None else blob
    staging.ssm_bytes += len(blob) - (0 if old is None else len(old))
    staging.touched = time.monotonic()
    ctx.log_with(effects, [b"SSM.PREFIX.STORE", sid, b"%d" % layer, kept, b"TOKEN", token])
    return OK


@command("SSM.PREFIX.FETCH", 3, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def ssm_prefix_fetch(ctx, argv):
    """SSM.PREFIX.FETCH sid layer: the stored blob, or nil."""
    sid = arg(argv[1])
    layer = strict_int(argv[2], 0, 1 << 31, LAYER_ERROR)
    sp = ctx.kv_space()
    blob = sp.ssm.fetch(sid, layer)
    if blob is not None and sp.blob_ok is not None and sp.blob_ok(blob) is False:
        sp.ssm.drop(sid, layer)  # a damaged arena blob is a missing one (pion.kvcache.integrity)
        blob = None
    if blob is None:
        return None
    sp.touch(sid)
    return blob if blob.__class__ is bytes else bytes(blob)


@command("SSM.PREFIX.DROP", -2, "write", categories="@write @pion", group="pion", since="0.1.0")
def ssm_prefix_drop(ctx, argv):
    """SSM.PREFIX.DROP sid [layer]: forget one layer or all of them (idempotent)."""
    if len(argv) > 3:
        raise ReplyError(SYNTAX)
    layer = strict_int(argv[2], 0, 1 << 31, LAYER_ERROR) if len(argv) == 3 else None
    if ctx.kv_space().ssm.drop(arg(argv[1]), layer):
        ctx.dirty()
    return OK


# -- STATE -----------------------------------------------------------------------------------------


@command("STATE.ALLOC", -3, "write denyoom", categories="@write @pion", group="pion", since="0.1.0")
def state_alloc(ctx, argv):
    """STATE.ALLOC sid size [MODE fixed|ring]: a zero-filled buffer of ``size`` bytes."""
    size = strict_int(argv[2], 1, MAX_BUFFER, f"ERR STATE.ALLOC: size must be 1..{MAX_BUFFER}")
    mode = "fixed"
    if len(argv) != 3:
        if len(argv) != 5 or arg(argv[3]).upper() != b"MODE" or arg(argv[4]).lower() not in (b"fixed", b"ring"):
            raise ReplyError("ERR STATE.ALLOC: expected MODE fixed|ring")
        mode = arg(argv[4]).lower().decode()
    ctx.charge(size, "STATE buffer")  # counted in the tenant's quota (and maxmemory) like its keys
    ctx.kv_space().state.alloc(arg(argv[1]), size, mode)
    ctx.dirty()
    return OK


@command("STATE.WRITE", 4, "write denyoom zero_copy", categories="@write @pion", group="pion", since="0.1.0")
def state_write(ctx, argv):
    """STATE.WRITE sid offset bytes: overwrite in place (a ring buffer wraps); the bytes written."""
    offset = strict_int(argv[2], 0, 1 << 62, "ERR STATE.WRITE: offset must be a non-negative integer")
    written = ctx.kv_space().state.write(arg(argv[1]), offset, argv[3])
    ctx.dirty()
    return written


@command("STATE.READ", 4, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def state_read(ctx, argv):
    """STATE.READ sid offset length: ``length`` bytes from ``offset`` (at most 4 MB)."""
    offset = strict_int(argv[2], 0, 1 << 62, "ERR STATE.READ: offset must be a non-negative integer")
    length = strict_int(argv[3], 0, 1 << 62, "ERR STATE.READ: length must be a non-negative integer")
    return ctx.kv_space().state.read(arg(argv[1]), offset, length)


@command("STATE.FREE", 2, "write fast", categories="@write @pion", group="pion", since="0.1.0")
def state_free(ctx, argv):
    """STATE.FREE sid: release a buffer; 1 if it existed."""
    if not ctx.kv_space().state.free(arg(argv[1])):
        return 0
    ctx.dirty()
    return 1


@command("STATE.INFO", -1, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def state_info(ctx, argv):
    """STATE.INFO [sid]: key:value lines about all buffers or one."""
    store = ctx.kv_space().state
    if len(argv) == 1:
        return info_text([("enabled", 1), ("buffers", len(store.buffers)), ("bytes", store.nbytes),
                          ("max_buffer_bytes", MAX_BUFFER)])
    if len(argv) > 2:
        raise ReplyError(SYNTAX)
    buffer = store.require(arg(argv[1]))
    return info_text([("size", len(buffer.data)), ("mode", buffer.mode), ("writes", buffer.writes)])


# -- PION.STATS ------------------------------------------------------------------------------------


@command("PION.STATS", -1, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def pion_stats(ctx, argv):
    """PION.STATS [RESET]: the 16 value-receipt fields (a map in RESP3), or +OK after zeroing them."""
    stats = ctx.kv_ledger()
    if len(argv) > 1 and arg(argv[1]).upper() == b"RESET":
        stats.reset()
        return OK
    return stats.fields(int(time.time() - ctx.server.start_time))


def info_section(server) -> dict[str, object]:
    """INFO ``# Pion``: the ledger (without the µs fields) and the K/V cache's size."""
    kv = server.parts.kvcache
    if kv is None:
        return {}
    rows = dict(kv.ledger.info_fields(int(time.time() - server.start_time)))
    sp = kv.default
    rows.update({
        "vstore_sessions": len(sp.vstore), "vstore_bytes": sp.vstore.nbytes, "ssm_bytes": sp.ssm.nbytes,
        "registered_prefixes": len(sp.registry.prefixes), "vstore_evictions": sp.evictor.evictions,
        "kv_maxmemory": server.settings.kv_maxmemory,
    })
    return rows
