"""``bit`` (LuaBitOp) and ``struct`` (Roberto Ierusalimschy's struct) for scripts, in Python.

lupa's Lua 5.1 has neither. Each function returns a tuple of Lua values or raises
``LuaArgError``; ``LuaState`` turns that into a Lua error at the caller's position, so errors read
``user_script:1: bad argument #1 to 'band' (number expected, got string)`` as in Redis. Lua
strings arrive as ``bytes``, numbers as ``int``/``float``.
"""

from __future__ import annotations

import math
import struct as _struct
from typing import Any

from lupa import lua51

_MASK = 0xFFFFFFFF


def lua_typename(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, bytes):
        return "string"
    return lua51.lua_type(value) or "userdata"


class LuaArgError(Exception):
    """A ``bad argument`` error: the message is complete, ready for Lua."""


def check_number(args: tuple, index: int, fname: str) -> float:
    """luaL_checknumber: numbers and numeric strings; 1-based ``index``."""
    value = args[index - 1] if index <= len(args) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, bytes):
        try:
            return float(value.strip()) if b"x" not in value.lower() else float(int(value, 16))
        except ValueError:
            pass
    got = "no value" if index > len(args) else lua_typename(value)
    raise LuaArgError(f"bad argument #{index} to '{fname}' (number expected, got {got})")


def check_string(args: tuple, index: int, fname: str) -> bytes:
    value = args[index - 1] if index <= len(args) else None
    if isinstance(value, bytes):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (b"%.14g" % value)
    got = "no value" if index > len(args) else lua_typename(value)
    raise LuaArgError(f"bad argument #{index} to '{fname}' (string expected, got {got})")


# -- bit -----------------------------------------------------------------------------------------


