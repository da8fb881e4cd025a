"""Request parsing: multibulk frames through hiredis's C parser, inline commands by hand.

Sans-IO: ``feed`` takes bytes, ``next_command`` returns one argv (``list[bytes]``), ``None`` when
more bytes are needed, or raises ``ProtocolError``. A connection switches to hiredis when a
frame starts with ``*`` and back to inline parsing only at a clean frame boundary, which is how
real clients and Redis's own tests mix the two.
"""

from __future__ import annotations

import hiredis

from pion.protocol.errors import ProtocolError

MAX_INLINE_SIZE = 64 * 1024
MAX_MULTIBULK_LEN = 1024 * 1024 * 1024


class RequestReader:
    """Turns a byte stream into argv lists."""

    __slots__ = (
        "_hiredis", "_inline", "_in_hiredis", "_mirror", "_frames_since", "max_bulk_len", "max_multibulk_len",
    )

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024) -> None:
        self._hiredis = hiredis.Reader()
        self._inline = bytearray()
        self._in_hiredis = False
        # what hiredis holds, so an inline command pipelined after multibulk frames can be recovered
        self._mirror = bytearray()
        self._frames_since = 0
        self.max_bulk_len = max_bulk_len
        self.max_multibulk_len = MAX_MULTIBULK_LEN

    def feed(self, data: bytes) -> None:
        if self._in_hiredis:
            self._hiredis.feed(data)
            self._mirror += data
        else:
            self._inline += data

    def buffered(self) -> int:
        """Bytes held but not yet parsed (for the query-buffer limit)."""
        return len(self._inline) + (self._hiredis.len() if self._in_hiredis else 0)

    def next_command(self) -> list[bytes] | None:
        while True:
            if self._in_hiredis:
                frame = self._next_multibulk()
                if frame is not None or self._in_hiredis:
                    return frame
            buf = self._inline
            if not buf:
                return None
            if buf[0] == 0x2A:  # '*': hand the rest of the buffer to hiredis
                self._in_hiredis = True
                data = bytes(buf)
                self._hiredis.feed(data)
                self._mirror = bytearray(data)
                self._frames_since = 0
                buf.clear()
                continue
            return self._next_inline()

    def _next_multibulk(self) -> list[bytes] | None:
        try:
            frame = self._hiredis.gets()
        except hiredis.ProtocolError as exc:
            if self._switch_to_inline():
                return None
            raise ProtocolError(_hiredis_message(str(exc))) from None
        if frame is False:
            return None
        if frame.__class__ is not list:
            raise ProtocolError(f"expected '*', got '{_type_byte(frame)}'")
        for arg in frame:
            if arg.__class__ is not bytes:
                raise ProtocolError("expected '$', got something else")
            if len(arg) > self.max_bulk_len:
                raise ProtocolError("invalid bulk length")
        if len(frame) > self.max_multibulk_len:
            raise ProtocolError("invalid multibulk length")
        if self._hiredis.has_data():
            self._frames_since += 1
            if len(self._mirror) > 1 << 20:
                del self._mirror[: skip_frames(self._mirror, self._frames_since)]
                self._frames_since = 0
        else:  # a clean boundary: the next frame may be inline again
            self._leave_hiredis(bytearray())
        return frame

    def _switch_to_inline(self) -> bool:
        """hiredis met a non-'*' frame: if it is an inline command, go on parsing it by hand."""
        offset = skip_frames(self._mirror, self._frames_since)
        rest = self._mirror[offset:]
        if not rest or rest[0] == 0x2A:
            return False
        self._leave_hiredis(rest)
        return True

    def _leave_hiredis(self, rest: bytearray) -> None:
        if rest or self._frames_since or self._mirror:
            self._hiredis = hiredis.Reader()
        self._in_hiredis = False
        self._mirror = bytearray()
        self._frames_since = 0
        self._inline = rest + self._inline


    def _next_inline(self) -> list[bytes] | None:
        buf = self._inline
        end = buf.find(b"\n")
        if end < 0:
            if len(buf) > MAX_INLINE_SIZE:
                raise ProtocolError("too big inline request")
            return None
        line = bytes(buf[:end]).rstrip(b"\r")
        del buf[: end + 1]
        return split_inline(line)


def split_inline(line: bytes) -> list[bytes]:
    """Split an inline command as Redis's sdssplitargs does: quotes, escapes, spaces."""
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in b" \t\n\r\v\f":
            i += 1
        if i >= n:
            return args
        current = bytearray()
        quote = 0
        while i < n:
            ch = line[i]
            if quote == 0x22:  # inside "..."
                if ch == 0x5C and i + 1 < n:  # backslash
                    i, esc = _read_escape(line, i)
                    current += esc
                    continue
                if ch == 0x22:
                    if i + 1 < n and line[i + 1] not in b" \t\n\r\v\f":
                        raise ProtocolError("unbalanced quotes in request")
                    quote = 0
                    i += 1
                    break
                current.append(ch)
            elif quote == 0x27:  # inside '...'
                if ch == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    current.append(0x27)
                    i += 2
                    continue
                if ch == 0x27:
                    if i + 1 < n and line[i + 1] not in b" \t\n\r\v\f":
                        raise ProtocolError("unbalanced quotes in request")
                    quote = 0
                    i += 1
                    break
                current.append(ch)
            elif ch in b" \t\n\r\v\f":
                break
            elif ch in (0x22, 0x27):
                quote = ch
            else:
                current.append(ch)
            i += 1
        if quote:
            raise ProtocolError("unbalanced quotes in request")
        args.append(bytes(current))


_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}


def _read_escape(line: bytes, i: int) -> tuple[int, bytes]:
    nxt = line[i + 1]
    if nxt == ord("x") and i + 3 < len(line):
        try:
            return i + 4, bytes([int(line[i + 2 : i + 4], 16)])
        except ValueError:
            pass
    return i + 2, _ESCAPES.get(nxt, bytes([nxt]))


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


def skip_frames(buf: bytearray, count: int) -> int:
    """Offset just past ``count`` complete multibulk frames at the start of ``buf``."""
    pos = 0
    for _ in range(count):
        end = buf.index(b"\r\n", pos)
        num = int(buf[pos + 1 : end])
        pos = end + 2
        for _ in range(num):
            end = buf.index(b"\r\n", pos)
            pos = end + 2 + int(buf[pos + 1 : end]) + 2
    return pos
