"""SORT and SORT_RO: sort a list, set or sorted set, optionally by external keys (BY), fetch
external values (GET), page (LIMIT) and store the result as a list (STORE).

The container types belong to other modules; ``elements_of`` and ``hash_field`` are the two
small adapters through which this module reads them. Numbers are read as C's strtod reads
them (hex, leading blanks, inf), since Redis 7.0 does, and a value strtod rejects fails the
whole sort with Redis's error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import ArgCursor
from pion.server.context import Ctx
from pion.server.registry import command
from pion.server.security.acl_check import has_full_key_access
from pion.server.security.auth import users_of
from pion.storage.keyspace import Database, now_ms, type_name
from pion.storage.list_value import ListValue, list_fill

NOT_DOUBLE = "ERR One or more scores can't be converted into double"
_SORTABLE = ("list", "set", "zset")
_DECIMAL = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_HEX = re.compile(rb"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?")
_SPECIAL = re.compile(rb"[+-]?(?:inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
_C_SPACE = b" \t\n\v\f\r"
_SMALLEST_NORMAL = 2.2250738585072014e-308


def strtod(raw: bytes) -> float | None:
    """The double C's strtod reads from all of ``raw``; None where Redis's SORT refuses it
    (trailing garbage, NaN, overflow or underflow, which set ERANGE). Empty reads as 0."""
    text = raw.lstrip(_C_SPACE)
    if not text:
        return 0.0 if not raw else None
    if _DECIMAL.fullmatch(text):
        value = float(text)
        mantissa = text.split(b"e")[0].split(b"E")[0]
        nonzero = any(48 < c <= 57 for c in mantissa)
    elif _HEX.fullmatch(text):
        try:
            value = float.fromhex(text.decode())
        except OverflowError:
            return None
        nonzero = any(c not in b"0xX.+-" for c in text.split(b"p")[0].split(b"P")[0])
    elif _SPECIAL.fullmatch(text):
        value = float(text.split(b"(")[0])
        return None if math.isnan(value) else value
    else:
        return None
    if math.isinf(value) or (nonzero and abs(value) < _SMALLEST_NORMAL):
        return None
    return value


def elements_of(value: Any) -> list[bytes]:
    """The members of a list (in order), zset (by score) or set (an intset in numeric order,
    as Redis walks it; otherwise the set's own order)."""
    kind = type_name(value)
    if kind == "zset":
        return [member for _score, member in value]
    if kind == "set":
        members = list(getattr(value, "members", value))
        if getattr(value, "encoding", None) == "intset":
            members.sort(key=int)
        return members
    return list(value)


def hash_field(value: Any, field: bytes) -> bytes | None:
    """One field of a hash value (``key->field`` patterns); None if absent or expired."""
    found = getattr(value, "fields", value).get(field)
    ttls = getattr(value, "ttls", None)
    if found is not None and ttls and ttls.get(field, now_ms() + 1) <= now_ms():
        return None
    return found


def lookup_pattern(db: Database, pattern: bytes, subst: bytes) -> bytes | None:
    """Redis's lookupKeyByPattern: ``#`` is the element itself, the first ``*`` takes the
    element, ``->field`` after it reads a hash field; anything but a string (or hash) is nil."""
    if pattern == b"#":
        return subst
    star = pattern.find(b"*")
    if star < 0:
        return None
    arrow = pattern.find(b"->", star + 1)
    field = None
    if arrow >= 0 and arrow + 2 < len(pattern):
        field = pattern[arrow + 2:]
        pattern = pattern[:arrow]
    value = db.get(pattern[:star] + subst + pattern[star + 1:])
    if value is None:
        return None
    if field is not None:
        return hash_field(value, field) if type_name(value) == "hash" else None
    return value if value.__class__ is bytes else None


class SortSpec:
    """The parsed options of one SORT call."""

    __slots__ = ("desc", "alpha", "start", "count", "store", "by", "gets", "dontsort")

    def __init__(self, argv: list[bytes], readonly: bool, reads_all: Callable[[], bool] = lambda: True) -> None:
        """``reads_all``: whether the caller's ACL user may read every key (BY and GET patterns
        read keys that no key position names, so Redis demands that)."""
        self.desc = self.alpha = self.dontsort = False
        self.start, self.count = 0, -1
        self.store: bytes | None = None
        self.by: bytes | None = None
        self.gets: list[bytes] = []
        args = ArgCursor(argv, 2)
        while not args.done():
            option = args.next_option()
            left = args.remaining()
            if option in (b"ASC", b"DESC"):
                self.desc = option == b"DESC"
            elif option == b"ALPHA":
                self.alpha = True
            elif option == b"LIMIT" and left >= 2:
                self.start, self.count = args.next_int(), args.next_int()
            elif option == b"STORE" and left >= 1 and not readonly:
                self.store = args.next()
            elif option == b"BY" and left >= 1:
                self.by = args.next()
                self.dontsort = b"*" not in self.by
                if not self.dontsort and not reads_all():
                    raise ReplyError("ERR BY option of SORT denied due to insufficient ACL permissions.")
            elif option == b"GET" and left >= 1:
                if not reads_all():
                    raise ReplyError("ERR GET option of SORT denied due to insufficient ACL permissions.")
                self.gets.append(args.next())
            else:
                raise ReplyError(errors.SYNTAX)

    def window(self, size: int) -> tuple[int, int]:
        """Redis's LIMIT clamping: the inclusive index range [start, end] of the output."""
        start = min(max(self.start, 0), size)
        count = min(max(self.count, -1), size)
        end = size - 1 if count < 0 else start + count - 1
        if start >= size:
            start, end = size - 1, size - 2
        return start, min(end, size - 1)


def sort_generic(ctx: Ctx, argv: list[bytes], readonly: bool) -> Any:
    spec = SortSpec(argv, readonly, lambda: has_full_key_access(
        users_of(ctx.server), ctx.client.user, "sort_ro" if readonly else "sort", argv))
    db = ctx.db
    value = db.get(argv[1])
    kind = type_name(value) if value is not None else "list"
    if kind not in _SORTABLE:
        raise ReplyError(errors.WRONGTYPE)
    if spec.dontsort and kind == "set" and (spec.store is not None or ctx.client.in_script):
        spec.dontsort, spec.alpha, spec.by = False, True, None  # a stable order for replicas
    items = elements_of(value) if value is not None else []
    if spec.dontsort:
        if spec.desc and kind != "set":
            items.reverse()
    else:
        items = _sorted(db, items, spec)
    start, end = spec.window(len(items))
    chosen = items[start:end + 1]
    if spec.store is not None:
        return _store(ctx, spec, chosen)
    if not spec.gets:
        return chosen
    return [lookup_pattern(db, get, item) for item in chosen for get in spec.gets]


def _sorted(db: Database, items: list[bytes], spec: SortSpec) -> list[bytes]:
    by = spec.by
    if spec.alpha:
        if by is None:
            return sorted(items, reverse=spec.desc)
        weights = [lookup_pattern(db, by, item) for item in items]
        keyed = [((0, b"") if w is None else (1, w), i) for i, w in enumerate(weights)]
        keyed.sort(key=lambda pair: pair[0], reverse=spec.desc)
        return [items[i] for _, i in keyed]
    scored = []
    for item in items:
        raw = item if by is None else lookup_pattern(db, by, item)
        score = 0.0 if raw is None else strtod(raw)
        if score is None:
            raise ReplyError(NOT_DOUBLE)
        scored.append((score, item))
    scored.sort(reverse=spec.desc)
    return [item for _, item in scored]


def _store(ctx: Ctx, spec: SortSpec, chosen: list[bytes]) -> int:
    db, dest = ctx.db, spec.store
    assert dest is not None
    if spec.gets:
        out = [lookup_pattern(db, get, item) or b"" for item in chosen for get in spec.gets]
    else:
        out = chosen
    if not out:
        if db.delete(dest):
            ctx.notify("g", "del", dest)
            ctx.dirty()
        return 0
    stored = ListValue(out)
    stored.grew(list_fill(ctx.server.settings))
    db.set(dest, stored)
    ctx.notify("l", "sortstore", dest)
    ctx.dirty(len(out))
    return len(out)


def _sort_keys(argv: list[bytes]) -> list[int]:
    """Key positions of SORT: the sorted key and the STORE destination (Redis's sortGetKeys)."""
    positions, store = [1], None
    skip = {b"limit": 2, b"get": 1, b"by": 1}
    i = 2
    while i < len(argv):
        option = argv[i].lower()
        if option == b"store" and i + 1 < len(argv):
            store = i + 1
            i += 1
        else:
            i += skip.get(option, 0)
        i += 1
    if store is not None:
        positions.append(store)
    return positions


@command(
    "SORT", -2, "write denyoom", keys=(1, 1, 1), key_finder=_sort_keys,
    categories="@write @set @sortedset @list @slow @dangerous",
)
def sort(ctx: Ctx, argv: list[bytes]):
    """SORT key [BY pattern] [LIMIT offset count] [GET pattern [GET pattern ...]] [ASC | DESC] [ALPHA] [STORE destination]"""
    return sort_generic(ctx, argv, readonly=False)


@command("SORT_RO", -2, "readonly", keys=(1, 1, 1), key_finder=lambda argv: [1], categories="@read @set @sortedset @list @slow @dangerous", since="7.0.0")
def sort_ro(ctx: Ctx, argv: list[bytes]):
    """SORT_RO key [BY pattern] [LIMIT offset count] [GET pattern [GET pattern ...]] [ASC | DESC] [ALPHA]"""
    return sort_generic(ctx, argv, readonly=True)
