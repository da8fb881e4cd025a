"""Redis's glob-style pattern matching (stringmatchlen): ``* ? [abc] [^a-z] \\x``.

Patterns compile once and are cached, since KEYS, SCAN MATCH, PSUBSCRIBE and CONFIG GET reuse
the same few patterns many times. A pattern with stars is split at them into fixed-width pieces
matched left to right (leftmost match of each middle piece, last piece at the end): a glob never
needs to backtrack past the previous star, so ``a*a*a*...*b`` against a long key costs
O(len(key) * len(pattern)) instead of the exponential backtracking one regex with ``.*`` per star
would do.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=1024)
def compile_glob(pattern: bytes, nocase: bool = False) -> _Glob:
    pieces: list[bytes] = [b""]
    widths = [0]
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i : i + 1]
        if ch == b"*":
            while i + 1 < n and pattern[i + 1 : i + 2] == b"*":
                i += 1
            pieces.append(b"")
            widths.append(0)
            i += 1
            continue
        if ch == b"?":
            tok = b"."
        elif ch == b"[":
            i, tok = _parse_class(pattern, i + 1)
            pieces[-1] += tok
            widths[-1] += 1
            continue
        elif ch == b"\\" and i + 1 < n:
            i += 1
            tok = re.escape(pattern[i : i + 1])
        else:
            tok = re.escape(ch)
        pieces[-1] += tok
        widths[-1] += 1
        i += 1
    flags = re.DOTALL | (re.IGNORECASE if nocase else 0)
    return _Glob([re.compile(p, flags) for p in pieces], widths)


class _Glob:
    """A compiled glob: the star-free pieces as regexes, each matching a fixed number of bytes."""

    __slots__ = ("pieces", "widths")

    def __init__(self, pieces: list[re.Pattern[bytes]], widths: list[int]) -> None:
        self.pieces = pieces
        self.widths = widths

    def match(self, value: bytes) -> bool:
        pieces, widths = self.pieces, self.widths
        if len(pieces) == 1:
            return len(value) == widths[0] and pieces[0].match(value) is not None
        head, tail = widths[0], widths[-1]
        end = len(value) - tail
        if end < head or pieces[0].match(value, 0, head) is None:
            return False
        if pieces[-1].match(value, end) is None:
            return False
        pos = head
        for piece, width in zip(pieces[1:-1], widths[1:-1], strict=True):
            if width == 0:
                continue
            found = piece.search(value, pos, end)
            if found is None:
                return False
            pos = found.end()
        return True


def _parse_class(pattern: bytes, i: int) -> tuple[int, bytes]:
    """Parse ``[...]`` from just after the bracket; an unclosed class runs to the end, as Redis."""
    n = len(pattern)
    negate = i < n and pattern[i : i + 1] == b"^"
    if negate:
        i += 1
    items = bytearray()
    while i < n and pattern[i : i + 1] != b"]":
        ch = pattern[i : i + 1]
        if ch == b"\\" and i + 1 < n:
            i += 1
            items += re.escape(pattern[i : i + 1])
        elif i + 2 < n and pattern[i + 1 : i + 2] == b"-" and pattern[i + 2 : i + 3] != b"]":
            lo, hi = sorted((pattern[i], pattern[i + 2]))
            items += re.escape(bytes([lo])) + b"-" + re.escape(bytes([hi]))
            i += 2
        else:
            items += re.escape(ch)
        i += 1
    if i < n:
        i += 1  # the closing bracket
    if not items:
        return i, (b"[^\\x00-\\xff]" if not negate else b"[\\x00-\\xff]")
    return i, b"[" + (b"^" if negate else b"") + bytes(items) + b"]"


def glob_match(pattern: bytes, value: bytes, nocase: bool = False) -> bool:
    if pattern == b"*":
        return True
    return compile_glob(pattern, nocase).match(value)
