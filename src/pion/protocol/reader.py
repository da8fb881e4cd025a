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
        "_hiredis", "_inline", "_in_hiredis", "_chunks", "_chunks_len", "_frames_since",
        "max_bulk_len", "max_multibulk_len",
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
        self.max_bulk_len = max_bulk_len
        self.max_multibulk_len = MAX_MULTIBULK_LEN

    def feed(self, data: bytes) -> None:
        if self._in_hiredis:
            self._hiredis.feed(data)
            self._chunks.append(data)
            self._chunks_len += len(data)
        elif not self._inline and data[:1] == b"*":  # the common case: straight to hiredis
            self._enter_hiredis(data)
        else:
            self._inline += data

    def _enter_hiredis(self, data: bytes) -> None:
        self._in_hiredis = True
        self._hiredis.feed(data)
        self._chunks = [data]
        self._chunks_len = len(data)
        self._frames_since = 0

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
                data = bytes(buf)
                buf.clear()
                self._enter_hiredis(data)
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
        max_bulk = self.max_bulk_len
        for arg in frame:
            if arg.__class__ is not bytes:
                raise ProtocolError("expected '$', got something else")
            if len(arg) > max_bulk:
                raise ProtocolError("invalid bulk length")
        if len(frame) > self.max_multibulk_len:
            raise ProtocolError("invalid multibulk length")
        if self._hiredis.has_data():
            self._frames_since += 1
            if self._chunks_len > 1 << 20:
                self._trim_chunks()
        else:  # a clean boundary: hiredis is empty, the next frame may be inline again
            self._in_hiredis = False
            self._chunks = []
            self._chunks_len = 0
            self._frames_since = 0
        return frame

    def _joined(self) -> bytes:
        joined = b"".join(self._chunks)
        self._chunks = [joined]
        return joined

    def _trim_chunks(self) -> None:
        joined = self._joined()
        rest = joined[skip_frames(joined, self._frames_since) :]
        self._chunks = [rest]
        self._chunks_len = len(rest)
        self._frames_since = 0

    def _switch_to_inline(self) -> bool:
        """hiredis met a non-'*' frame: if it is an inline command, go on parsing it by hand."""
        joined = self._joined()
        rest = joined[skip_frames(joined, self._frames_since) :]
        if not rest or rest[0] == 0x2A:
            return False
        self._hiredis = hiredis.Reader()
        self._in_hiredis = False
        self._chunks = []
        self._chunks_len = 0
        self._frames_since = 0
        self._inline = bytearray(rest) + self._inline
        return True

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


def skip_frames(buf: bytes | bytearray, count: int) -> int:
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
