"""The K/V row writer: where a store's encoded rows land, in the arena and in the V-store.

Why here, in the engine: a ``V.STOREBATCH`` is the product's hot path, and it should run one
way: the command module parses and checks the request, then hands this writer the encoded
rows, the arena store to keep them in (None without the log) and the journal sequence the
write will get. It never sees the client's context. The writer puts a large blob in an arena
once (``place``), keeps the rows (``write``), and returns the arena view it stored: the command
logs *that view*, so the journal asks the arena store for its ref (``ArenaStore.ref_of``) and
references the blob from the record instead of writing it a second time.

Eviction for room (``--kv-maxmemory``) happens here too, after the blob is placed (a full disk
evicts nothing) and before the rows are kept; the drops come back for the command to log
first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from pion.kvcache.eviction import unit_of

if TYPE_CHECKING:
    from pion.kvcache.space import KVSpace
    from pion.kvcache.vstore import Session
    from pion.storage.arena import ArenaStore, BlobRef

#: blobs at least this large go to a log arena (logged by reference, snapshotted by reference)
ARENA_MIN = 4096


def place(arenas: ArenaStore | None, blob, replayed: bool = False) -> memoryview | None:
    """The blob as a durable arena view: put now when ``arenas`` is given (the caller's log is
    on and the blob large), the blob itself when it already is such a view (``replayed``: a
    large argument of a replayed record is the arena's mapped view), else None.

    A full disk raises ``DiskWriteError`` from the arena store with nothing changed."""
    if replayed:
        return blob if blob.__class__ is memoryview else None
    if arenas is None or len(blob) < ARENA_MIN:
        return None
    if blob.__class__ is memoryview and arenas.ref_of(blob) is not None:
        return blob
    return arenas.view(arenas.put(blob))


def write_reserved(arenas: ArenaStore, room: BlobRef, data, at: int = 0) -> int:
    """``arenas.write_at`` for a worker job (part of a large blob encoded off the loop); a failed
    write (``DiskWriteError``) reaches the dispatcher's error boundary, which answers -MISCONF."""
    return arenas.write_at(room, data, at)


def commit_reserved(arenas: ArenaStore, room: BlobRef, encoded, crc: int | None) -> memoryview:
    """The view of a reservation the workers filled (registered now, on the loop)."""
    return arenas.view(arenas.commit(room, encoded, crc))


class Written(NamedTuple):
    """What a write did, for the command to log: the evictions first, then its own record, whose
    blob argument is ``logged`` (the arena view when there is one: the journal references it)."""

    evicted: list[list[bytes]]
    logged: bytes | memoryview


def write(space: KVSpace, session: Session, layer: int, start: int, count: int, encoded, seq: int, *,
          arenas: ArenaStore | None = None, durable: memoryview | None = None, budget: int = 0,
          incoming: int | None = None, protect: bytes | None = None) -> Written:
    """Keep rows ``[start, start+count)`` of ``layer``: place them (``arenas``; or ``durable``,
    an arena view the caller already has), evict for ``incoming`` bytes under ``budget`` (0:
    none; the prefix ``protect``, by default the session's own, is never evicted), store them with
    journal sequence ``seq``."""
    if durable is None:
        durable = place(arenas, encoded)
    evicted = space.make_room(budget, len(encoded) if incoming is None else incoming,
                              unit_of(session.sid) if protect is None else protect) if budget else []
    space.vstore.store(session, layer, start, count, encoded, seq, durable)
    return Written(evicted, encoded if durable is None else durable)
