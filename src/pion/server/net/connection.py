"""One client connection: an asyncio Protocol that parses requests, runs them, and writes the
coalesced replies of each read in one ``write``.

Flow control: when the transport's write buffer passes its high-water mark we stop reading
this client (``pause_writing``), so a client that does not read its replies cannot make the
server hold an unbounded backlog; past the hard output limit the client is disconnected.
Replies are held until the journal reports durable every record logged before them: a write's
own, and for any other command the writes it may have seen (nobody observes a change that a
crash could still take back). A large reply (a
K/V batch fetch) stays a list of its buffers and goes out with ``writelines`` (no joined copy).
A large array (a ``Streamed`` reply, or a list of ``STREAM_MIN`` elements or more) is written a
piece per loop turn, the next piece made only once the transport is under its high-water mark
(``_pump``): other clients run between pieces and the reply holds bounded memory.

Security: until its client authenticates, the reader parses with Redis's pre-auth caps
(``RequestReader.strict``); a failed AUTH holds this connection's replies for a while
(``hold``) without stopping the loop, so password guessing costs the guesser time.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ProtocolError
from pion.protocol.reader import RequestReader
from pion.protocol.resp import (
    VECTORED_MIN,
    Pairs,
    Push,
    Replies,
    Streamed,
    Vectored,
    encode,
    encode_error,
    encode_vectored,
)
from pion.protocol.streamed import STREAM_MIN, pieces_of
from pion.server.context import Ctx
from pion.server.dispatch import BLOCKED
from pion.server.fastlane import FULL as LANE_FULL
from pion.server.fastlane import REPLY as LANE_REPLY
from pion.server.net.client import Client
from pion.server.net.conn_errors import note_broken, note_preauth_error
from pion.server.net.flow_control import HELD, READ_AHEAD, WRITES, FlowControl

if TYPE_CHECKING:
    from pion.server.app import Server

log = logging.getLogger("pion.connection")

HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024


class Connection(asyncio.BufferedProtocol):
    """A buffered protocol: reads land in a shared receive buffer (copied out as ``bytes`` for the
    reader), except the payload of a large argument, which the socket writes straight into the
    argument's own buffer (``RequestReader.recv_target``): one copy, the kernel's."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.reader = RequestReader(server.settings.proto_max_bulk_len)
        self.reader.zero_copy = zero_copy_names(server.table)
        self.client: Client | None = None
        self.out: list[bytes] = []
        self.out_size = 0
        #: stopped running commands because replies are backing up; resumes when they drain
        self.stalled = False
        self.pending_seq = 0
        self.waiting_durable = False
        #: a command of this client is finishing in the worker pool (pion.server.deferred): run
        #: nothing more from its pipeline until it has answered
        self.deferred = False
        #: the pieces of a large reply still to write (pion.protocol.streamed): one per loop
        #: turn while the transport keeps up; nothing else of this client runs meanwhile
        self.streaming: Iterator[bytes] | None = None
        #: the slot a streamed reply's bytes count on (CLUSTER SLOT-STATS), -1 for none
        self._stream_slot = -1
        self._pump_handle: asyncio.Handle | None = None
        #: out-of-band replies (pushes) that arrived while a reply was streaming: sent after it
        self._after_stream: list[bytes] = []
        #: why reading is paused (WRITES, HELD, READ_AHEAD): pion.server.net.flow_control
        self.flow = FlowControl()
        self.close_after_flush = False
        #: loop time until which replies are held and reading is paused (failed AUTH), 0 if none
        self.held_until = 0.0
        self._hold_timer: asyncio.TimerHandle | None = None
        #: when the output buffer first went over the soft limit (client-output-buffer-limit)
        self.soft_since = 0.0
        #: failed AUTHs on this connection (each one holds the replies longer)
        self.auth_failures = 0
        #: the last read went straight into a large argument's buffer (get_buffer)
        self._direct = False
        #: this loop thread's shared receive buffer (made on the loop thread, which the
        #: connection never leaves), looked up once rather than on every read
        self._buffer = _receive_buffer()

    # -- asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.flow.transport = transport
        server = self.server
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        client = Client(server.next_client_id(), server, self, _addr(peer), _addr(local))
        client.fd = sock.fileno() if sock is not None else -1
        client.ctx = Ctx(client, server)
        self.client = client
        self.reader.set_strict(not client.authenticated)  # the pre-auth caps apply from the first byte
        self.transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)  # type: ignore[union-attr]
        if not server.accept_client(client):
            self.transport.write(encode_error("ERR max number of clients reached"))  # type: ignore[union-attr]
            self.transport.close()  # type: ignore[union-attr]
            self.client = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.held_output.pop(self, None)
        if self._hold_timer is not None:
            self._hold_timer.cancel()
        if self._pump_handle is not None:
            self._pump_handle.cancel()
            self._pump_handle = None
        self.streaming = None
        self._after_stream = []
        if self.client is not None:
            self.server.drop_client(self.client)
            self.client.closing = True
            self.client.conn = None

    def get_buffer(self, sizehint: int) -> memoryview:
        target = self.reader.recv_target()
        self._direct = target is not None
        return target if target is not None else self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:
            try:
                self.reader.received(nbytes)
                self._read_more()
            except Exception as exc:
                self._broken(exc)
        else:
            self.data_received(self._buffer[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        client = self.client
        if client is None or client.closing:
            return
        try:
            self.reader.feed(data)
            self._read_more()
        except Exception as exc:
            self._broken(exc)

    def _broken(self, exc: Exception) -> None:
        """The connection's error boundary: a bug below the dispatcher's (in parsing, in writing a
        reply) answers -ERR and closes this connection only, logged once per kind
        (``conn_errors``), never a traceback per connection from the event loop."""
        note_broken(self.client.addr if self.client else "?", exc)
        self.out.append(encode_error(f"ERR internal error: {exc.__class__.__name__}"))
        self.close_after_flush = True
        if self.client is not None:
            self.client.closing = True
        try:
            self.flush()
        except Exception:
            self._close_now()

    def _read_more(self) -> None:
        """Bytes arrived: enforce the query-buffer limit, then run what is complete."""
        client = self.client
        if client is None or client.closing:
            return
        if self.reader.buffered() > self.server.settings.client_query_buffer_limit:
            log.warning("closing client %s: query buffer over limit", client.addr)
            self._close_now()
            return
        if self.deferred:
            self._read_ahead()
            return
        self.process()

    def pause_writing(self) -> None:
        self.flow.pause(WRITES)

    def resume_writing(self) -> None:
        self.flow.resume(WRITES)
        self.server.held_output.pop(self, None)
        if self.transport is not None and not self.transport.is_closing() and not self.held_until:
            self._unstall()
            self._pump_soon()

    def _unstall(self) -> None:
        if self.stalled and not self.flow.is_paused(WRITES) and not self.waiting_durable:
            self.stalled = False
            asyncio.get_running_loop().call_soon(self._resume)

    # -- the request loop ----------------------------------------------------------------

    def process(self) -> None:
        """Run every complete command in the buffer unless blocked, then flush once."""
        client = self.client
        server = self.server
        dispatcher = server.dispatcher
        tracking = server.tracking
        reader = self.reader
        out = self.out
        lane = server.lane  # the hot commands' path (pion.server.fastlane), asked once per batch
        hot = client is not None and lane.admits(client)
        while client is not None and client.blocked is None and not self.deferred and not client.closing and not self.held_until \
                and self.streaming is None:
            try:
                if reader.strict is client.authenticated:  # pre-auth caps until AUTH, again after RESET
                    reader.set_strict(not client.authenticated)
                argv = lane.run(self, client, reader, HIGH_WATER) if hot else reader.next_command()
            except ProtocolError as exc:
                out.append(encode_error(f"ERR Protocol error: {exc}"))
                self.close_after_flush = True
                client.closing = True
                if not client.authenticated:
                    note_preauth_error(client.addr, exc)
                break
            if argv is None:
                break
            if argv is LANE_FULL:
                self.flush()
                if self.flow.is_paused(WRITES) or self.waiting_durable:
                    self.stalled = True  # bounded memory: leave the rest unread until replies drain
                    break
                continue
            if argv is LANE_REPLY:  # a hot command's reply that may be streamed: delivered below
                reply, lane.reply = lane.reply, None
            elif not argv:
                continue
            else:
                reply = dispatcher.execute(client, argv)
                hot = lane.admits(client)  # the command may have changed the answer
            seq = server.journal.seq
            if seq > self.pending_seq:  # a reply may show writes not durable yet: it waits for them
                self.pending_seq = seq
            if reply is BLOCKED:
                if tracking.pending:
                    tracking.send_pending()
                break
            cls = reply.__class__
            if cls is Streamed or ((cls is list or cls is Pairs) and len(reply) >= STREAM_MIN):
                stream = reply if cls is Streamed else pieces_of(reply)
                if stream is not None and client.reply_mode == "on":
                    before = self.out_size
                    self._start_stream(stream, client.proto)
                    if dispatcher.slot_stats is not None:  # its pieces count as they are made (_pump)
                        self._stream_slot = client.slot
                        dispatcher.slot_stats.add_out(client.slot, self.out_size - before)
                    if tracking.pending:  # held until the reply is whole (send_reply)
                        tracking.send_pending()
                    break
                if stream is not None:  # CLIENT REPLY OFF/SKIP: nothing to produce
                    reply = stream
            if client.reply_mode == "on":  # _append_reply's common case, inline
                data = encode_vectored(reply, client.proto)
                out.append(data)
                size = len(data) if data.__class__ is bytes else data.nbytes
                self.out_size += size
                if dispatcher.slot_stats is not None:  # CLUSTER SLOT-STATS: the reply's bytes
                    dispatcher.slot_stats.add_out(client.slot, size)
            else:
                size = self._append_reply(reply)
                if dispatcher.slot_stats is not None:
                    dispatcher.slot_stats.add_out(client.slot, size)
            if tracking.pending:  # invalidations this command caused for its own client follow its reply
                tracking.send_pending()
            if self.out_size > HIGH_WATER:
                self.flush()
                if self.flow.is_paused(WRITES) or self.waiting_durable:
                    self.stalled = True  # bounded memory: leave the rest unread until replies drain
                    break
        self.flush()

    def _append_reply(self, reply: Any) -> int:
        """Queue a command's reply as CLIENT REPLY says; returns the bytes queued."""
        client = self.client
        mode = client.reply_mode  # type: ignore[union-attr]
        size = 0
        if mode == "on" or _is_push(reply):  # pub/sub confirmations go out even with REPLY OFF
            data = encode_vectored(reply, client.proto)  # type: ignore[union-attr]
            self.out.append(data)
            size = len(data) if data.__class__ is bytes else data.nbytes
            self.out_size += size
        if mode == "on":
            return size
        if mode == "skip":
            client.reply_mode = "on"  # type: ignore[union-attr]
        elif mode == "skip_next":  # CLIENT REPLY SKIP: no reply to it, nor to the next command
            client.reply_mode = "skip"  # type: ignore[union-attr]
        return size

    def send_reply(self, reply: Any) -> None:
        """An out-of-band reply or push (pub/sub), kept in order with held replies (after a
        reply being streamed, never inside it)."""
        if self.client is None or self.transport is None:
            return
        if self.streaming is not None:
            self._after_stream.append(encode(reply, self.client.proto))
            return
        self.out.append(encode(reply, self.client.proto))
        self.flush()

    def defer(self) -> None:
        """A command of this client went to the worker pool: run nothing more from its pipeline
        meanwhile, but receive its next command (``_read_ahead``), then stop reading."""
        self.deferred = True
        self._read_ahead()

    def _read_ahead(self) -> None:
        """While the pipeline waits, parse the next command as its bytes arrive (a large argument
        lands in its own buffer); once it is complete stop reading: the kernel buffers the rest."""
        if self.reader.read_ahead():
            self.flow.pause(READ_AHEAD)

    def undefer(self, reply: Any) -> None:
        """The deferred command answered: send its reply, read again, go on with the pipeline."""
        self.deferred = False
        self.flow.resume(READ_AHEAD)
        self.resume_with(reply)

    def resume_with(self, reply: Any) -> None:
        """A blocked command finished: send its reply and go on with the pipeline."""
        size = self._append_reply(reply)
        counters = self.server.dispatcher.slot_stats
        if counters is not None and self.client is not None:
            counters.add_out(self.client.slot, size)
        self.flush()
        asyncio.get_running_loop().call_soon(self._resume)

    def _resume(self) -> None:
        client = self.client
        if client is not None and client.blocked is None and not self.deferred and not client.closing and not self.stalled \
                and self.streaming is None:
            self.process()

    # -- streamed replies (pion.protocol.streamed) ---------------------------------------------

    def _start_stream(self, stream: Streamed, proto: int) -> None:
        """Queue the reply's header and write its pieces from later loop turns (``_pump``)."""
        header = stream.header(proto)
        self.out.append(header)
        self.out_size += len(header)
        self.streaming = stream.make(proto)
        self._pump_soon()

    def _pump_soon(self) -> None:
        if self.streaming is not None and self._pump_handle is None:
            self._pump_handle = asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        """Write the next piece of the streamed reply, unless the transport is still full, a
        write it follows is not durable yet, or replies are held: then the event that ends
        the wait (``resume_writing``, ``_durable``, ``_release``) calls this again. So the
        reply holds at most the write buffer's high-water mark plus one piece."""
        self._pump_handle = None
        it = self.streaming
        if it is None:
            return
        transport = self.transport
        if transport is None or transport.is_closing() or (self.client is not None and self.client.closing):
            self._end_stream(resume=False)
            return
        if self.flow.is_paused(WRITES) or self.waiting_durable or self.held_until:
            return
        try:
            piece = next(it, None)
        except Exception as exc:  # a bug in a generator: the reply cannot be finished, close
            self._end_stream(resume=False)
            self._broken(exc)
            return
        if piece is None:
            self._end_stream(resume=True)
            return
        if piece:
            self.out.append(piece)
            self.out_size += len(piece)
            if self._stream_slot >= 0:
                counters = self.server.dispatcher.slot_stats
                if counters is not None:
                    counters.add_out(self._stream_slot, len(piece))
        self.flush()
        if self.streaming is not None and not (self.flow.is_paused(WRITES) or self.waiting_durable):
            self._pump_soon()

    def _end_stream(self, resume: bool) -> None:
        self.streaming = None
        self._stream_slot = -1
        held, self._after_stream = self._after_stream, []
        if held and resume:
            self.out.extend(held)
            self.out_size += sum(map(len, held))
        self.flush()
        if resume:
            asyncio.get_running_loop().call_soon(self._resume)

    def hold(self, seconds: float) -> None:
        """Hold this connection's replies (and stop reading it) for ``seconds`` more; other
        clients are served meanwhile. Failed AUTHs call it: each guess costs time."""
        loop = asyncio.get_running_loop()
        self.held_until = max(loop.time(), self.held_until) + seconds
        if self._hold_timer is not None:
            self._hold_timer.cancel()
        self._hold_timer = loop.call_at(self.held_until, self._release)
        self.flow.pause(HELD)

    def _release(self) -> None:
        self.held_until = 0.0
        self._hold_timer = None
        self.flow.resume(HELD)
        if self.transport is None or self.transport.is_closing():
            return
        self.flush()
        self._unstall()  # a pipeline stalled by write pressure meanwhile goes on too
        self._pump_soon()
        self._resume()

    # -- output ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Write buffered replies, unless a write they answer is not durable yet."""
        if (not self.out and not self.close_after_flush) or self.held_until:
            return
        journal = self.server.journal
        if self.pending_seq > journal.durable_seq:
            if not self.waiting_durable:
                self.waiting_durable = True
                journal.when_durable(self.pending_seq, self._durable)
            return
        self._write_out()

    def _durable(self) -> None:
        self.waiting_durable = False
        self.flush()
        self._unstall()
        self._pump_soon()

    def _write_out(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            self.out.clear()
            self.out_size = 0
            return
        if self.out:
            out = self.out
            if self.out_size >= VECTORED_MIN:  # a Vectored reply is in there: write its buffers as they are
                transport.writelines(_buffers(out))
            else:
                transport.write(out[0] if len(out) == 1 else b"".join(out))
            self.out.clear()
            self.out_size = 0
            held = transport.get_write_buffer_size()
            if not held:  # all of it went out: under any limit (_over_output_limit(0), without asking)
                self.soft_since = 0.0
            else:
                if held > HIGH_WATER:  # until resume_writing: the transport drained it
                    self.server.held_output[self] = held
                if self._over_output_limit(held):
                    log.warning("closing client %s: output buffer over limit", self.client.addr if self.client else "?")
                    transport.abort()
                    return
        if self.close_after_flush:
            transport.close()

    def _over_output_limit(self, size: int) -> bool:
        """client-output-buffer-limit: over the hard limit, or over the soft one for too long."""
        hard, soft, seconds = self.server.output_limits(self.client)
        if hard and size > hard:
            return True
        if not soft or size <= soft:
            self.soft_since = 0.0
            return False
        now = asyncio.get_running_loop().time()
        if not self.soft_since:
            self.soft_since = now
        return now - self.soft_since > seconds

    def close_soon(self) -> None:
        """QUIT/CLIENT KILL: send what is buffered, then close."""
        self.close_after_flush = True
        if self.client is not None:
            self.client.closing = True

    def _close_now(self) -> None:
        if self.client is not None:
            self.client.closing = True
        if self.transport is not None:
            self.transport.abort()


def _buffers(out: list) -> list:
    """The buffers of encoded replies, some of them ``Vectored``: small runs joined, big ones kept."""
    buffers: list = []
    run: list = []
    for data in out:
        if data.__class__ is Vectored:
            if run:
                buffers.append(b"".join(run))
                run = []
            buffers.extend(data)
        else:
            run.append(data)
    if run:
        buffers.append(b"".join(run))
    return buffers


_ZERO_COPY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_local = threading.local()
#: size of the receive buffer every connection of a loop thread shares (its bytes are copied out
#: in ``buffer_updated``, before the next read)
RECEIVE_SIZE = 256 * 1024


def _receive_buffer() -> memoryview:
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(RECEIVE_SIZE))
    return buf


def zero_copy_names(table: Any) -> frozenset[bytes]:
    """Lower-case names of the commands flagged ``zero_copy`` (their large arguments may stay
    memoryviews: ``RequestReader.zero_copy``)."""
    names = _ZERO_COPY.get(table)
    if names is None:
        names = _ZERO_COPY[table] = frozenset(spec.name.encode() for spec in table if "zero_copy" in spec.flags)
    return names


def _addr(info: Any) -> str:
    if isinstance(info, tuple) and len(info) >= 2:
        host = info[0]
        return f"[{host}]:{info[1]}" if ":" in host else f"{host}:{info[1]}"
    if isinstance(info, str):
        return f"{info}:0"
    return ""


def _is_push(reply: Any) -> bool:
    """(P|S)(UN)SUBSCRIBE confirmations: Redis sends them whatever CLIENT REPLY says."""
    if reply.__class__ is Push:
        return True
    return reply.__class__ is Replies and bool(reply) and all(part.__class__ is Push for part in reply)
