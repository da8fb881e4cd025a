"""Multibulk headers read by hand: limit checks, frame boundaries, and pre-auth frames.

Why not leave it all to hiredis: hiredis returns a frame only once all of it has arrived, gives
its own error texts, and says nothing about where in the bytes it holds one frame ends. The
reader therefore looks at the ``*N`` / ``$len`` lines itself, to

- refuse an argument count or bulk length over the limits before the payload is buffered
  (``check_headers``, ``HeaderWalk``), with Redis's error text;
- find the bytes after the frames hiredis has already returned (``skip_frames``), when it has
  to take them back (an inline command next, a large argument, a switch to strict mode);
- parse a frame from a client that has not authenticated under Redis's pre-auth caps
  (``take_strict``): such frames are small, and hiredis would buffer an oversize one whole.

These are stateless functions over a buffer, so the reader keeps only its state machine.
"""

from __future__ import annotations

import re

from pion.protocol.errors import ProtocolError
from pion.protocol.inline import MAX_INLINE_SIZE

#: Redis's caps for a client that has not authenticated yet (processMultibulkBuffer)
UNAUTH_MAX_ARGS = 10
UNAUTH_MAX_BULK = 16384


def take_strict(buf: bytearray, max_args: int, max_bulk: int) -> list[bytes] | None:
    """One multibulk frame from the start of ``buf`` under the pre-auth caps, removed from
    ``buf``; None while it is incomplete (nothing removed)."""
    end = buf.find(b"\r\n")
    if end < 0:
        if len(buf) > MAX_INLINE_SIZE:
            raise ProtocolError("too big mbulk count string")
        return None
    count = header_int(buf, 1, end)
    if count is None or count > max_args:
        raise ProtocolError("invalid multibulk length")
    if count > UNAUTH_MAX_ARGS:
        raise ProtocolError("unauthenticated multibulk length")
    pos = end + 2
    argv: list[bytes] = []
    for _ in range(max(count, 0)):
        if pos >= len(buf):
            return None
        end = buf.find(b"\r\n", pos)
        size = bulk_header(buf, pos, end, max_bulk)
        if size is None:
            return None
        if size > UNAUTH_MAX_BULK:
            raise ProtocolError("unauthenticated bulk length")
        if len(buf) < end + 4 + size:
            return None
        argv.append(bytes(buf[end + 2 : end + 2 + size]))
        pos = end + 4 + size
    del buf[:pos]
    return argv


