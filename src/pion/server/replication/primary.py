"""The primary's side: replicas attached by PSYNC/SYNC, the stream they are fed, WAIT's counts.

Every record the journal logs reaches ``feed`` (a journal observer), is encoded once
(``stream.StreamEncoder``) and goes to the backlog and to each online replica's socket, coalesced
per loop iteration. A replica that asks for a part of the stream the backlog still holds gets it
(``+CONTINUE``); otherwise it gets a full resync: a snapshot made between other clients' commands
(``fullsync.SyncSnapshotJob``), then the records logged since the snapshot's point, which were
held for it meanwhile. Replicas answer ``REPLCONF ACK <offset>`` once what they received is
durable on their own disk; WAIT counts those.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from pion.server.replication.fullsync import SyncSnapshotJob, payload_parts
from pion.server.replication.stream import Backlog, Chunk, StreamEncoder, command

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client

log = logging.getLogger("pion.replication")

#: stop writing to a replica's socket while this much is waiting in its transport
SEND_HIGH_WATER = 8 * 1024 * 1024
FILE_CHUNK = 4 * 1024 * 1024
#: client-output-buffer-limit replica (Redis's default hard limit): a replica this far behind is dropped
REPLICA_HARD_LIMIT = 256 * 1024 * 1024


def _size(chunk: Chunk) -> int:
    return len(chunk) if chunk.__class__ is bytes else chunk.nbytes  # type: ignore[union-attr]


class ReplicaLink:
    """One attached replica, as the primary sees it."""

    def __init__(self, client: Client, port: int) -> None:
        self.client = client
        self.ip = client.addr.rsplit(":", 1)[0].strip("[]")
        self.port = port
        self.state = "wait_bgsave"  # wait_bgsave | send_bulk | online
        self.ack = 0
        self.ack_time = time.time()
        #: records logged while the full sync is made and sent: (stream offset after it, chunks)
        self.pending: list[tuple[int, list[Chunk]]] = []
        self.pending_bytes = 0
        self.queue: list[Chunk] = []

    @property
    def transport(self) -> Any:
        conn = self.client.conn
        return conn.transport if conn is not None else None

    def alive(self) -> bool:
        transport = self.transport
        return transport is not None and not transport.is_closing()

    def write(self, chunks: list[Chunk]) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.writelines(chunks)
        if transport.get_write_buffer_size() > REPLICA_HARD_LIMIT:
            log.warning("replica %s:%d is %d bytes behind (over the replica output limit): dropping it",
                        self.ip, self.port, transport.get_write_buffer_size())
            transport.abort()


class PrimarySide:
    """Backlog, replicas, the encoder; owned by ``Replication``."""

    def __init__(self, server: Server, replid: str, backlog_size: int) -> None:
        self.server = server
        self.replid = replid
        self.backlog_size = backlog_size
        self.backlog: Backlog | None = None
        self.encoder = StreamEncoder()
        self.links: dict[int, ReplicaLink] = {}
        self.waiters: list[tuple[Client, Any, int, int]] = []
        self._flush_scheduled = False
        self.last_ping = time.monotonic()
        #: an id and offset (Redis's replid2, second_repl_offset) a former primary's replicas may continue from
        self.replid2 = "0" * 40
        self.second_offset = -1
        self.full_syncs = 0
        self.partial_syncs = 0
        self.partial_errors = 0
        #: this server follows a primary: its replicas get that primary's stream as received
        #: (``proxy``), not this server's own log, so ids and offsets are the same down the chain
        self.proxying = False

    @property
    def offset(self) -> int:
        return self.backlog.offset if self.backlog is not None else 0

    def start_backlog(self, offset: int = 0) -> None:
        if self.backlog is None:
            self.backlog = Backlog(self.backlog_size, offset)
            self.encoder.reset()

    def new_history(self, replid: str, offset: int) -> None:
        """A replica's full resync loaded (or it restarted at ``offset``): its replicas' stream is now
        the primary's ``replid`` from ``offset``; those attached must resync (Redis's disconnectSlaves)."""
        self.replid = replid
        self.replid2, self.second_offset = "0" * 40, -1
        self.backlog = Backlog(self.backlog_size, offset)
        self.encoder.reset()
        self.drop_links()

    def drop_links(self) -> None:
        for link in list(self.links.values()):
            if link.alive():
                link.transport.abort()
        self.links.clear()

    # -- the stream -----------------------------------------------------------------------------

    def feed(self, effects: list[tuple[int, list]]) -> None:
        """Journal observer: one record's effects."""
        if self.backlog is None or not effects or self.proxying:
            return
        chunks, total = self.encoder.record(effects)
        self._append(chunks, total)

    def append_command(self, *words: bytes) -> None:
        """A command of the stream's own (PING, REPLCONF GETACK *)."""
        if self.backlog is None or self.proxying:
            return
        data = command(*words)
        self._append([data], len(data))

    def proxy(self, data: bytes) -> None:
        """Bytes of the followed primary's stream, whole commands as received: to the backlog and
        to this server's own replicas (chained replication, as Redis's proxied master stream)."""
        if self.backlog is not None and data:
            self._append([data], len(data))

    def _append(self, chunks: list[Chunk], total: int) -> None:
        backlog = self.backlog
        backlog.add(chunks, total)  # type: ignore[union-attr]
        for link in self.links.values():
            if link.state == "online":
                link.queue.extend(chunks)
            else:
                link.pending.append((backlog.offset, chunks))  # type: ignore[union-attr]
                link.pending_bytes += total
                if link.pending_bytes > REPLICA_HARD_LIMIT and link.alive():
                    log.warning("replica %s:%d: %d bytes logged during its full sync, over the replica "
                                "output limit: dropping it", link.ip, link.port, link.pending_bytes)
                    link.transport.abort()
        if not self._flush_scheduled and self.links:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for link in list(self.links.values()):
            if link.queue:
                queue, link.queue = link.queue, []
                link.write(queue)

    # -- attaching --------------------------------------------------------------------------------

    def attach(self, client: Client, replid: bytes, wanted: int, port: int, legacy: bool = False) -> None:
        """PSYNC (wanted = requested offset, or -1 / a foreign id: full) or SYNC (wanted None)."""
        self.start_backlog()
        old = self.links.pop(client.id, None)
        if old is not None:
            old.state = "gone"
        link = self.links[client.id] = ReplicaLink(client, port)
        backlog = self.backlog
        rid = replid.decode("latin-1")
        same_history = rid == self.replid or (rid == self.replid2 and wanted <= self.second_offset)
        if not legacy and same_history and backlog.can_serve(wanted):  # type: ignore[union-attr]
            self.partial_syncs += 1
            link.state = "online"
            link.ack = wanted - 1
            link.write([b"+CONTINUE %s\r\n" % self.replid.encode(), *backlog.since(wanted)])  # type: ignore[union-attr]
            log.info("replica %s:%d continues from offset %d (partial resync)", link.ip, port, wanted)
            return
        if wanted > 0 and rid != "?":
            self.partial_errors += 1
        self.full_syncs += 1
        log.info("replica %s:%d needs a full resync", link.ip, port)
        asyncio.get_running_loop().create_task(self._full_sync(link, legacy))

    def detach(self, client: Client) -> None:
        link = self.links.pop(client.id, None)
        if link is not None:
            link.state = "gone"
            log.info("replica %s:%d is gone", link.ip, link.port)

    async def _full_sync(self, link: ReplicaLink, legacy: bool = False) -> None:
        owner = self.server.parts.persistence
        try:
            while owner.job is not None:  # one snapshot at a time (they share the change tracking)
                await asyncio.sleep(0.05)
                if not link.alive():
                    return
            job = SyncSnapshotJob(owner, lambda: self.offset, self._stream_db)
            owner.job = job
            try:
                path, offset, refs = await job.make()
                total, parts = payload_parts(path, refs, owner.arenas)
            finally:
                owner._finish(job)
            if not link.alive() or link.state == "gone":
                return
            # what was logged before the snapshot's point is in it
            link.pending = [(end, chunks) for end, chunks in link.pending if end > offset]
            link.state = "send_bulk"
            head = b"" if legacy else b"+FULLRESYNC %s %d\r\n" % (self.replid.encode(), offset)
            link.write([head + b"$%d\r\n" % total])
            await self._send_parts(link, parts)
            if not link.alive() or link.state == "gone":
                return
            held = [chunk for _, chunks in link.pending for chunk in chunks]
            link.pending, link.pending_bytes = [], 0
            link.state = "online"
            link.ack = offset
            link.ack_time = time.time()
            link.write(held)
            log.info("full resync of replica %s:%d sent: %d bytes, %d blobs, at offset %d",
                     link.ip, link.port, total, len(refs), offset)
            try:
                os.unlink(path)
            except OSError:
                pass
        except Exception:
            log.exception("full resync of replica %s:%d failed", link.ip, link.port)
            if link.alive():
                link.transport.abort()

    def _stream_db(self) -> int:
        """The database the stream is in at this point: a proxied primary's, or this encoder's."""
        if self.proxying:
            repl = self.server.parts.replication
            return repl.stream_db if repl is not None else 0
        return self.encoder.db or 0

    async def _send_parts(self, link: ReplicaLink, parts: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        for part in parts:
            if part.__class__ is tuple:
                _, path, size = part
                with open(path, "rb") as handle:
                    sent = 0
                    while sent < size:
                        data = await loop.run_in_executor(None, handle.read, min(FILE_CHUNK, size - sent))
                        if not data:
                            raise OSError(f"{path} ended early")
                        sent += len(data)
                        if not await self._send(link, [data]):
                            return
            elif part.__class__ is memoryview:
                for start in range(0, part.nbytes, FILE_CHUNK):
                    if not await self._send(link, [part[start:start + FILE_CHUNK]]):
                        return
            elif not await self._send(link, [part]):
                return

    async def _send(self, link: ReplicaLink, chunks: list[Chunk]) -> bool:
        transport = link.transport
        while transport is not None and not transport.is_closing() and \
                transport.get_write_buffer_size() > SEND_HIGH_WATER:
            await asyncio.sleep(0.002)
        if transport is None or transport.is_closing() or link.state == "gone":
            return False
        transport.writelines(chunks)
        return True

    # -- acknowledgements and WAIT ------------------------------------------------------------------

    def acked(self, client: Client, offset: int) -> None:
        link = self.links.get(client.id)
        if link is None:
            return
        link.ack = max(link.ack, offset)
        link.ack_time = time.time()
        if self.waiters:
            self._serve_waiters()

    def good_replicas(self, max_lag: int) -> int:
        """Redis's repl_good_slaves_count: online replicas that acknowledged within ``max_lag`` s."""
        now = time.time()
        return sum(1 for link in self.links.values()
                   if link.state == "online" and link.alive() and int(now - link.ack_time) <= max_lag)

    def count_acked(self, target: int) -> int:
        return sum(1 for link in self.links.values() if link.state == "online" and link.ack >= target and link.alive())

    def wait(self, client: Client, request: Any, wanted: int, target: int) -> None:
        self.waiters.append((client, request, wanted, target))
        self.append_command(b"REPLCONF", b"GETACK", b"*")

    def _serve_waiters(self) -> None:
        keep = []
        blocking = self.server.blocking
        for client, request, wanted, target in self.waiters:
            if client.blocked is not request:
                continue  # timed out or gone
            count = self.count_acked(target)
            if count >= wanted:
                blocking.unblock(client, count)
            else:
                request.on_timeout = count
                keep.append((client, request, wanted, target))
        self.waiters = keep

    def cron(self, period: int) -> None:
        """Redis's replication cron: a PING into the stream every repl-ping-replica-period."""
        now = time.monotonic()
        for client_id in [cid for cid, link in self.links.items() if not link.alive()]:
            self.links.pop(client_id, None)
        if self.links and now - self.last_ping >= period and not self.proxying:
            self.last_ping = now
            self.append_command(b"PING")

    def role_list(self) -> list[Any]:
        return [[link.ip.encode(), str(link.port).encode(), str(link.ack).encode()]
                for link in self.links.values() if link.state == "online"]

    def info_lines(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"connected_slaves": len(self.links)}
        now = time.time()
        for index, link in enumerate(self.links.values()):
            fields[f"slave{index}"] = (f"ip={link.ip},port={link.port},state={link.state},"
                                       f"offset={link.ack},lag={int(now - link.ack_time)}")
        return fields
