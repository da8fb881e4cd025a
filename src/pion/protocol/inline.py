"""Inline commands: a request sent as one text line (``SET k "a b"\\r\\n``) rather than a frame.

Why a module of its own: telnet users, ``redis-cli`` pipes and Redis's own test suite send
inline commands, and Redis splits them with ``sdssplitargs`` (double quotes with C escapes,
single quotes, any ASCII whitespace between arguments). That quoting grammar has nothing to do
with the multibulk state machine in ``reader``; kept here it can be read and tested on its own.
"""

from __future__ import annotations

from pion.protocol.errors import ProtocolError

#: the longest inline request or ``*N`` / ``$len`` header line (Redis's PROTO_INLINE_MAX_SIZE)
MAX_INLINE_SIZE = 64 * 1024

_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}


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
                if ch == quote:
                    i, quote = _after_closing_quote(line, i), 0
                    break
                current.append(ch)
            elif quote == 0x27:  # inside '...'
                if ch == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    current.append(0x27)
                    i += 2
                    continue
                if ch == quote:
                    i, quote = _after_closing_quote(line, i), 0
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


def _after_closing_quote(line: bytes, i: int) -> int:
    """The index after a closing quote at ``line[i]``, which must end the argument (Redis's rule)."""
    if i + 1 < len(line) and line[i + 1] not in b" \t\n\r\v\f":
        raise ProtocolError("unbalanced quotes in request")
    return i + 1


def _read_escape(line: bytes, i: int) -> tuple[int, bytes]:
    """The byte a backslash escape at ``line[i]`` stands for, and the index after it."""
    nxt = line[i + 1]
    if nxt == ord("x") and i + 3 < len(line):
        try:
            return i + 4, bytes([int(line[i + 2 : i + 4], 16)])
        except ValueError:
            pass
    return i + 2, _ESCAPES.get(nxt, bytes([nxt]))
