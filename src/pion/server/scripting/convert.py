"""Redis 7's conversion rules between command replies and Lua values, both ways.

Replies reach a script the way its RESP version (``redis.setresp``, 2 by default) would show them:
in RESP2 a null is ``false``, a map a flat array, a double a bulk string, a boolean 1/0; in RESP3
null is ``nil``, maps/sets/doubles/big numbers/verbatim strings become ``{map=}``, ``{set=}``,
``{double=}``, ``{big_number=}``, ``{verbatim_string={format=,string=}}``, booleans Lua booleans.
Status replies are ``{ok=}``, errors ``{err=}``.

A script's return value becomes a reply: numbers are truncated to integers (out of range: the
minimum 64-bit integer, as C's cast gives), arrays stop at the first nil, ``false`` is a null
(RESP2 scripts) or ``#f`` (RESP3), ``true`` is 1 or ``#t``; the tagged tables above map back to
their reply types. Everything here runs on the loop thread (in the script's greenlet), the only one touching Lua.
"""

from __future__ import annotations

import math
from typing import Any

from lupa import lua51

from pion.protocol.errors import CountedError, ReplyError
from pion.protocol.resp import (
    NULL_ARRAY,
    BigNumber,
    HumanDouble,
    KeyedArrays,
    Pairs,
    Push,
    Replies,
    SetReply,
    Status,
    Verbatim,
    format_double,
)

#: the field Redis's error tables carry for an error its stats already hold
IGNORE_STATS = b"ignore_error_stats_update"

INT_MIN = -(1 << 63)
INT_MAX = (1 << 63) - 1
#: values fetched per call when reading a Lua array (unpack is bounded by the C stack)
CHUNK = 4000
#: nesting of a script's reply past which Redis answers "reached lua stack limit" (ours: the
#: Python stack of the converter)
MAX_DEPTH = 400


def lua_number_to_int(value: float) -> int:
    """C's ``(long long)double``: truncation; NaN, infinities and overflow give INT_MIN."""
    if value.__class__ is int:
        return value if INT_MIN <= value <= INT_MAX else INT_MIN
    if math.isnan(value) or math.isinf(value):
        return INT_MIN
    number = int(value)
    return number if INT_MIN <= number <= INT_MAX else INT_MIN


# -- replies to Lua ------------------------------------------------------------------------------


class ToLua:
    """Converts command replies for one Lua state (``table`` builds tables there)."""

    def __init__(self, lua: Any) -> None:
        self.lua = lua
        self.table = lua.table_from

    def tagged(self, tag: bytes, value: Any) -> Any:
        return self.table({tag: value})

    def error(self, message: str, counted: bool = False) -> Any:
        """The ``{err = ...}`` table; ``counted``: the error is already in the stats (a command's),
        marked as Redis marks it (``ignore_error_stats_update``)."""
        fields: dict[bytes, Any] = {b"err": message.encode("utf-8", "surrogateescape")}
        if counted:
            fields[IGNORE_STATS] = True
        return self.table(fields)

    def convert(self, value: Any, resp: int) -> Any:  # noqa: C901 - one switch over reply types
        cls = value.__class__
        if cls is bytes:
            return value
        if cls is int:
            return value if INT_MIN <= value <= INT_MAX else float(value)
        if value is None or value is NULL_ARRAY:
            return None if resp == 3 else False
        if cls is Status:
            return self.tagged(b"ok", value.encode())
        if cls is list or cls is tuple or cls is Push or cls is Replies:
            return self.table([self.convert(item, resp) for item in value])
        if isinstance(value, ReplyError):
            return self.error(value.message, value.__class__ is CountedError)
        if cls is bool:
            return value if resp == 3 else int(value)
        if cls is float:
            return self.tagged(b"double", value) if resp == 3 else format_double(value)
        if cls is dict or cls is KeyedArrays:
            return self._map(value, resp, cls is KeyedArrays)
        if cls is set or cls is frozenset or cls is SetReply:
            if resp == 3:
                return self.tagged(b"set", self.table({self.convert(item, resp): True for item in value}))
            return self.table([self.convert(item, resp) for item in value])
        if cls is Pairs:
            if resp == 3:
                return self.table([self.table([self.convert(a, resp), self.convert(b, resp)]) for a, b in value])
            return self.table([self.convert(item, resp) for pair in value for item in pair])
        if cls is BigNumber:
            text = str(int(value)).encode()
            return self.tagged(b"big_number", text) if resp == 3 else text
        if cls is HumanDouble:
            return self.tagged(b"double", float(value)) if resp == 3 else bytes(value)
        if cls is Verbatim:
            data = value.encode()
            if resp == 3:
                return self.tagged(b"verbatim_string", self.table({b"format": b"txt", b"string": data}))
            return data
        if cls is bytearray or cls is memoryview:
            return bytes(value)
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, int):
            return int(value)
        if isinstance(value, (list, tuple)):
            return self.table([self.convert(item, resp) for item in value])
        return None if resp == 3 else False

    def _map(self, value: dict, resp: int, keyed: bool) -> Any:
        if resp == 3:
            inner = self.table({self.convert(k, resp): self.convert(v, resp) for k, v in value.items()})
            return self.tagged(b"map", inner)
        if keyed:
            return self.table([self.table([self.convert(k, resp), self.convert(v, resp)]) for k, v in value.items()])
        return self.table([self.convert(item, resp) for pair in value.items() for item in pair])


