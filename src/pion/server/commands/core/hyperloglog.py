"""HyperLogLog commands: PFADD PFCOUNT PFMERGE.

A HyperLogLog is a string value in Redis's byte layout (pion.storage.hll), so TYPE says string
and GET returns the same bytes Redis would. A string that is not a HyperLogLog answers
Redis's own WRONGTYPE text. PFCOUNT of one key stores the count in the header, as Redis does;
that change is logged as the PFCOUNT itself, so replay rebuilds the same bytes.
"""

from __future__ import annotations

import numpy as np

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage import hll

NOT_HLL = "WRONGTYPE Key is not a valid HyperLogLog string value."
CORRUPT = "INVALIDOBJ Corrupted HLL object detected"


def _sparse_max(ctx: Ctx) -> int:
    for name, raw in getattr(ctx.server.settings, "extra", ()):
        if name == "hll-sparse-max-bytes":
            try:
                return int(raw)
            except ValueError:
                break
    return hll.DEFAULT_SPARSE_MAX_BYTES


def _hll(ctx: Ctx, key: bytes) -> bytes | None:
    """The HyperLogLog string at ``key``, None if absent; WRONGTYPE texts as Redis."""
    value = ctx.db.get(key)
    if value is None:
        return None
    if value.__class__ is not bytes:
        raise ReplyError(errors.WRONGTYPE)
    if not hll.is_hll(value):
        raise ReplyError(NOT_HLL)
    return value


def _merged_registers(ctx: Ctx, keys: list[bytes]) -> tuple[np.ndarray, bool]:
    """Register-wise maximum over the keys that exist, and whether any of them is dense."""
    maxima = np.zeros(hll.REGISTERS, dtype=np.uint8)
    dense = False
    for key in keys:
        value = _hll(ctx, key)
        if value is None:
            continue
        dense = dense or value[4] == hll.DENSE
        try:
            np.maximum(maxima, hll.registers(value), out=maxima)
        except hll.CorruptHLL:
            raise ReplyError(CORRUPT) from None
    return maxima, dense


@command("PFADD", -2, "write denyoom fast", keys=(1, 1, 1), categories="@write @hyperloglog @fast",
         group="hyperloglog", since="2.8.9")
def pfadd(ctx: Ctx, argv: list[bytes]):
    """PFADD key [element [element ...]]"""
    key = argv[1]
    value = _hll(ctx, key)
    created = value is None
    try:
        updated, changed = hll.add(value if value is not None else hll.new_hll(), argv[2:], _sparse_max(ctx))
    except hll.CorruptHLL:
        raise ReplyError(CORRUPT) from None
    changed += created
    if changed:
        if created:
            updated = updated[:15] + bytes([updated[15] | 0x80]) + updated[16:]
        ctx.db.set(key, updated, keep_ttl=True)
        ctx.dirty(changed)
        ctx.notify("$", "pfadd", key)
    return 1 if changed else 0


@command("PFCOUNT", -2, "readonly may_replicate", keys=(1, -1, 1), categories="@read @hyperloglog @slow",
         group="hyperloglog", since="2.8.9")
def pfcount(ctx: Ctx, argv: list[bytes]):
    """PFCOUNT key [key ...]"""
    if len(argv) > 2:
        maxima, _ = _merged_registers(ctx, argv[1:])
        return hll.estimate(maxima)
    key = argv[1]
    value = _hll(ctx, key)
    if value is None:
        return 0
    cached = hll.cached_count(value)
    if cached is not None:
        return cached
    try:
        card = hll.count(value)
    except hll.CorruptHLL:
        raise ReplyError(CORRUPT) from None
    ctx.db.set(key, hll.with_cached_count(value, card), keep_ttl=True)
    ctx.dirty()
    ctx.rewrite(argv)
    return card


@command("PFMERGE", -2, "write denyoom", keys=(1, -1, 1), categories="@write @hyperloglog @slow",
         group="hyperloglog", since="2.8.9")
def pfmerge(ctx: Ctx, argv: list[bytes]):
    """PFMERGE destkey [sourcekey [sourcekey ...]]"""
    key = argv[1]
    maxima, dense = _merged_registers(ctx, argv[1:])
    current = ctx.db.get(key)
    dest = current if current is not None else hll.new_hll()
    ctx.db.set(key, hll.merge_into(dest, maxima, dense, _sparse_max(ctx)), keep_ttl=True)
    ctx.dirty()
    ctx.notify("$", "pfadd", key)
    return OK
