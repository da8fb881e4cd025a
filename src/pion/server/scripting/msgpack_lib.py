"""``cmsgpack`` for scripts (lua-cmsgpack 0.4 as bundled with Redis), in Python.

Encoding follows lua-cmsgpack's choices byte for byte: integral numbers take the smallest integer
form, other numbers float32 when that is exact, else float64; a table is an array when its keys
are exactly 1..n, a map otherwise; tables nested deeper than 16 become nil. Decoding builds Lua
tables directly (map keys may themselves be tables); input nested deeper than
``MAX_DECODE_DEPTH`` is refused with lua-cmsgpack's stack-overflow error instead of recursing
past Python's stack.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from lupa import lua51

from pion.server.scripting.libs import LuaArgError, check_number, check_string

MAX_NESTING = 16
#: arrays and maps nested deeper than this in ``unpack``'s input are refused (Redis's bundled
#: lua-cmsgpack stops where the Lua stack does; ours is the Python stack)
MAX_DECODE_DEPTH = 200


class _Missing(Exception):
    pass


class _BadFormat(Exception):
    pass


def _encode_int(n: int, out: bytearray) -> None:
    if n >= 0:
        if n < 128:
            out.append(n)
        elif n < 0x100:
            out += b"\xcc" + n.to_bytes(1, "big")
        elif n < 0x10000:
            out += b"\xcd" + n.to_bytes(2, "big")
        elif n < 0x100000000:
            out += b"\xce" + n.to_bytes(4, "big")
        else:
            out += b"\xcf" + (n & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")
    elif n >= -32:
        out.append(n & 0xFF)
    elif n >= -128:
        out += b"\xd0" + n.to_bytes(1, "big", signed=True)
    elif n >= -32768:
        out += b"\xd1" + n.to_bytes(2, "big", signed=True)
    elif n >= -(1 << 31):
        out += b"\xd2" + n.to_bytes(4, "big", signed=True)
    else:
        out += b"\xd3" + max(n, -(1 << 63)).to_bytes(8, "big", signed=True)


def _encode_number(value: float, out: bytearray) -> None:
    """Integral numbers as integers, else float32 when exact, else float64 (lua-cmsgpack)."""
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            _encode_int(value, out)
            return
        value = float(value)
    if not math.isinf(value) and value == value and -(2.0**63) <= value < 2.0**63 and float(int(value)) == value:
        _encode_int(int(value), out)
        return
    try:
        single = struct.unpack(">f", struct.pack(">f", value))[0]
    except OverflowError:
        single = None
    if single is not None and single == value:
        out += b"\xca" + struct.pack(">f", value)
    else:
        out += b"\xcb" + struct.pack(">d", value)


def _encode_bytes(data: bytes, out: bytearray) -> None:
    size = len(data)
    if size < 32:
        out.append(0xA0 | size)
    elif size < 0x100:
        out += b"\xd9" + bytes([size])
    elif size < 0x10000:
        out += b"\xda" + size.to_bytes(2, "big")
    else:
        out += b"\xdb" + size.to_bytes(4, "big")
    out += data


def _header(count: int, fix: int, small: int, out: bytearray) -> None:
    if count < 16:
        out.append(fix | count)
    elif count < 0x10000:
        out += bytes([small]) + count.to_bytes(2, "big")
    else:
        out += bytes([small + 1]) + count.to_bytes(4, "big")


def _encode(value: Any, out: bytearray, level: int) -> None:
    if value is None:
        out.append(0xC0)
    elif value is True:
        out.append(0xC3)
    elif value is False:
        out.append(0xC2)
    elif isinstance(value, (int, float)):
        _encode_number(value, out)
    elif isinstance(value, bytes):
        _encode_bytes(value, out)
    elif lua51.lua_type(value) == "table":
        if level >= MAX_NESTING:
            out.append(0xC0)
            return
        items = list(value.items())
        keys = [k for k, _ in items]
        is_array = all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in keys) and (
            not keys or max(keys) == len(keys)
        )
        if is_array:
            _header(len(items), 0x90, 0xDC, out)
            for _, item in sorted(items, key=lambda kv: kv[0]):
                _encode(item, out, level + 1)
        else:
            _header(len(items), 0x80, 0xDE, out)
            for key, item in items:
                _encode(key, out, level + 1)
                _encode(item, out, level + 1)
    else:
        out.append(0xC0)  # functions, userdata, threads: nil, as lua-cmsgpack


class Decoder:
    """Decodes one value at a time from ``data`` into Lua values of ``lua``."""

    def __init__(self, lua: Any, data: bytes, pos: int) -> None:
        self.lua = lua
        self.data = data
        self.pos = pos
        self.depth = 0

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise _Missing
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def value(self) -> Any:  # noqa: C901 - one switch over the format byte
        byte = self.uint(1)
        if byte < 0x80:
            return byte
        if byte >= 0xE0:
            return byte - 0x100
        if 0xA0 <= byte <= 0xBF:
            return self.take(byte & 0x1F)
        if 0x90 <= byte <= 0x9F:
            return self.array(byte & 0x0F)
        if 0x80 <= byte <= 0x8F:
            return self.map(byte & 0x0F)
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if byte in simple:
            return simple[byte]
        if byte in (0xCC, 0xCD, 0xCE, 0xCF):
            number = self.uint(1 << (byte - 0xCC))
            return number if number < (1 << 63) else float(number)
        if byte in (0xD0, 0xD1, 0xD2, 0xD3):
            return int.from_bytes(self.take(1 << (byte - 0xD0)), "big", signed=True)
        if byte == 0xCA:
            return struct.unpack(">f", self.take(4))[0]
        if byte == 0xCB:
            return struct.unpack(">d", self.take(8))[0]
        if byte in (0xD9, 0xC4):
            return self.take(self.uint(1))
        if byte in (0xDA, 0xC5):
            return self.take(self.uint(2))
        if byte in (0xDB, 0xC6):
            return self.take(self.uint(4))
        if byte in (0xDC, 0xDD):
            return self.array(self.uint(2 if byte == 0xDC else 4))
        if byte in (0xDE, 0xDF):
            return self.map(self.uint(2 if byte == 0xDE else 4))
        raise _BadFormat

    def nest(self, where: str) -> None:
        self.depth += 1
        if self.depth > MAX_DECODE_DEPTH:
            raise LuaArgError(f"stack overflow (in function {where})")

    def array(self, count: int) -> Any:
        self.nest("mp_decode_to_lua_array")
        items = [self.value() for _ in range(count)]
        self.depth -= 1
        return self.lua.table_from(items)

    def map(self, count: int) -> Any:
        self.nest("mp_decode_to_lua_hash")
        table = self.lua.table()
        for _ in range(count):
            key = self.value()
            item = self.value()
            if key is not None:
                table[key] = item
        self.depth -= 1
        return table


def make_cmsgpack(lua: Any) -> dict[bytes, Any]:
    def pack(*args):
        if not args:
            raise LuaArgError("MessagePack pack needs input.")
        out = bytearray()
        for value in args:
            _encode(value, out, 0)
        return (bytes(out),)

    def unpack_full(data: bytes, limit: int, offset: int, decode_all: bool) -> tuple:
        if offset < 0 or limit < 0:
            raise LuaArgError(f"Invalid request to unpack with offset of {offset} and limit of {len(data)}.")
        if offset > len(data):
            raise LuaArgError(f"Start offset {offset} greater than input length {len(data)}.")
        decoder = Decoder(lua, data, offset)
        values = []
        try:
            while decoder.pos < len(data) and (decode_all or len(values) < limit):
                values.append(decoder.value())
        except _Missing:
            raise LuaArgError("Missing bytes in input.") from None
        except _BadFormat:
            raise LuaArgError("Bad data format in input.") from None
        if decode_all:
            return tuple(values)
        return (-1 if decoder.pos >= len(data) else decoder.pos, *values)

    def unpack(*args):
        return unpack_full(check_string(args, 1, "unpack"), 0, 0, True)

    def unpack_one(*args):
        offset = int(check_number(args, 2, "unpack_one")) if len(args) > 1 and args[1] is not None else 0
        return unpack_full(check_string(args, 1, "unpack_one"), 1, offset, False)

    def unpack_limit(*args):
        limit = int(check_number(args, 2, "unpack_limit"))
        offset = int(check_number(args, 3, "unpack_limit")) if len(args) > 2 and args[2] is not None else 0
        return unpack_full(check_string(args, 1, "unpack_limit"), limit, offset, limit == 0)

    return {
        b"pack": pack, b"unpack": unpack, b"unpack_one": unpack_one, b"unpack_limit": unpack_limit,
        b"_NAME": b"cmsgpack", b"_VERSION": b"lua-cmsgpack 0.4.0",
        b"_COPYRIGHT": b"Copyright (C) 2012, Salvatore Sanfilippo",
        b"_DESCRIPTION": b"MessagePack C implementation for Lua",
    }
