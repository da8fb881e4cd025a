"""Multibulk headers read by hand: limit checks, frame boundaries, and pre-auth frames.

Why not leave it all to hiredis: hiredis returns a frame only once all of it has arrived, gives
its own error texts, and says nothing about where in the bytes it holds one frame ends. The
reader therefore looks at the ``*N`` / ``$len`` lines itself, to

- refuse an argument count or bulk length over the limits before the payload is buffered
  (``check_headers``, ``count_over``), with Redis's error text;
- find the bytes after the frames hiredis has already returned (``skip_frames``), when it has
  to take them back (an inline command next, a large argument, a switch to strict mode);
- parse a frame from a client that has not authenticated under Redis's pre-auth caps
  (``take_strict``): such frames are small, and hiredis would buffer an oversize one whole.

These are stateless functions over a buffer, so the reader keeps only its state machine.
"""

from __future__ import annotations

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


def count_over(data: bytes, start: int, limit: int) -> bool:
    """True when the ``*N`` line at ``start`` is complete and N is over ``limit``."""
    end = data.find(b"\r\n", start, start + 24)
    count = header_int(data, start + 1, end) if end > 0 else None
    return count is not None and count > limit


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
