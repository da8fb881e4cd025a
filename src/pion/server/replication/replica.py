"""The replica's side: the link to the primary, the handshake, loading a full resync, applying
the stream, and acknowledging what is durable.

Why it applies through ``dispatcher.replay`` and logs itself: the stream holds the primary's
logged effects, which replay exactly as recovery replays the log; each received record is then
appended to this server's own journal as one record (with a small ``REPLCONF PION-OFFSET`` effect
naming the stream offset it reaches), so the replica's data and its offset survive ``kill -9``
together and a restarted replica asks the primary to continue from there. ``REPLCONF ACK`` only
ever names an offset whose records are durable here. Large arguments are written to this server's
arenas once and handed on as mapped views (the K/V rows stay off-heap, as after a restart).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from typing import TYPE_CHECKING, Any

import hiredis

from pion.protocol.errors import ReplyError
from pion.server.replication.fullsync import INCOMING_FILE, MAGIC, load_received
from pion.storage.arena import BlobRef

if TYPE_CHECKING:
    from pion.server.replication import Replication

log = logging.getLogger("pion.replication")

READ_SIZE = 256 * 1024
READ_PIECE = 4 * 1024 * 1024
ACK_PERIOD = 1.0


def encoded_size(argv: list) -> int:
    """Bytes of ``argv`` as the primary encodes it (canonical RESP): the stream offset it covers."""
    total = len(b"*%d\r\n" % len(argv))
    for arg in argv:
        n = len(arg)
        total += len(b"$%d\r\n" % n) + n + 2
    return total


class HandshakeError(Exception):
    pass


class ReplicaSide:
    """Following one primary; runs until ``stop``."""

    def __init__(self, repl: Replication, host: str, port: int) -> None:
        self.repl = repl
        self.server = repl.server
        self.host = host
        self.port = port
        self.state = "connect"  # connect | connecting | sync | connected
        self.task: asyncio.Task | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last_io = time.time()
        self.sync_started = 0.0
        self.sync_total = 0
        self.sync_read = 0
        self.link_down_since = time.time()
        self.multi: list[tuple[int, list]] | None = None
        self.last_seq = 0
        self.acked = -1
        self._ack_scheduled = False
        self.failures = 0

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()

    # -- the link -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except (OSError, asyncio.IncompleteReadError, HandshakeError, EOFError) as exc:
                self.failures += 1
                level = logging.INFO if isinstance(exc, (asyncio.IncompleteReadError, EOFError)) else logging.WARNING
                log.log(level, "link to primary %s:%d down: %s", self.host, self.port, exc or exc.__class__.__name__)
            except Exception:
                self.failures += 1
                log.exception("link to primary %s:%d failed", self.host, self.port)
            finally:
                if self.writer is not None:
                    self.writer.close()
                    self.writer = None
                if self.state == "connected":
                    self.link_down_since = time.time()
                self.state = "connect"
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _session(self) -> None:
        self.state = "connecting"
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=2 ** 24)
        self.writer = writer
        settings = self.server.settings
        password = settings.masterauth
        if password:
            user = settings.masteruser
            await self._call(reader, writer, [b"AUTH", user.encode(), password.encode()] if user
                             else [b"AUTH", password.encode()])
        await self._call(reader, writer, [b"PING"])
        await self._call(reader, writer, [b"REPLCONF", b"listening-port", str(self.server.bound_port or self.server.settings.port).encode()])
        await self._call(reader, writer, [b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])
        repl = self.repl
        replid, offset = repl.replid_followed, repl.offset
        wanted = offset + 1 if replid else -1
        writer.write(_command([b"PSYNC", (replid or "?").encode(), str(wanted).encode()]))
        self.state = "sync"
        line = await self._line(reader, timeout=False)  # the primary answers once its snapshot is made
        if line.startswith(b"+FULLRESYNC"):
            _, new_id, new_offset = line.split()
            await self._full_sync(reader, new_id.decode(), int(new_offset))
        elif line.startswith(b"+CONTINUE"):
            words = line.split()
            if len(words) > 1:
                repl.continued(words[1].decode())
            log.info("continuing from offset %d (partial resync) with primary %s:%d", offset, self.host, self.port)
        else:
            raise HandshakeError(f"PSYNC answered {line.decode('latin-1')!r}")
        self.state = "connected"
        self.failures = 0
        self.acked = -1
        self._send_ack()
        await self._stream(reader)

    async def _call(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, argv: list[bytes]) -> None:
        writer.write(_command(argv))
        line = await self._line(reader)
        if line.startswith(b"-"):
            text = line[1:].decode("latin-1")
            if argv[0] == b"AUTH":
                raise HandshakeError(f"Unable to AUTH to MASTER: {text} (the primary refused masterauth)")
            if argv[0] == b"PING" and text.startswith("NOAUTH"):
                raise HandshakeError("the primary needs a password: set masterauth (and masteruser)")
            if argv[0] == b"REPLCONF":
                return  # an older primary: Redis ignores the failure too
            raise HandshakeError(f"{argv[0].decode()} answered {text!r}")

    async def _line(self, reader: asyncio.StreamReader, timeout: bool = True) -> bytes:
        while True:
            raw = await asyncio.wait_for(reader.readline(), self._timeout()) if timeout else await reader.readline()
            if not raw:
                raise EOFError("the primary closed the connection")
            self.last_io = time.time()
            line = raw.rstrip(b"\r\n")
            if line:  # Redis primaries send bare newlines as keep-alives while they prepare
                return line

    # -- a full resync ------------------------------------------------------------------------------

    async def _full_sync(self, reader: asyncio.StreamReader, replid: str, offset: int) -> None:
        header = await self._line(reader)
        if not header.startswith(b"$"):
            raise HandshakeError(f"expected the full sync payload, got {header[:40]!r}")
        self.sync_total = int(header[1:])
        self.sync_read = 0
        self.sync_started = time.time()
        owner = self.server.parts.persistence
        arenas = owner.arenas
        head = await self._read(reader, len(MAGIC) + 8)
        if head[:len(MAGIC)] != MAGIC:
            raise HandshakeError("the primary's payload is not a Pion full sync (PIONSYNC1)")
        (snap_size,) = struct.unpack("<Q", head[len(MAGIC):])
        path = os.path.join(owner.directory, INCOMING_FILE)
        loop = asyncio.get_running_loop()
        with open(path, "wb") as handle:
            left = snap_size
            while left:
                data = await self._read(reader, min(left, 4 * 1024 * 1024))
                left -= len(data)
                await loop.run_in_executor(None, handle.write, data)
        (count,) = struct.unpack("<I", await self._read(reader, 4))
        mapping: dict[BlobRef, BlobRef] = {}
        for _ in range(count):
            ref = BlobRef.unpack(await self._read(reader, 24))
            data = await self._read(reader, ref.length)
            mapping[ref] = arenas.put(data)
            del data
        log.info("full resync payload received: %d bytes, %d blobs, in %.2f s", self.sync_total, count,
                 time.time() - self.sync_started)
        while owner.job is not None:  # a save of this server's own is running: let it end
            await asyncio.sleep(0.05)
        try:
            keys = load_received(owner, path, mapping, before_save=lambda db: self.repl.followed(replid, offset, db))
        except BaseException:
            # memory holds the primary's data but this server's own snapshot of it failed (a full
            # disk): the files still hold the old data set, so the stream must not continue on
            # top of them. Forget the history: the next attempt is a full resync again.
            self.repl.replid_followed = ""
            raise
        self.multi = None
        log.info("full resync from %s:%d done: %d keys, %d blobs, %d bytes in %.2f s, at offset %d",
                 self.host, self.port, keys, count, self.sync_total, time.time() - self.sync_started, offset)

    async def _read(self, reader: asyncio.StreamReader, count: int) -> bytes | bytearray:
        """``count`` bytes of the payload, in pieces of at most 4 MiB: the link is dropped when
        one piece takes longer than repl-timeout (a stalled primary), however big the blob."""
        timeout = self._timeout()
        if count <= READ_PIECE:
            data: bytes | bytearray = await asyncio.wait_for(reader.readexactly(count), timeout) if count else b""
        else:
            data = bytearray(count)
            done = 0
            while done < count:
                part = await asyncio.wait_for(reader.readexactly(min(READ_PIECE, count - done)), timeout)
                data[done:done + len(part)] = part
                done += len(part)
                self.last_io = time.time()
        self.sync_read += count
        self.last_io = time.time()
        return data

    def _timeout(self) -> float:
        return float(self.server.settings.repl_timeout)

    # -- the stream ---------------------------------------------------------------------------------

    async def _stream(self, reader: asyncio.StreamReader) -> None:
        parser = hiredis.Reader(notEnoughData=None)
        primary = self.repl.primary
        received = bytearray()  # what was read and not yet proxied to this server's replicas
        while True:
            # the primary PINGs every repl-ping-replica-period: silence for repl-timeout is a dead link
            data = await asyncio.wait_for(reader.read(READ_SIZE), self._timeout())
            if not data:
                raise EOFError("the primary closed the connection")
            self.last_io = time.time()
            if self.server.slices.active:  # a query in slices reads one consistent state (server/slices.py)
                await self.server.slices.idle()
            parser.feed(data)
            received += data
            before = self.repl.offset
            while True:
                argv = parser.gets()
                if argv is None:
                    break
                if not isinstance(argv, list) or not argv:
                    raise HandshakeError(f"unexpected item in the replication stream: {argv!r}"[:120])
                self._command(argv)
            applied = self.repl.offset - before  # the bytes of the whole commands just applied
            if applied > len(received):
                raise HandshakeError("the primary's stream is not in canonical RESP (offsets would differ)")
            if applied:
                primary.proxy(bytes(received[:applied]))
                del received[:applied]
            self._after_batch()

    def _command(self, argv: list[bytes]) -> None:
        repl = self.repl
        size = encoded_size(argv)
        name = argv[0].lower()
        if name == b"select" and self.multi is None:
            self.repl.stream_db = int(argv[1])
            repl.offset += size
        elif name == b"multi":
            self.multi = []
            repl.offset += size
        elif name == b"exec" and self.multi is not None:
            effects, self.multi = self.multi, None
            repl.offset += size
            self._apply(effects)
        elif name == b"select":  # inside MULTI
            self.repl.stream_db = int(argv[1])
            repl.offset += size
        elif self.multi is not None:
            self.multi.append((self.repl.stream_db, argv))
            repl.offset += size
        elif name == b"ping":
            repl.offset += size
        elif name == b"replconf":  # GETACK *: answered with the offset including this command
            repl.offset += size
            self.acked = -1
        else:
            repl.offset += size
            self._apply([(self.repl.stream_db, argv)])

    def _apply(self, effects: list[tuple[int, list]]) -> None:
        """Apply one record's effects and log them here as one record (with the offset reached)."""
        server = self.server
        dispatcher = server.dispatcher
        arenas = server.parts.arenas
        threshold = server.settings.blob_threshold
        logged: list[tuple[int, list]] = []
        for db, argv in effects:
            spec = dispatcher.lookup(argv)
            if spec.__class__ is ReplyError:
                log.error("the primary sent a command this replica cannot run (%s): %r", spec.message, argv[:2])
                continue
            zero_copy = "zero_copy" in spec.flags  # type: ignore[union-attr]
            if any(len(arg) >= threshold for arg in argv):
                views = [arenas.view(arenas.put(arg)) if len(arg) >= threshold else arg for arg in argv]
                run = views if zero_copy else argv
                argv = views
            else:
                run = argv
            try:
                client = server.replay_target(db)
                dispatcher.replay(client, list(run))
            except ReplyError as exc:
                log.warning("a replicated command failed here: %r: %s", argv[0], exc.message)
            except KeyError as exc:
                log.error("%s (start the replica with the primary's --tenant list)", exc.args[0])
                continue
            finally:
                server.replay_client.ctx.effects = None
            logged.append((db, argv))
        repl = self.repl
        logged.append((0, [b"REPLCONF", b"PION-OFFSET", repl.replid_followed.encode(),
                           str(repl.offset).encode(), str(self.repl.stream_db).encode()]))
        server.dirty += 1
        self.last_seq = server.journal.append(logged)

    def _after_batch(self) -> None:
        journal = self.server.journal
        offset = self.repl.offset
        if self.last_seq <= journal.durable_seq:
            self.repl.durable_offset = offset
            self._send_ack()
        else:
            def durable(offset: int = offset) -> None:
                self.repl.durable_offset = max(self.repl.durable_offset, offset)
                self._schedule_ack()

            journal.when_durable(self.last_seq, durable)

    def _schedule_ack(self) -> None:
        if not self._ack_scheduled:
            self._ack_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_ack)

    def _send_ack(self) -> None:
        self._ack_scheduled = False
        writer = self.writer
        offset = self.repl.durable_offset
        if writer is None or self.state != "connected" or offset == self.acked:
            return
        self.acked = offset
        writer.write(_command([b"REPLCONF", b"ACK", str(offset).encode()]))

    def cron(self) -> None:
        """Every second an ACK, as Redis's replicas send (it also tells the primary we are alive)."""
        if self.state == "connected" and time.time() - getattr(self, "_last_cron_ack", 0) >= ACK_PERIOD:
            self._last_cron_ack = time.time()
            self.acked = -1
            self._send_ack()

    def info_lines(self) -> dict[str, Any]:
        up = self.state == "connected"
        fields: dict[str, Any] = {
            "master_host": self.host, "master_port": self.port, "master_link_status": "up" if up else "down",
            "master_last_io_seconds_ago": int(time.time() - self.last_io) if up else -1,
            "master_sync_in_progress": int(self.state == "sync"),
            "slave_read_repl_offset": self.repl.offset, "slave_repl_offset": self.repl.offset,
        }
        if self.state == "sync" and self.sync_total:
            fields.update({
                "master_sync_total_bytes": self.sync_total, "master_sync_read_bytes": self.sync_read,
                "master_sync_left_bytes": self.sync_total - self.sync_read,
                "master_sync_perc": "%.2f" % (100.0 * self.sync_read / self.sync_total),
                "master_sync_last_io_seconds_ago": int(time.time() - self.last_io),
            })
        if not up:
            fields["master_link_down_since_seconds"] = int(time.time() - self.link_down_since)
        return fields

    def role_state(self) -> bytes:
        return {"connect": b"connect", "connecting": b"connecting", "sync": b"sync"}.get(self.state, b"connected")


def _command(argv: list[bytes]) -> bytes:
    out = bytearray(b"*%d\r\n" % len(argv))
    for arg in argv:
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return bytes(out)
