"""Request parsing: multibulk frames through hiredis's C parser, inline commands by hand.

Sans-IO: ``feed`` takes bytes, ``next_command`` returns one argv (``list[bytes]``), ``None`` when
more bytes are needed, or raises ``ProtocolError``. A connection switches to hiredis when a
frame starts with ``*`` and back to inline parsing only at a clean frame boundary, which is how
real clients and Redis's own tests mix the two.

Bounded memory: hiredis holds a frame until it is complete, so headers are checked before the
payload arrives. In ``strict`` mode (a connection that has not authenticated) frames are parsed
here with Redis's pre-auth caps (10 arguments, 16 KiB per argument); otherwise an incomplete
frame past 256 KiB has its headers checked against the argument and bulk-length limits (again
each time it doubles), so an oversize ``$<len>`` is refused before its payload is buffered.

Large arguments: when that check finds the frame in the middle of an argument of ``BIG_ARG``
bytes or more, the frame is taken back from hiredis and finished by ``BigFrame``, which receives
each large argument straight into a buffer of its size (one copy instead of hiredis's several)
and, for the commands named in ``zero_copy``, hands it to the handler as a memoryview.

Layout: this module is the state machine (which parser holds the bytes, when to switch); the
stateless parts live beside it: ``inline`` splits inline command lines, ``multibulk`` reads
``*N`` / ``$len`` headers (limit checks, frame boundaries, pre-auth frames), ``bigframe``
receives frames with large arguments.
"""

from __future__ import annotations

import hiredis

from pion.protocol.bigframe import BIG_ARG, BigFrame
from pion.protocol.errors import ProtocolError
from pion.protocol.inline import MAX_INLINE_SIZE, split_inline
from pion.protocol.multibulk import HeaderWalk, check_headers, gate_for, header_int, skip_frames, take_strict

#: ``split_inline`` is re-exported: callers and tests import it from here
__all__ = ["MAX_MULTIBULK_LEN", "RequestReader", "split_inline"]

#: arguments a frame may have (Redis's long-standing 1024*1024; checked before hiredis sees the
#: ``*N`` header, since hiredis allocates the whole list for it at once)
MAX_MULTIBULK_LEN = 1024 * 1024
#: an incomplete frame holding more than this has its headers checked before the rest arrives
PENDING_CHECK = 256 * 1024
#: a read at least this large that starts a frame has its headers looked at first (large argument?)
EARLY_CHECK = 4096


