"""Full resynchronisation: the primary's snapshot plus the arena blobs it names, and its load.

Why Pion's own format and not an RDB: both ends are Pions, and Pion's snapshot already is the
keyspace (every type, every engine's state: K/V sessions and rows, prefix registrations,
manifests, chains, staged stores, search indexes, functions, tenants) at one point of the log.
The snapshot is made by the background save's machinery (``SaveJob``: sliced on the loop
between other clients' commands, file writes on a worker thread), but into its own file and
without cutting the log: its consistent point is a replication offset instead. K/V rows are not
in the snapshot itself, only their 24-byte arena refs; the payload therefore carries, after the
snapshot, each referenced blob's bytes exactly as they lie in the arena (no re-encoding, read
from the mapping straight into the socket). The replica writes each blob into its own arenas,
loads the snapshot with the old refs mapped to its new ones (the rows stay off-heap, mapped), and
takes a snapshot of its own so the result is durable before it acknowledges anything.

Payload (sent as one ``$<length>`` bulk, as Redis sends its RDB)::

    b"PIONSYNC1" | u64 snapshot length | snapshot bytes | u32 blob count |
    per blob: 24-byte BlobRef (the primary's) | the blob's bytes (BlobRef.length of them)
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from typing import TYPE_CHECKING, Any

from pion.server.durability.bgsave import SaveAborted, SaveJob
from pion.storage.arena import BlobRef, snapshot_scope
from pion.storage.snapshot import ExtensionRecord, KeyRecord, SnapshotReader, Tombstone

if TYPE_CHECKING:
    from pion.server.durability.persistence import Persistence

MAGIC = b"PIONSYNC1"
SYNC_FILE = "repl-sync.pion"
INCOMING_FILE = "repl-incoming.pion"
#: a full-sync payload's record of the stream's database at its point (only in sync snapshots)
STREAM_DB = "repl-stream-db"
#: the extension that records the replica's replication id and offset in its own snapshots
EXTENSION = "replication"


class SyncSnapshotJob(SaveJob):
    """A background save into ``repl-sync.pion`` whose consistent point is a stream offset."""

    filename = SYNC_FILE

    def __init__(self, owner: Persistence, offset_now: Any, stream_db_now: Any = None) -> None:
        super().__init__(owner, "sync")
        self._offset_now = offset_now
        self._stream_db_now = stream_db_now or (lambda: 0)
        self.offset = 0

    def _final(self, enc: Any, out: list[bytes]) -> int:
        """The consistent point (no changed key left: ``SaveJob._converge``): the extensions but
        this server's own replication state, and the stream offset instead of a log cut."""
        for ext in self.owner.snapshot_extensions:
            if ext.name != EXTENSION:
                out.extend(enc.extension(ext.name, part) for part in ext.parts())
        self.offset = self._offset_now()
        # the database the stream after this point is relative to (Redis's RDB aux repl-stream-db)
        out.append(enc.extension(STREAM_DB, b"%d" % self._stream_db_now()))
        return 0

    async def make(self) -> tuple[str, int, list[BlobRef]]:
        """Write the file; returns its path, the stream offset it matches, the blobs it names."""
        loop = asyncio.get_running_loop()
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(1, thread_name_prefix="pion-repl-snapshot")
        try:
            while True:
                try:
                    await self._attempt(loop)
                    break
                except SaveAborted:
                    self.restarts += 1
        finally:
            self._untrack()
            self.pool.shutdown(wait=False)
        return os.path.join(self.owner.directory, SYNC_FILE), self.offset, sorted(self.live, key=lambda ref: (ref.arena_id, ref.offset))


def payload_parts(path: str, refs: list[BlobRef], arenas: Any) -> tuple[int, list[Any]]:
    """The payload's length and its pieces: small bytes, ('file', path, size), arena views."""
    size = os.path.getsize(path)
    parts: list[Any] = [MAGIC + struct.pack("<Q", size), ("file", path, size), struct.pack("<I", len(refs))]
    total = len(MAGIC) + 8 + size + 4
    for ref in refs:
        parts.append(ref.pack())
        parts.append(arenas.view(ref))  # held: compaction keeps the range while we send it
        total += 24 + ref.length
    return total, parts


class MappedStore:
    """What ``unpack_blob`` resolves refs against while a received snapshot loads: the
    primary's refs, mapped to the replica's copies of those blobs."""

    def __init__(self, arenas: Any, mapping: dict[BlobRef, BlobRef]) -> None:
        self.arenas = arenas
        self.mapping = mapping

    def view(self, ref: BlobRef) -> memoryview:
        return self.arenas.view(self.mapping[ref])

    def ref_of(self, obj: Any) -> BlobRef | None:
        return self.arenas.ref_of(obj)


def load_received(owner: Persistence, path: str, mapping: dict[BlobRef, BlobRef], before_save: Any = None) -> int:
    """Replace this server's data with the received snapshot (on the loop, blocking: Redis's
    replica also stops serving while it loads), then save a snapshot of its own. Returns the
    number of keys loaded. ``before_save(stream_db)``: the database the stream goes on in."""
    from pion.server.durability.persistence_hooks import Replayer

    started = time.perf_counter()
    server = owner.server
    replayer = Replayer(owner)
    all_dbs = [db for dbs in server.all_db_lists() for db in dbs]
    server.loading = True
    keys = stream_db = 0
    for db in all_dbs:
        db.flush()
        db.loading = True
    try:
        reader = SnapshotReader(path)
        with snapshot_scope(MappedStore(owner.arenas, mapping)):  # type: ignore[arg-type]
            for record in reader:
                if record.__class__ is KeyRecord:
                    replayer.load_key(record)
                    keys += 1
                elif record.__class__ is Tombstone:
                    replayer.drop_key(record)
                elif isinstance(record, ExtensionRecord) and record.name == STREAM_DB:
                    stream_db = int(bytes(record.data))
                elif isinstance(record, ExtensionRecord) and record.name != EXTENSION:
                    replayer.load_extension(record)
        reader.close()
    finally:
        server.loading = False
        for db in all_dbs:
            db.loading = False
    if owner.memory.active:
        owner.memory.rescan()
    if before_save is not None:
        before_save(stream_db)  # the replication id and offset this data is at go into the snapshot too
    loaded = time.perf_counter()
    owner.save()  # durable now: the refs in it are this server's own arenas
    logging.getLogger("pion.replication").info(
        "full resync loaded: %d keys in %.2f s, then this server's own snapshot (arenas fsynced) in %.2f s",
        keys, loaded - started, time.perf_counter() - loaded)
    try:
        os.unlink(path)
    except OSError:
        pass
    return keys


def now_ms() -> int:
    return int(time.time() * 1000)
