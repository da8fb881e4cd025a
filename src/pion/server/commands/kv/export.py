"""``V.EXPORT``: a prefix's K/V rendered once into a safetensors file for a client on this host.

The reference's export lane (spec section 5.6), with one addition: ``DTYPE F32|BF16`` next to the
reference's fp16, so a float32 or bfloat16 model loads its own values bit for bit (an export is
then exact wherever ``V.FETCH ... FMT RAW`` is). The file format, freshness and clean-up rules
live in ``pion.kvcache.export``; this module checks the request and schedules the writing.
"""

from __future__ import annotations

import logging
import os
from functools import partial

from pion.kvcache.export import DTYPES, ExportKey, build_header, clean_stale, render_tensor, tensor_bytes, write_all
from pion.kvcache.vstore import MAX_DIM, MAX_LAYERS, MAX_TOKENS, Session
from pion.protocol.errors import SYNTAX, ReplyError
from pion.server.args import arg, strict_int
from pion.server.commands.kv.fetch import check_blobs, holds
from pion.server.commands.kv.vstore import DEFER_MIN
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command

log = logging.getLogger("pion.server")

RANGE_ERROR = "ERR invalid RANGE: end must exceed start (>=0)"


@command("V.EXPORT", -8, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def v_export(ctx, argv):
    """V.EXPORT sid_k sid_v start end n_layers n_kv_heads head_dim [DTYPE F16|F32|BF16]: a safetensors path.

    The file holds ``k.<i>``/``v.<i>`` = rows ``[start, end)`` of layer i, ``[1, heads, end-start,
    head_dim]`` in DTYPE (default F16, as the reference). The same request on unchanged sessions
    answers the same path; a change to either session makes the next answer a new file.
    """
    words = [arg(a) for a in argv]
    key = parse_export(words)
    budget = ctx.server.settings.kv_export_maxbytes
    if budget == 0:
        raise ReplyError("ERR V.EXPORT is disabled (kv-export-maxbytes is 0)")
    sp = ctx.kv_space()
    sessions = (sp.vstore.require(key.sid_k), sp.vstore.require(key.sid_v))
    for side, session in zip("KV", sessions, strict=True):
        check_blobs(sp, session, range(min(key.n_layers, session.num_layers)))  # damaged rows are missing
        check_session(side, session, key)
    sp.touch(key.sid_k)
    exports = sp.exports
    tenant = getattr(ctx.client, "tenant", None) or b""
    try:  # checked every time: a directory removed under the running server is made again
        base = ctx.kv_engine.export_root(ctx.server.settings.dir)
        exports.open_directory(base, tenant.encode() if isinstance(tenant, str) else tenant)
    except OSError as exc:
        raise ReplyError(f"ERR V.EXPORT: cannot create the export directory: {exc.strerror or exc}") from None
    exports.sweep(lambda sid: None if (s := sp.vstore.get(sid)) is None else s.version)
    versions = (sessions[0].version, sessions[1].version)
    found = exports.lookup(key, versions)
    if found is not None:
        return found.encode()
    header, offsets = build_header(key, metadata(key))
    nbytes = len(header) + 2 * key.n_layers * tensor_bytes(key)
    ctx.charge(nbytes, "export file")  # shared memory the tenant (and maxmemory) pays for
    if not exports.make_room(nbytes, budget):
        raise ReplyError(f"ERR V.EXPORT: the export needs {nbytes} bytes, more than kv-export-maxbytes ({budget})")
    temp, final = exports.temp_path()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    jobs = [partial(write_all, fd, memoryview(header), 0)]
    layers = [session.layer(i) for i in range(key.n_layers) for session in sessions]
    for offset, layer in zip(offsets, layers, strict=True):
        jobs.append(partial(render_tensor, fd, offset, layer, layer.read(key.start, key.end), key))

    def finish(ctx, _results):
        os.close(fd)
        os.replace(temp, final)
        return exports.add(key, str(final), versions, nbytes).encode()

    def abandon():
        os.close(fd)
        os.unlink(temp)

    if nbytes >= DEFER_MIN and can_defer(ctx):
        return Deferred([partial(guarded, job, final) for job in jobs], finish, abandon)
    try:
        for job in jobs:
            guarded(job, final)
    except ReplyError:
        abandon()
        raise
    return finish(ctx, None)


def guarded(job, path) -> None:
    """Run a writing job; a full disk or a vanished directory answers an error, not a crash."""
    try:
        job()
    except OSError as exc:
        raise ReplyError(f"ERR V.EXPORT: cannot write {path}: {exc.strerror or exc}") from None


def parse_export(words: list[bytes]) -> ExportKey:
    dtype = b"F16"
    if len(words) == 10 and words[8].upper() == b"DTYPE":
        dtype = words[9].upper()
        if dtype not in DTYPES:
            raise ReplyError("ERR V.EXPORT: unknown DTYPE (expected F16|F32|BF16)")
    elif len(words) != 8:
        raise ReplyError(SYNTAX)
    start = strict_int(words[3], 0, MAX_TOKENS, RANGE_ERROR)
    end = strict_int(words[4], 0, MAX_TOKENS, RANGE_ERROR)
    if end <= start:
        raise ReplyError(RANGE_ERROR)
    n_layers = strict_int(words[5], 0, MAX_LAYERS, f"ERR V.EXPORT: n_layers must be 1..{MAX_LAYERS}")
    if n_layers == 0:
        raise ReplyError(f"ERR V.EXPORT: n_layers must be 1..{MAX_LAYERS}")
    heads = strict_int(words[6], 1, MAX_DIM, f"ERR V.EXPORT: n_kv_heads must be 1..{MAX_DIM}")
    head_dim = strict_int(words[7], 1, MAX_DIM, f"ERR V.EXPORT: head_dim must be 1..{MAX_DIM}")
    return ExportKey(words[1], words[2], start, end, n_layers, heads, head_dim, dtype)


def check_session(side: str, session: Session, key: ExportKey) -> None:
    """Every exported layer exists, holds rows up to ``end`` and is ``heads*head_dim`` wide."""
    if key.n_layers > session.num_layers:
        raise ReplyError(f"ERR V.EXPORT: n_layers {key.n_layers} exceeds the {side} session's "
                         f"{session.num_layers} stored layers")
    width = key.heads * key.head_dim
    for index in range(key.n_layers):
        layer = session.layer(index)
        if layer is None or not holds(layer, key.start, key.end):
            held = 0 if layer is None else layer.tokens
            if held >= key.end:
                raise ReplyError(f"ERR V.EXPORT: layer {index} of the {side} session does not hold every row of "
                                 f"[{key.start}, {key.end}) (rows missing or damaged)")
            raise ReplyError(f"ERR V.EXPORT: layer {index} of the {side} session holds {held} tokens, "
                             f"fewer than end {key.end}")
        if layer.spec.dim != width:
            raise ReplyError(f"ERR V.EXPORT: n_kv_heads*head_dim = {width} but layer {index} of the "
                             f"{side} session stores width {layer.spec.dim}")


def metadata(key: ExportKey) -> dict[str, str]:
    """The file's ``__metadata__``: what it holds, for a reader that wants to check."""
    return {
        "format": "pion-v-export", "version": "1",
        "sid_k": key.sid_k.decode("utf-8", "backslashreplace"), "sid_v": key.sid_v.decode("utf-8", "backslashreplace"),
        "start": str(key.start), "end": str(key.end), "n_layers": str(key.n_layers),
        "n_kv_heads": str(key.heads), "head_dim": str(key.head_dim), "dtype": DTYPES[key.dtype][0],
    }


def clean_stale_exports(server) -> None:
    """Start-up: delete the V.EXPORT files a previous server on this data directory left behind
    (after a kill -9 they stay in shared memory until someone removes them)."""
    line = clean_stale(server.settings.dir)
    if line is not None:
        (log.info if line.startswith("removed") else log.warning)("V.EXPORT: %s", line)