def _tobit(value: float) -> int:
    """LuaBitOp's normalization: round half to even, keep the low 32 bits, signed."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return 0
        value = round(value)
    value &= _MASK
    return value - (1 << 32) if value & 0x80000000 else value


def _barg(args: tuple, index: int, fname: str) -> int:
    return _tobit(check_number(args, index, fname)) & _MASK


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 32) if value & 0x80000000 else value


def _fold(fname: str, op):
    def fn(*args):
        result = _barg(args, 1, fname)
        for index in range(2, len(args) + 1):
            result = op(result, _barg(args, index, fname))
        return (_signed(result),)

    fn.__name__ = fname
    return fn


def _shift(fname: str, op):
    def fn(*args):
        value, count = _barg(args, 1, fname), _barg(args, 2, fname) & 31
        return (_signed(op(value, count)),)

    fn.__name__ = fname
    return fn


def _arshift(value: int, count: int) -> int:
    return _signed(value) >> count


def _tohex(*args):
    value = _barg(args, 1, "tohex")
    digits = 8 if len(args) < 2 or args[1] is None else _signed(_barg(args, 2, "tohex"))
    upper = digits < 0
    digits = min(abs(digits), 8)
    text = "%08x" % value
    text = text[8 - digits:] if digits else ""
    return ((text.upper() if upper else text).encode(),)


def make_bit() -> dict[bytes, Any]:
    return {
        b"tobit": lambda *a: (_signed(_barg(a, 1, "tobit")),),
        b"bnot": lambda *a: (_signed(~_barg(a, 1, "bnot")),),
        b"band": _fold("band", lambda x, y: x & y),
        b"bor": _fold("bor", lambda x, y: x | y),
        b"bxor": _fold("bxor", lambda x, y: x ^ y),
        b"lshift": _shift("lshift", lambda v, n: v << n),
        b"rshift": _shift("rshift", lambda v, n: v >> n),
        b"arshift": _shift("arshift", _arshift),
        b"rol": _shift("rol", lambda v, n: (v << n) | (v >> (32 - n)) if n else v),
        b"ror": _shift("ror", lambda v, n: (v >> n) | (v << (32 - n)) if n else v),
        b"bswap": lambda *a: (_signed(int.from_bytes(_barg(a, 1, "bswap").to_bytes(4, "little"), "big")),),
        b"tohex": _tohex,
    }


# -- struct --------------------------------------------------------------------------------------

_SIZES = {"b": 1, "B": 1, "h": 2, "H": 2, "l": 8, "L": 8, "T": 8, "f": 4, "d": 8, "x": 1}
_MAXINTSIZE = 32
_MAXALIGN = 8


class _Format:
    """Walks a struct format: yields (option, size, padding) and tracks endianness/alignment."""

    def __init__(self, fmt: bytes, fname: str) -> None:
        self.fmt = fmt.decode("latin-1")
        self.pos = 0
        self.little = True
        self.align = 1
        self.fname = fname

    def _num(self, default: int) -> int:
        start = self.pos
        while self.pos < len(self.fmt) and self.fmt[self.pos].isdigit():
            self.pos += 1
        return int(self.fmt[start:self.pos]) if self.pos > start else default

    def options(self, offset_of):
        while self.pos < len(self.fmt):
            opt = self.fmt[self.pos]
            self.pos += 1
            size = _SIZES.get(opt, 0)
            if opt == "c":
                size = self._num(1)
            elif opt in "iI":
                size = self._num(4)
                if size > _MAXINTSIZE:
                    raise LuaArgError(f"integral size {size} is larger than limit of {_MAXINTSIZE}")
            if opt in " ><!":
                self._control(opt)
                continue
            if opt not in _SIZES and opt not in "ciIs":
                raise LuaArgError(f"bad argument #1 to '{self.fname}' (invalid format option '{opt}')")
            yield opt, size, self._padding(offset_of(), opt, size)

    def _control(self, opt: str) -> None:
        if opt == ">":
            self.little = False
        elif opt == "<":
            self.little = True
        elif opt == "!":
            align = self._num(_MAXALIGN)
            if align & (align - 1):
                raise LuaArgError(f"alignment {align} is not a power of 2")
            self.align = align

    def _padding(self, offset: int, opt: str, size: int) -> int:
        if size == 0 or opt == "c":
            return 0
        align = min(size, self.align)
        if align & (align - 1):
            raise LuaArgError("alignment is not a power of 2")
        return (align - (offset & (align - 1))) & (align - 1)


def _pack_int(value: float, size: int, little: bool) -> bytes:
    number = int(value)  # C's cast truncates toward zero
    data = (number & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return data if little else data[::-1]


def _pack(*args):
    fmt = _Format(check_string(args, 1, "pack"), "pack")
    out = bytearray()
    arg = 2
    for opt, size, pad in fmt.options(lambda: len(out)):
        out.extend(b"\0" * pad)
        if opt in "bBhHlLTiI":
            out.extend(_pack_int(check_number(args, arg, "pack"), size, fmt.little))
            arg += 1
        elif opt == "x":
            out.extend(b"\0")
        elif opt in "fd":
            code = ("<" if fmt.little else ">") + opt
            out.extend(_struct.pack(code, float(check_number(args, arg, "pack"))))
            arg += 1
        else:  # 'c' and 's'
            data = check_string(args, arg, "pack")
            arg += 1
            size = size or len(data)
            if len(data) < size:
                raise LuaArgError(f"bad argument #{arg} to 'pack' (string too short)")
            out.extend(data[:size] + (b"\0" if opt == "s" else b""))
    return (bytes(out),)


def _unpack_int(data: bytes, little: bool, signed: bool) -> int:
    value = int.from_bytes(data, "little" if little else "big")
    if signed and data and (data[-1 if little else 0] & 0x80):
        value -= 1 << (8 * len(data))
    return value


def _unpack(*args):
    fmt = _Format(check_string(args, 1, "unpack"), "unpack")
    data = check_string(args, 2, "unpack")
    start = int(check_number(args, 3, "unpack")) if len(args) >= 3 and args[2] is not None else 1
    pos = (start if start >= 0 else len(data) + start + 1) - 1
    if pos < 0:
        raise LuaArgError("bad argument #3 to 'unpack' (offset must be 1 or greater)")
    values: list[Any] = []
    state = {"pos": pos}
    for opt, size, pad in fmt.options(lambda: state["pos"]):
        pos = state["pos"] + pad
        if opt == "s":
            end = data.find(b"\0", pos)
            if end < 0:
                raise LuaArgError("unfinished string in data")
            values.append(data[pos:end])
            state["pos"] = end + 1
            continue
        if opt == "c" and size == 0:
            if not values or not isinstance(values[-1], (int, float)):
                raise LuaArgError("format 'c0' needs a previous size")
            size = int(values.pop())
        if pos + size > len(data):
            raise LuaArgError("bad argument #2 to 'unpack' (data string too short)")
        chunk = data[pos:pos + size]
        if opt in "bBhHlLTiI":
            values.append(_unpack_int(chunk, fmt.little, opt.islower()))
        elif opt in "fd":
            values.append(_struct.unpack(("<" if fmt.little else ">") + opt, chunk)[0])
        elif opt == "c":
            values.append(chunk)
        state["pos"] = pos + size
    values.append(state["pos"] + 1)
    return tuple(values)


def _size(*args):
    fmt = _Format(check_string(args, 1, "size"), "size")
    state = {"pos": 0}
    for opt, size, pad in fmt.options(lambda: state["pos"]):
        if opt == "s" or (opt == "c" and size == 0):
            raise LuaArgError("options 'c0' - 's' have undefined sizes")
        state["pos"] += pad + size
    return (state["pos"],)


def make_struct() -> dict[bytes, Any]:
    return {b"pack": _pack, b"unpack": _unpack, b"size": _size}