# -- Lua to replies ------------------------------------------------------------------------------


class ToReply:
    """Converts a script's return value, using the prelude's ``classify``/``slice`` helpers."""

    def __init__(self, api: Any) -> None:
        self.classify = api.classify
        self.slice = api.slice

    def items(self, table: Any, count: int) -> list[Any]:
        out: list[Any] = []
        for start in range(1, count + 1, CHUNK):
            end = min(start + CHUNK - 1, count)
            got = self.slice(table, start, end)
            if start == end:
                out.append(got)
            else:
                out.extend(got)
        return out

    def convert(self, value: Any, resp: int, depth: int = 0) -> Any:  # noqa: C901 - one switch over Lua types
        cls = value.__class__
        if cls is bytes:
            return value
        if cls is int or cls is float:
            return lua_number_to_int(value)
        if cls is bool:
            if resp == 3:
                return value
            return 1 if value else None
        if value is None or lua51.lua_type(value) != "table":
            return None
        if depth >= MAX_DEPTH:
            return ReplyError("ERR reached lua stack limit")
        depth += 1
        kind, first, *rest = self.classify(value)
        if kind == 8:  # array, up to the first nil
            return [self.convert(item, resp, depth) for item in self.items(first, rest[0])]
        if kind == 1:
            return error_class(value)(first.decode("utf-8", "replace"))
        if kind == 2:
            return Status(first.decode("utf-8", "replace").replace("\r", " ").replace("\n", " "))
        if kind == 3:
            return float(first)
        if kind == 4:
            return _big_number(first)
        if kind == 5:
            return _verbatim(first)
        if kind == 6:
            flat = self.items(first, rest[0])
            return {
                _hashable(self.convert(flat[i], resp, depth)): self.convert(flat[i + 1], resp, depth)
                for i in range(0, len(flat), 2)
            }
        return SetReply(self.convert(item, resp, depth) for item in self.items(first, rest[0]))


def _big_number(text: bytes) -> Any:
    cleaned = text.replace(b"\r", b" ").replace(b"\n", b" ")
    try:
        return BigNumber(int(cleaned))
    except ValueError:
        return cleaned


def _verbatim(text: bytes) -> Any:
    try:
        return Verbatim(text.decode("utf-8"))
    except UnicodeDecodeError:
        return text


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, (dict, SetReply)):
        return repr(value).encode()
    return value


def error_class(table: Any) -> type[ReplyError]:
    """CountedError for an error table marked ``ignore_error_stats_update``, else ReplyError."""
    return CountedError if table[IGNORE_STATS] else ReplyError


def error_reply(fields: tuple, script_name: str, cls: type[ReplyError] = ReplyError) -> ReplyError:
    """The reply for a script's uncaught error: ``<err> script: <name>, on <source>:<line>.``"""
    message, source, line = fields
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else "ERR unknown error"
    if source is not None and line is not None:
        src = source.decode("utf-8", "replace") if isinstance(source, bytes) else str(source)
        text += f" script: {script_name}, on {src}:{lua_number_to_int(line) if not isinstance(line, bytes) else line.decode()}."
    return cls(text)
