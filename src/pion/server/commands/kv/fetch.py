"""``V.FETCH``: rows of a V-store session back to the client, the K/V hit path.

One way down: the handler parses the request, finds the session in the client's space
(``Ctx.kv_space``), checks the rows are all there, admits the reply's size, and renders each
layer (``kvcache.batch.render``: the stored bytes as they are for ``FMT RAW`` and same-format
fetches, else decoded, in the worker pool when large). The reply goes out as the stored blobs
themselves (``resp.Payloads``: no copy).
"""

from __future__ import annotations

from bisect import bisect_right
from functools import partial

from pion.kvcache.batch import render, sent_as_stored
from pion.kvcache.integrity import drop_damaged
from pion.kvcache.layer import Layer
from pion.kvcache.vstore import MAX_LAYERS, MAX_TOKENS
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.resp import Payloads
from pion.server.args import arg, strict_int
from pion.server.commands.kv.vstore import DEFER_MIN
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command

FETCH_FORMATS = (b"F32", b"F16", b"NATIVE", b"RAW")
MAX_IDS = 1024


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
    ctx.charge(total, "reply")


def check_blobs(sp, session, layers) -> None:
    """Drop the rows of damaged arena blobs before they can be served (pion.kvcache.integrity)."""
    if sp.blob_ok is not None:
        drop_damaged(sp.vstore, session, layers, sp.blob_ok)


def account(ctx, sp, payloads: list, rows: int) -> None:
    ctx.kv_ledger().bump("kvprefix_bytes_served", sum(len(p) for p in payloads if p is not None))
    sp.vstore.total_fetches += rows


@command("V.FETCH", -4, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def v_fetch(ctx, argv):
    """V.FETCH sid layer id [id ...] | sid layer RANGE start end | sid BATCH start end [layers] [FMT F32|F16|NATIVE|RAW]."""
    words, fmt = fetch_fmt([arg(a) for a in argv])
    sp = ctx.kv_space()
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
