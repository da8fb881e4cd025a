"""Shared plumbing of the K/V cache command families (``kv_vstore``, ``kv_prefix``,
``kv_substrates``): finding the engine and the client's space, the journal sequence a write
will get, holding a reply until the rows it vouches for are durable, eviction with logging, and
the argument checks every family uses. The engine is always on (``--kvcache`` is a no-op).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.kvcache import KVEngine, KVSpace
from pion.kvcache.stats import Ledger
from pion.protocol.errors import ReplyError

if TYPE_CHECKING:
    from pion.server.context import Ctx
    from pion.storage.arena import ArenaStore

MAX_NS = 200
NS_LENGTH = "ERR ns_key length must be 1..200"


def engine_of(server) -> KVEngine:
    found = server.parts.kvcache
    if found is None:
        found = server.parts.kvcache = KVEngine()
    return found


def tenant_key(ctx: Ctx) -> bytes:
    """The client's tenant as the engine names its space and ledger (b"": the default one)."""
    tenant = ctx.client.tenant
    return tenant.encode() if tenant else b""


def space(ctx: Ctx) -> KVSpace:
    """The client's space: the tenant's own (``client.tenant``), else the server's default one."""
    return engine_of(ctx.server).space(tenant_key(ctx))


def ledger(ctx: Ctx) -> Ledger:
    """The client's PION.STATS ledger: the tenant's own, else the server's."""
    return engine_of(ctx.server).ledger_of(tenant_key(ctx))


def replaying(ctx: Ctx) -> bool:
    """``ctx.replaying`` (kept for the K/V families' call sites)."""
    return ctx.replaying


def write_seq(ctx: Ctx) -> int:
    """``ctx.write_seq()``: the journal sequence this command's record will get."""
    return ctx.write_seq()


def hold_until_durable(ctx: Ctx, seq: int) -> None:
    """``ctx.hold_until_durable(seq)``: the reply waits until ``seq`` is durable."""
    ctx.hold_until_durable(seq)


def make_room(ctx: Ctx, sp: KVSpace, incoming: int, protect: bytes) -> list[list[bytes]]:
    """Evict for ``incoming`` bytes under ``--kv-maxmemory``; returns the drops to log first."""
    if replaying(ctx):
        return []
    return sp.make_room(ctx.server.settings.kv_maxmemory, incoming, frozenset((protect,)))


def log_with(ctx: Ctx, effects: list[list[bytes]], own: list[bytes]) -> None:
    """Log eviction drops, then the command's own deterministic form."""
    ctx.dirty()
    ctx.rewrite(*effects, own)


def arg(raw: bytes | memoryview) -> bytes:
    """A small argument as bytes (on log replay large ones arrive as memoryviews)."""
    return raw if raw.__class__ is bytes else bytes(raw)


def check_ns(raw: bytes | memoryview) -> bytes:
    ns = arg(raw)
    if not 1 <= len(ns) <= MAX_NS:
        raise ReplyError(NS_LENGTH)
    return ns


def strict_int(raw: bytes | memoryview, lo: int, hi: int, error: str) -> int:
    """A decimal integer in ``[lo, hi]`` (no sign games, no spaces), else ``error``."""
    text = arg(raw)
    if not text or not (text.isdigit() or (text[:1] == b"-" and text[1:].isdigit())):
        raise ReplyError(error)
    value = int(text)
    if not lo <= value <= hi:
        raise ReplyError(error)
    return value


def charge(ctx: Ctx, nbytes: int, what: str) -> None:
    """Refuse (-OOM) ``nbytes`` more the server would hold for this client (a reply, a STATE
    buffer, an export file) over ``maxmemory`` or the client's tenant quota."""
    if replaying(ctx):
        return
    memory = ctx.server.parts.memory
    refusal = memory.admit(ctx.client, nbytes, what) if memory is not None else None
    if refusal is not None:
        raise refusal


def info_text(rows: list[tuple[str, object]]) -> bytes:
    """``key:value\\r\\n`` lines (KV.PREFIX.INFO, V.INFO, STATE.INFO)."""
    return "".join(f"{key}:{value}\r\n" for key, value in rows).encode()


#: blobs at least this large go to a log arena (logged by reference, snapshotted by reference)
ARENA_MIN = 4096


def arena_view(ctx: Ctx, blob) -> memoryview | None:
    """The durable arena view of a blob a write stores, or None.

    A large live blob (``bytes``, or the memoryview a large argument arrives as) is put in an
    arena now; logging that very object lets the journal reference it instead of writing it
    twice, and a snapshot references the view. A replayed blob already is a mapped view.
    Without the log (appendonly no) nothing is put: there is no record to reference it, and the
    snapshot copies it.
    """
    if replaying(ctx):
        return blob if blob.__class__ is memoryview else None
    arenas = durable_arenas(ctx, len(blob))
    if arenas is None:
        return None
    if blob.__class__ is memoryview and arenas.ref_of(blob) is not None:
        return blob
    ref = arenas.put(blob)  # a full disk raises DiskWriteError: the dispatcher answers -MISCONF
    return arenas.view(ref)


def durable_arenas(ctx: Ctx, nbytes: int) -> ArenaStore | None:
    """The arena store a live blob of ``nbytes`` goes to (the log is on, the blob is large), or None."""
    if replaying(ctx) or nbytes < ARENA_MIN or not ctx.server.settings.appendonly:
        return None
    return ctx.server.parts.arenas


def write_reserved(arenas: ArenaStore, room, data, at: int = 0) -> int:
    """``arenas.write_at`` for a worker job: a failed write (``DiskWriteError``) answers -MISCONF
    through the dispatcher's error boundary, as ``arena_view`` does."""
    return arenas.write_at(room, data, at)


def clean_stale_exports(server) -> None:
    """Start-up: delete the V.EXPORT files a previous server on this data directory left behind
    (after a kill -9 they stay in shared memory until someone removes them)."""
    import logging

    from pion.kvcache.export import clean_stale

    line = clean_stale(server.settings.dir)
    if line is not None:
        log = logging.getLogger("pion.server")
        (log.info if line.startswith("removed") else log.warning)("V.EXPORT: %s", line)