def check_headers(buf: bytes | bytearray, pos: int, max_args: int, max_bulk: int) -> int:
    """Check the ``*N`` and ``$len`` headers of the (possibly incomplete) frame at ``pos``,
    skipping payloads by their length; raises ProtocolError with Redis's text. Returns the
    length of the argument whose payload is still arriving, else -1."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        if len(buf) - pos > MAX_INLINE_SIZE:
            raise ProtocolError("too big mbulk count string")
        return -1
    count = header_int(buf, pos + 1, end)
    if count is None or count > max_args:
        raise ProtocolError("invalid multibulk length")
    pos = end + 2
    for _ in range(count):
        if pos >= len(buf):
            return -1
        end = buf.find(b"\r\n", pos)
        size = bulk_header(buf, pos, end, max_bulk)
        if size is None:
            return -1
        pos = end + 4 + size
        if pos > len(buf):
            return size
    return -1


def bulk_header(buf: bytes | bytearray, pos: int, end: int, max_bulk: int) -> int | None:
    """The length in the ``$len`` header at ``pos`` (line end ``end``, -1 if not there yet)."""
    if buf[pos] != 0x24:
        raise ProtocolError(f"expected '$', got '{chr(buf[pos])}'")
    if end < 0:
        if len(buf) - pos > MAX_INLINE_SIZE:
            raise ProtocolError("too big bulk count string")
        return None
    size = header_int(buf, pos + 1, end)
    if size is None or size < 0 or size > max_bulk:
        raise ProtocolError("invalid bulk length")
    return size


class HeaderWalk:
    """An incremental check of the ``*N`` / ``$len`` headers in the bytes hiredis holds.

    Why incremental: the reader looks at headers only when a cheap scan of a read (``gate``)
    found a number long enough to matter, and such numbers may also sit inside payloads; walking
    from the start of the pending frames every time would be quadratic. The walk keeps its place
    (an absolute offset into the reader's held bytes, ``pos``, and the arguments left in the frame
    it is in), so every header is parsed at most once. ``frame`` is where the frame being walked
    starts: the reader withholds it and what follows when its headers break the limits.
    """

    __slots__ = ("pos", "left", "frame", "max_args", "max_bulk")

    def __init__(self, start: int, max_args: int, max_bulk: int) -> None:
        self.pos = start
        self.frame = start
        #: arguments left in the frame being walked; -1: at the next frame's ``*N`` line
        self.left = -1
        self.max_args = max_args
        self.max_bulk = max_bulk

    def run(self, buf: bytes, base: int) -> int:
        """Walk ``buf`` (the held bytes from absolute offset ``base`` <= ``pos``) from ``pos``;
        returns the length of the argument whose payload is still arriving (-1: none). Raises
        ProtocolError with Redis's text. Stops at bytes that are not a multibulk frame (an
        inline command: the reader deals with it)."""
        pos = self.pos - base
        size = len(buf)
        while pos < size:
            if self.left <= 0:
                if buf[pos] != 0x2A:
                    return -1
                self.frame = base + pos
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if size - pos > MAX_INLINE_SIZE:
                        raise ProtocolError("too big mbulk count string")
                    return -1
                count = header_int(buf, pos + 1, end)
                if count is None or count > self.max_args:
                    raise ProtocolError("invalid multibulk length")
                self.left = count if count > 0 else 0
                pos = end + 2
                self.pos = base + pos
                continue
            end = buf.find(b"\r\n", pos)
            length = bulk_header(buf, pos, end, self.max_bulk)
            if length is None:
                return -1
            after = end + 4 + length
            if after > size:
                return length
            pos = after
            self.left -= 1
            self.pos = base + pos
        return -1


def gate_for(max_bulk: int, big_arg: int) -> re.Pattern[bytes]:
    """A pattern that matches wherever a header may break a limit or announce a large argument:
    a ``*`` count of a million or more, or a ``$`` length of as many digits as the smaller of
    ``max_bulk + 1`` and ``big_arg`` (bytes without a match need no header walk)."""
    digits = len(str(min(max_bulk + 1, big_arg)))
    gate = _GATES.get(digits)
    if gate is None:  # compiled once (asked for every read: no re.compile, not even its cache, per read)
        gate = _GATES[digits] = re.compile(rb"\*[0-9]{7}|\$[0-9]{%d}" % digits)
    return gate


_GATES: dict[int, re.Pattern[bytes]] = {}


def header_int(buf: bytes | bytearray, start: int, end: int) -> int | None:
    """The decimal number of a ``*N`` / ``$N`` header line, or None if it is not one."""
    text = bytes(buf[start:end])
    if not text or len(text) > 20 or not (text.isdigit() or (text[:1] == b"-" and text[1:].isdigit())):
        return None
    return int(text)


def skip_frames(buf: bytes | bytearray, count: int) -> int:
    """Offset just past ``count`` complete multibulk frames at the start of ``buf``.

    hiredis also accepts ``+simple`` elements inside a frame, which no client sends: such a
    stream is refused with ProtocolError here rather than miscounted."""
    pos = 0
    for _ in range(count):
        end = buf.find(b"\r\n", pos)
        num = header_int(buf, pos + 1, end) if end > pos and buf[pos] == 0x2A else None
        if num is None:
            raise ProtocolError("invalid multibulk length")
        pos = end + 2
        for _ in range(num):
            end = buf.find(b"\r\n", pos)
            size = header_int(buf, pos + 1, end) if end > pos and buf[pos] == 0x24 else None
            if size is None or size < 0:
                raise ProtocolError(f"expected '$', got '{chr(buf[pos]) if pos < len(buf) else ''}'")
            pos = end + 4 + size
    return pos
