"""Redis's glob-style pattern matching (stringmatchlen): ``* ? [abc] [^a-z] \\x``.

Patterns compile once to a regular expression and are cached, since KEYS, SCAN MATCH,
PSUBSCRIBE and CONFIG GET reuse the same few patterns many times.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=1024)
def compile_glob(pattern: bytes, nocase: bool = False) -> re.Pattern[bytes]:
    out = bytearray()
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i : i + 1]
        if ch == b"*":
            while i + 1 < n and pattern[i + 1 : i + 2] == b"*":
                i += 1
            out += b".*"
        elif ch == b"?":
            out += b"."
        elif ch == b"[":
            i, cls = _parse_class(pattern, i + 1)
            out += cls
            continue
        elif ch == b"\\" and i + 1 < n:
            i += 1
            out += re.escape(pattern[i : i + 1])
        else:
            out += re.escape(ch)
        i += 1
    flags = re.DOTALL | (re.IGNORECASE if nocase else 0)
    return re.compile(bytes(out) + rb"\Z", flags)


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
    return compile_glob(pattern, nocase).match(value) is not None