class RequestReader:
    """Turns a byte stream into argv lists."""

    __slots__ = (
        "_hiredis", "_inline", "_in_hiredis", "_chunks", "_chunks_len", "_frames_since",
        "max_bulk_len", "max_multibulk_len", "strict", "_check_at", "_big", "_after", "zero_copy",
        "_ahead", "_tail", "_poison", "_walk", "_suspect", "_consumed", "inline_argv", "inline_size",
    )

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024) -> None:
        self._hiredis = hiredis.Reader()
        self._inline = bytearray()
        self._in_hiredis = False
        # the bytes hiredis holds (as received), so an inline command pipelined after multibulk
        # frames can be recovered; joined only on that rare path
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        self._frames_since = 0
        #: bytes of the held chunks that the ``_frames_since`` frames took (so trimming the held
        #: bytes of a long pipeline needs no walk over them: ``_trim_chunks``)
        self._consumed = 0
        self.max_bulk_len = max_bulk_len
        self.max_multibulk_len = MAX_MULTIBULK_LEN
        #: parse with the pre-auth caps (the connection sets it while its client is not authenticated)
        self.strict = False
        #: check the pending frame's headers once hiredis holds this many bytes of it
        self._check_at = PENDING_CHECK
        #: a frame with a large argument, parsed outside hiredis; bytes that came after it
        self._big: BigFrame | None = None
        self._after: list[tuple[bytes, int]] = []  # (chunk, offset of the unread part)
        #: the next command, parsed early by ``read_ahead`` (or the ProtocolError it raised)
        self._ahead: list[bytes] | ProtocolError | None = None
        #: lower-case names of commands whose large arguments may stay memoryviews
        self.zero_copy: frozenset[bytes] = frozenset()
        #: the last bytes given to hiredis (a ``*N`` header may be split across two reads)
        self._tail = b""
        #: a frame over the limits was found before hiredis got it: raised once the frames
        #: before it are served; nothing after it is parsed
        self._poison: ProtocolError | None = None
        #: the incremental check of the held headers (made when first needed)
        self._walk: HeaderWalk | None = None
        #: a read since the last header walk may hold a header that matters
        self._suspect = False
        #: the last argv parsed from an inline line and that line's bytes with its newline (the
        #: request's size for CLUSTER SLOT-STATS; a multibulk frame's follows from its argv)
        self.inline_argv: list[bytes] | None = None
        self.inline_size = 0

    def set_strict(self, on: bool) -> None:
        """Switch the pre-auth caps on or off between commands (AUTH, RESET)."""
        if on == self.strict:
            return
        self.strict = on
        if on and self._big is not None:  # its large argument is over the pre-auth cap anyway
            raise ProtocolError("unauthenticated bulk length")
        if on and self._in_hiredis:  # take back what hiredis holds: parsed here from now on
            joined = self._joined()
            self._leave_hiredis(joined[skip_frames(joined, self._frames_since) :])

    def feed(self, data: bytes) -> None:
        self._feed_at(data, 0)

    def _feed_at(self, data: bytes, start: int) -> None:
        """Feed ``data[start:]`` (a view past ``start``: the rest of a chunk is never copied)."""
        if self._big is not None:
            if self._big.done:
                self._after.append((data, start))
            else:
                self._feed_big(data, start)
            return
        if self._poison is not None:
            return  # the connection closes after the frames before the bad one
        part = memoryview(data)[start:] if start else data
        if self._in_hiredis:
            part = self._guard(part)
            self._hiredis.feed(part)
            self._chunks.append(part)
            self._chunks_len += len(part)
        elif not self._inline and data[start:start + 1] == b"*" and not self.strict:  # the common case
            if len(data) - start >= EARLY_CHECK and self._big_at_start(data, start):
                return
            self._enter_hiredis(data[start:] if start else data)  # a copy only right after a big frame
        else:
            self._inline += part

    def _guard(self, part: bytes | memoryview) -> bytes | memoryview:
        """What of ``part`` hiredis may have: hiredis allocates the whole list for a ``*N``
        header before any element arrives (N in the billions: gigabytes, seconds to free), so
        no count over the limit may reach it, in the first frame of a read or any later one. A
        regular-expression scan of each read (C speed) finds every number long enough to matter
        (``gate_for``); only then are the held headers walked, from where the last walk stopped.
        A frame that breaks the limits is withheld with all after it (``_poison``)."""
        tail = self._tail
        self._tail = bytes(part[-16:])
        gate = gate_for(self.max_bulk_len, BIG_ARG)
        if gate.search(part) is None and not (tail and gate.search(tail + bytes(part[:16]))):
            return part
        try:
            receiving = self._walk_held(bytes(part))
        except ProtocolError as exc:
            self._poison = exc
            if self._walk is None:  # the held frames themselves are malformed: nothing more goes in
                return part[:0]
            return part[: max(self._walk.frame - self._chunks_len, 0)]
        if receiving >= BIG_ARG:
            self._check_at = 0  # the frame goes to BigFrame at the next look
        self._suspect = True
        return part

    def _walk_held(self, extra: bytes = b"") -> int:
        """Advance the header walk over the held bytes (and ``extra``, about to be fed); returns
        the length of an argument still arriving (-1: none). Raises ProtocolError."""
        walk = self._walk
        if walk is None:
            held = self._joined() if self._chunks else b""
            start = skip_frames(held, self._frames_since) if held else 0
            walk = self._walk = HeaderWalk(start, self.max_multibulk_len, self.max_bulk_len)
        base, buf = self._held_from(walk.pos)
        return walk.run(buf + extra if extra else buf, base)

    def _held_from(self, offset: int) -> tuple[int, bytes]:
        """``(base, bytes)``: the held bytes from the chunk holding ``offset`` on, joined once
        (the chunk list is rewritten so the next call finds them in one piece)."""
        chunks = self._chunks
        base = 0
        for index, chunk in enumerate(chunks):
            if base + len(chunk) > offset:
                if index < len(chunks) - 1:
                    joined = b"".join(chunks[index:])
                    chunks[index:] = [joined]
                return base, bytes(chunks[index])
            base += len(chunk)
        return base, b""

    def _enter_hiredis(self, data: bytes) -> None:
        self._in_hiredis = True
        self._chunks = []
        self._chunks_len = 0
        self._frames_since = 0
        self._consumed = 0
        self._tail = b""
        self._walk = None
        data = self._guard(data)
        self._hiredis.feed(data)
        self._chunks = [data]
        self._chunks_len = len(data)

    def buffered(self) -> int:
        """Bytes held but not yet parsed (for the query-buffer limit)."""
        held = len(self._inline) + (self._hiredis.len() if self._in_hiredis else 0)
        if self._big is not None:
            held += self._big.held + sum(len(data) - start for data, start in self._after)
        return held

    def read_ahead(self) -> bool:
        """Parse the next command now, to be returned by the next ``next_command``; True once it
        is complete. A connection whose pipeline waits calls it after each read and stops reading
        once it is True: the next command's bytes arrive meanwhile, and no more than them."""
        if self._ahead is None:
            try:
                self._ahead = self.next_command()
            except ProtocolError as exc:
                self._ahead = exc
        return self._ahead is not None

    def next_command(self) -> list[bytes] | None:
        ahead = self._ahead
        if ahead is not None:
            self._ahead = None
            if ahead.__class__ is not list:
                raise ahead  # type: ignore[misc]
            return ahead  # type: ignore[return-value]
        if self._big is not None:
            return self._take_big()
        while True:
            if self._in_hiredis:
                frame = self._next_multibulk()
                if frame is None and self._poison is not None and self._in_hiredis:
                    raise self._poison
                if frame is not None or self._in_hiredis:
                    return frame
            buf = self._inline
            if not buf:
                if self._poison is not None:
                    raise self._poison
                return None
            if buf[0] == 0x2A and self.strict:
                return self._next_strict()
            if buf[0] == 0x2A:  # '*': hand the rest of the buffer to hiredis
                data = bytes(buf)
                buf.clear()
                self._enter_hiredis(data)
                continue
            return self._next_inline()

    def _next_multibulk(self) -> list[bytes] | None:
        try:
            frame = self._hiredis.gets()
        except hiredis.ProtocolError as exc:
            if self._switch_to_inline() or self._skip_empty_header():
                return None
            self._check_failed_frame()
            raise ProtocolError(_hiredis_message(str(exc))) from None
        except TypeError:  # a '%' map or '~' set element holding an array: hiredis cannot hash it
            raise ProtocolError("expected '$', got something else") from None
        if frame is False:
            if self._chunks_len >= self._check_at:
                self._check_pending()
            return None
        self._check_at = PENDING_CHECK
        if frame is None:  # "*-1": Redis skips a frame of no arguments
            frame = []
            size = 5
        elif frame.__class__ is not list:
            raise ProtocolError(f"expected '*', got '{_type_byte(frame)}'")
        else:
            # the frame's bytes: hiredis takes only canonical numbers (no sign, no leading zero)
            size = 3 + len(str(len(frame)))
        max_bulk = self.max_bulk_len
        for arg in frame:
            if arg.__class__ is not bytes:
                raise ProtocolError("expected '$', got something else")
            length = len(arg)
            if length > max_bulk:
                raise ProtocolError("invalid bulk length")
            size += length + (6 if length < 10 else 7 if length < 100 else 5 + len(str(length)))
        if len(frame) > self.max_multibulk_len:
            raise ProtocolError("invalid multibulk length")
        if self._hiredis.has_data():
            self._frames_since += 1
            self._consumed += size
            if self._chunks_len > 1 << 20:
                self._trim_chunks()
        else:  # a clean boundary: hiredis is empty, the next frame may be inline again
            self._in_hiredis = False
            self._chunks = []
            self._chunks_len = 0
            self._frames_since = 0
            self._consumed = 0
            self._walk = None
        return frame

    def _joined(self) -> bytes:
        joined = b"".join(self._chunks)
        self._chunks = [joined]
        return joined

    def _trim_chunks(self) -> None:
        """Drop the held bytes of the frames already returned (a long pipeline that never ends
        on a frame boundary would otherwise keep all it sent). Where they end is known from the
        frames' sizes (``_consumed``), checked against the bytes: a frame that broke the
        canonical form (a ``+simple`` element, which hiredis also takes) makes the check fail,
        and the frames are walked instead (``skip_frames``, which refuses such a frame)."""
        joined = self._joined()
        cut = self._consumed
        if not (joined[cut - 2 : cut] == b"\r\n" and (cut == len(joined) or joined[cut] == 0x2A)):
            cut = skip_frames(joined, self._frames_since)
        rest = joined[cut:]
        self._chunks = [rest]
        self._chunks_len = len(rest)
        self._frames_since = 0
        self._consumed = 0
        walk = self._walk
        if walk is not None:  # its offsets count from the start of the held bytes
            walk.pos -= cut
            walk.frame -= cut
            if walk.frame < 0:
                self._walk = None

    def _switch_to_inline(self) -> bool:
        """hiredis met a non-'*' frame: if it is an inline command, go on parsing it by hand."""
        joined = self._joined()
        rest = joined[skip_frames(joined, self._frames_since) :]
        if not rest or rest[0] == 0x2A:
            return False
        self._leave_hiredis(rest)
        return True

    def _skip_empty_header(self) -> bool:
        """``*-10``: Redis ignores a multibulk header that counts no arguments (hiredis refuses
        it); drop the header line and parse on from the bytes after it."""
        joined = self._joined()
        rest = joined[skip_frames(joined, self._frames_since) :]
        end = rest.find(b"\r\n")
        count = header_int(rest, 1, end) if end > 0 and rest[:1] == b"*" else None
        if count is None or count > 0:
            return False
        self._leave_hiredis(rest[end + 2 :])
        return True

    def _check_failed_frame(self) -> None:
        """hiredis refused a frame: raise Redis's text for it when the headers say which."""
        joined = self._joined()
        check_headers(joined, skip_frames(joined, self._frames_since), self.max_multibulk_len, self.max_bulk_len)

    def _leave_hiredis(self, rest: bytes) -> None:
        """Put the bytes hiredis had not returned back in front of the inline buffer."""
        self._hiredis = hiredis.Reader()
        self._in_hiredis = False
        self._walk = None
        self._chunks = []
        self._chunks_len = 0
        self._frames_since = 0
        self._consumed = 0
        self._check_at = PENDING_CHECK
        self._inline = bytearray(rest) + self._inline

    def _check_pending(self) -> None:
        """Refuse an argument count or bulk length over the limits while the frame is still
        arriving, and hand a frame receiving a large argument to ``BigFrame``. Runs when a read
        held a header that matters (``_suspect``, found by ``_guard``) or when the held bytes
        have doubled and the newest read holds no line end (a header line that never ends)."""
        self._check_at = self._chunks_len * 2
        if not self._suspect and b"\n" in self._chunks[-1]:
            return  # the gate saw every read: no header here breaks a limit
        self._suspect = False
        receiving = self._walk_held()
        if receiving >= BIG_ARG:
            joined = self._joined()
            self._start_big(joined[self._walk.frame :])  # type: ignore[union-attr]

    # -- frames with large arguments -------------------------------------------------------

    def _big_at_start(self, data: bytes, start: int) -> bool:
        """A large read that begins a frame still receiving a large argument goes straight to
        ``BigFrame`` (no hiredis copy, no join); its headers are checked on the way."""
        try:
            if check_headers(data, start, self.max_multibulk_len, self.max_bulk_len) < BIG_ARG:
                return False
        except ProtocolError:
            return False  # raised where errors belong: by next_command, through hiredis
        self._big = BigFrame(self.max_multibulk_len, self.max_bulk_len)
        self._feed_big(data, start)
        return True

    def _start_big(self, pending: bytes) -> None:
        """Take the frame in progress back from hiredis and finish it with ``BigFrame``."""
        self._hiredis = hiredis.Reader()
        self._in_hiredis = False
        self._walk = None
        self._chunks = []
        self._chunks_len = 0
        self._frames_since = 0
        self._consumed = 0
        self._check_at = PENDING_CHECK
        self._big = BigFrame(self.max_multibulk_len, self.max_bulk_len)
        self._feed_big(pending, 0)

    def _feed_big(self, data: bytes, start: int) -> None:
        end = self._big.feed(data, start)  # type: ignore[union-attr]
        if end < len(data):
            self._after.append((data, end))

    def recv_target(self) -> memoryview | None:
        """Where the next bytes from the socket may be received directly (the rest of a large
        argument), or None: then ``feed`` them."""
        return self._big.recv_target() if self._big is not None else None

    def received(self, count: int) -> None:
        """``count`` bytes were received into ``recv_target()``."""
        self._big.received(count)  # type: ignore[union-attr]

    def _take_big(self) -> list[bytes] | None:
        big = self._big
        if not big.done:  # type: ignore[union-attr]
            return None
        self._big = None
        argv = big.argv(self.zero_copy)  # type: ignore[union-attr]
        after, self._after = self._after, []
        for data, start in after:
            self._feed_at(data, start)
        return argv

    def _next_strict(self) -> list[bytes] | None:
        """One multibulk frame under the pre-auth caps, parsed here (such frames are small)."""
        return take_strict(self._inline, self.max_multibulk_len, self.max_bulk_len)

    def _next_inline(self) -> list[bytes] | None:
        buf = self._inline
        end = buf.find(b"\n")
        if end < 0:
            if len(buf) > MAX_INLINE_SIZE:
                raise ProtocolError("too big inline request")
            return None
        line = bytes(buf[:end]).rstrip(b"\r")
        del buf[: end + 1]
        argv = self.inline_argv = split_inline(line)
        self.inline_size = end + 1
        return argv


def _type_byte(frame: object) -> str:
    if isinstance(frame, bytes):
        return "$"
    if isinstance(frame, int):
        return ":"
    return "?"


def _hiredis_message(text: str) -> str:
    if "reply type byte" in text:
        return "expected '$', got something else"
    if "bulk length" in text or "multi-bulk" in text.lower():
        return "invalid bulk length"
    return text.removeprefix("Protocol error, ")
