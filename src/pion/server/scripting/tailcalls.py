"""Turn the tail calls of a compiled Lua 5.1 chunk into plain calls (OP_TAILCALL -> OP_CALL).

Why: ``redis.call`` must take as many arguments as Redis's does (``redis.call(unpack(t))`` with
up to Lua's C stack, 8,000 values), but lupa refuses a call into Python carrying more than
7,997 (its ``unpack_userdata`` asks ``lua_checkstack`` for two more slots under
LUAI_MAXCSTACK, 8,000, a constant compiled into the bundled Lua). So ``redis.call`` is a small
Lua function of the prelude that hands a long argument list over as a table. A Lua callee in a
tail call (``return redis.call(...)``, the most common form) would erase the script's frame, and
with it the line Redis reports in every error (``script: <sha>, on @user_script:<line>.``);
Redis's ``redis.call`` is a C function, which a tail call never erases. Compiling user code
without tail calls keeps the frame as Redis's does.

``return f(...)`` compiles to ``TAILCALL A B 0`` followed by ``RETURN A 0``; ``CALL A B 0`` then
``RETURN A 0`` is the code Lua emits for ``return (f(...))`` minus the parentheses' truncation:
the same results, one more stack level. The one observable difference: tail recursion deeper
than Lua's 20,000 call levels fails with ``stack overflow`` (docs/compat-differences.md).

The chunk format is lundump.c's: a 12-byte header, then the function prototype, recursively.
"""

from __future__ import annotations

import struct

OP_CALL, OP_TAILCALL = 28, 29
_OP_MASK = 0x3F


class _Reader:
    def __init__(self, data: bytearray) -> None:
        if data[:5] != b"\x1bLua\x51" or data[5] != 0:
            raise ValueError("not a Lua 5.1 binary chunk")
        self.data = data
        order = "<" if data[6] == 1 else ">"
        self.size_int, self.size_t, self.size_ins, self.size_num = data[7], data[8], data[9], data[10]
        self.int_fmt = order + {4: "i", 8: "q"}[self.size_int]
        self.size_fmt = order + {4: "I", 8: "Q"}[self.size_t]
        self.ins_fmt = order + {4: "I", 8: "Q"}[self.size_ins]
        self.pos = 12

    def integer(self) -> int:
        value = struct.unpack_from(self.int_fmt, self.data, self.pos)[0]
        self.pos += self.size_int
        return value

    def string(self) -> None:
        length = struct.unpack_from(self.size_fmt, self.data, self.pos)[0]
        self.pos += self.size_t + length

    def function(self) -> int:
        """Patch one prototype and its children in place; returns how many calls changed."""
        self.string()  # source
        self.pos += 2 * self.size_int + 4  # line defined, last line, nups, params, vararg, stack
        changed = 0
        for _ in range(self.integer()):
            word = struct.unpack_from(self.ins_fmt, self.data, self.pos)[0]
            if word & _OP_MASK == OP_TAILCALL:
                struct.pack_into(self.ins_fmt, self.data, self.pos, (word & ~_OP_MASK) | OP_CALL)
                changed += 1
            self.pos += self.size_ins
        for _ in range(self.integer()):  # constants
            kind = self.data[self.pos]
            self.pos += 1
            if kind == 1:
                self.pos += 1
            elif kind == 3:
                self.pos += self.size_num
            elif kind == 4:
                self.string()
            elif kind != 0:
                raise ValueError(f"unknown constant type {kind}")
        for _ in range(self.integer()):  # nested functions
            changed += self.function()
        lines = self.integer()  # (read first: ``self.pos += self.integer()`` would add to the old pos)
        self.pos += lines * self.size_int  # line info
        for _ in range(self.integer()):  # local variables: name, start pc, end pc
            self.string()
            self.pos += 2 * self.size_int
        for _ in range(self.integer()):  # upvalue names
            self.string()
        return changed


def without_tail_calls(chunk: bytes) -> bytes:
    """The same chunk with every OP_TAILCALL made an OP_CALL (``string.dump`` output in, ready
    for ``loadstring``); raises ValueError on anything that is not a whole Lua 5.1 chunk."""
    data = bytearray(chunk)
    try:
        reader = _Reader(data)
        reader.function()
    except (struct.error, IndexError, KeyError):
        raise ValueError("truncated or malformed Lua chunk") from None
    if reader.pos != len(data):
        raise ValueError("trailing bytes after the Lua chunk")
    return bytes(data)
