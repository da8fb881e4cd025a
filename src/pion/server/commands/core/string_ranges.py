"""String ranges: GETRANGE (and its old name SUBSTR), SETRANGE, and LCS.

LCS fills Redis's dynamic-programming table one row at a time with numpy (a row is the running
maximum of the row above and its diagonal matches), then walks it back exactly as Redis does, so
the string and the IDX ranges are the ones Redis picks among equally long answers.
"""

from __future__ import annotations

import numpy as np

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.commands.core.strings import string_too_long
from pion.server.context import Ctx
from pion.server.registry import command


def get_range(ctx: Ctx, argv: list[bytes]) -> bytes:
    """Redis's getrangeCommand: inclusive byte range, negative indexes from the end."""
    start, end = parse_int(argv[2]), parse_int(argv[3])
    value = ctx.db.get_typed(argv[1], bytes)
    if not value or (start < 0 and end < 0 and start > end):
        return b""
    size = len(value)
    if start < 0:
        start = max(size + start, 0)
    if end < 0:
        end = max(size + end, 0)
    end = min(end, size - 1)
    return b"" if start > end else value[start:end + 1]


@command("GETRANGE", 4, "readonly", keys=(1, 1, 1), categories="@read @string @slow", group="string",
         since="2.4.0")
def getrange(ctx: Ctx, argv: list[bytes]):
    """GETRANGE key start end"""
    return get_range(ctx, argv)


@command("SUBSTR", 4, "readonly", keys=(1, 1, 1), categories="@read @string @slow", group="string")
def substr(ctx: Ctx, argv: list[bytes]):
    """SUBSTR key start end

    The pre-2.0 name of GETRANGE, kept by Redis 7.
    """
    return get_range(ctx, argv)


@command("SETRANGE", 4, "write denyoom", keys=(1, 1, 1), categories="@write @string @slow", group="string",
         since="2.2.0")
def setrange(ctx: Ctx, argv: list[bytes]):
    """SETRANGE key offset value

    Pads with zero bytes; keeps the TTL. An empty value changes nothing and answers the length.
    """
    key, patch = argv[1], argv[3]
    offset = parse_int(argv[2])
    if offset < 0:
        raise ReplyError("ERR offset is out of range")
    old = ctx.db.get_typed(key, bytes)
    if not patch:
        return 0 if old is None else len(old)
    string_too_long(ctx, offset + len(patch))
    old = old or b""
    if len(old) < offset:
        old += bytes(offset - len(old))
    new = old[:offset] + patch + old[offset + len(patch):]
    if new != old:
        ctx.db.set(key, new, keep_ttl=True)
        ctx.dirty()
        ctx.notify("$", "setrange", key)
    return len(new)


# -- LCS ---------------------------------------------------------------------------------


@command("LCS", -3, "readonly", keys=(1, 2, 1), categories="@read @string @slow", group="string",
         since="7.0.0")
def lcs(ctx: Ctx, argv: list[bytes]):
    """LCS key1 key2 [LEN] [IDX] [MINMATCHLEN min-match-len] [WITHMATCHLEN]

    IDX answers ``{matches: [[[a_start, a_end], [b_start, b_end], (len)], ...], len: n}``
    (a map in RESP3, a flat array in RESP2), matches listed from the end of the strings.
    """
    a, b = _lcs_operands(ctx, argv[1], argv[2])
    want_len, want_idx, with_len, min_len = _lcs_options(argv)
    if len(a) >= 0xFFFFFFFF - 1 or len(b) >= 0xFFFFFFFF - 1:
        raise ReplyError("ERR String too long for LCS")
    if (len(a) + 1) * (len(b) + 1) * 4 > ctx.server.settings.proto_max_bulk_len:
        raise ReplyError("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
    if want_len and not want_idx:
        return _lcs_length(a, b)
    table = _lcs_table(a, b)
    text, matches = _lcs_walk(a, b, table, min_len, with_len)
    if want_idx:
        return {b"matches": matches, b"len": int(table[len(a), len(b)])}
    return text


def _lcs_operands(ctx: Ctx, key_a: bytes, key_b: bytes) -> tuple[bytes, bytes]:
    """Both values; a missing key is an empty string. Checked before any option (as Redis)."""
    a, b = ctx.db.get(key_a), ctx.db.get(key_b)
    if (a is not None and a.__class__ is not bytes) or (b is not None and b.__class__ is not bytes):
        raise ReplyError("ERR The specified keys must contain string values")
    return a or b"", b or b""


def _lcs_options(argv: list[bytes]) -> tuple[bool, bool, bool, int]:
    want_len = want_idx = with_len = False
    min_len = 0
    j = 3
    while j < len(argv):
        opt = argv[j].upper()
        if opt == b"IDX":
            want_idx = True
        elif opt == b"LEN":
            want_len = True
        elif opt == b"WITHMATCHLEN":
            with_len = True
        elif opt == b"MINMATCHLEN" and j + 1 < len(argv):
            min_len = max(parse_int(argv[j + 1]), 0)
            j += 1
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1
    if want_len and want_idx:
        raise ReplyError("ERR If you want both the length and indexes, please just use IDX.")
    return want_len, want_idx, with_len, min_len


def _lcs_next_row(prev: np.ndarray, matches: np.ndarray) -> np.ndarray:
    """LCS(i, j) for all j from row i-1: cummax(max(LCS(i-1, j), matches ? LCS(i-1, j-1)+1 : 0))."""
    row = np.empty_like(prev)
    row[0] = 0
    np.maximum(prev[1:], np.where(matches, prev[:-1] + 1, 0), out=row[1:])
    np.maximum.accumulate(row, out=row)
    return row


def _lcs_length(a: bytes, b: bytes) -> int:
    b_arr = np.frombuffer(b, dtype=np.uint8)
    row = np.zeros(len(b) + 1, dtype=np.uint32)
    for ch in a:
        row = _lcs_next_row(row, b_arr == ch)
    return int(row[-1])


def _lcs_table(a: bytes, b: bytes) -> np.ndarray:
    b_arr = np.frombuffer(b, dtype=np.uint8)
    table = np.zeros((len(a) + 1, len(b) + 1), dtype=np.uint32)
    for i, ch in enumerate(a, 1):
        table[i] = _lcs_next_row(table[i - 1], b_arr == ch)
    return table


def _lcs_walk(a: bytes, b: bytes, table: np.ndarray, min_len: int, with_len: bool):
    """Redis's backward walk: the LCS string and the matched ranges, in Redis's order."""
    rows = table.tolist() if table.size <= 1 << 20 else table
    out = bytearray()
    matches: list[list] = []
    i, j = len(a), len(b)
    a_start = a_end = b_start = b_end = -1  # a_start == -1: no range open
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            out.append(a[i - 1])
            if a_start == -1:
                a_start = a_end = i - 1
                b_start = b_end = j - 1
            elif a_start == i and b_start == j:
                a_start -= 1
                b_start -= 1
            else:
                emit = True
            if a_start == 0 or b_start == 0:
                emit = True
            i -= 1
            j -= 1
        else:
            if rows[i - 1][j] > rows[i][j - 1]:
                i -= 1
            else:
                j -= 1
            if a_start != -1:
                emit = True
        if emit:
            span = a_end - a_start + 1
            if min_len == 0 or span >= min_len:
                match = [[a_start, a_end], [b_start, b_end]]
                matches.append(match + [span] if with_len else match)
            a_start = -1
    return bytes(reversed(out)), matches
