"""Function libraries (FUNCTION LOAD/DELETE/FLUSH/LIST/DUMP/RESTORE) and their payload format.

A library is its source (``#!lua name=<lib>`` first line); loading runs the body in the FUNCTION
Lua state's load environment, where only ``redis.register_function``/``redis.log`` exist.
Library names are case-sensitive, function names are not (as Redis's dicts).

FUNCTION DUMP writes Redis's own payload: per library the RDB opcode 245 and the code as an RDB
string, then the RDB version (10) and the CRC64 (Jones) of all before, little-endian; RESTORE also
reads LZF-compressed and integer-encoded strings, so payloads move between Redis 7 and Pion.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lupa import lua51

from pion.protocol.errors import ProtocolError, ReplyError
from pion.protocol.inline import split_inline
from pion.protocol.resp import SetReply, Status
from pion.storage.glob import glob_match

if TYPE_CHECKING:
    from pion.server.scripting.runtime import LuaState

LOAD_TIMEOUT = 0.5
OPCODE_FUNCTION2 = 245
OPCODE_FUNCTION_PRE_GA = 246
RDB_VERSION = 10
MAX_RDB_VERSION = 12
BAD_NAME = "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"


@dataclass(eq=False)
class Function:
    name: str
    fn: Any
    flags: list[str]
    description: bytes | None
    library: Library


@dataclass(eq=False)
class Library:
    name: str
    code: bytes
    functions: dict[str, Function] = field(default_factory=dict)


def valid_name(name: str) -> bool:
    return bool(name) and all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in name)


def parse_shebang(code: bytes) -> tuple[str, list[str], int]:
    """(engine, options, length of the shebang line) of ``#!<engine> opt=...``; raises ReplyError."""
    if not code.startswith(b"#!"):
        raise ReplyError("ERR Missing library metadata")
    end = code.find(b"\n")
    if end < 0:
        raise ReplyError("ERR Invalid library metadata")
    # Redis splits it with sdssplitargs (as an inline command): a backslash outside quotes is
    # an ordinary character, so ``name=bad\0name`` is a bad name, not ``bad0name``.
    try:
        parts = [part.decode("utf-8", "surrogateescape") for part in split_inline(code[:end])]
    except ProtocolError:
        parts = []
    if not parts:
        raise ReplyError("ERR Invalid library metadata")
    return parts[0][2:], parts[1:], end


def library_metadata(code: bytes) -> tuple[str, str, int]:
    engine, options, end = parse_shebang(code)
    name = None
    for option in options:
        if option[:5].lower() == "name=":
            if name is not None:
                raise ReplyError("ERR Invalid metadata value, name argument was given multiple times")
            name = option[5:]
            continue
        raise ReplyError(f"ERR Invalid metadata value given: {option}")
    if name is None:
        raise ReplyError("ERR Library name was not given")
    return engine, name, end


class Libraries:
    """All loaded libraries and the function index (lower-cased names)."""

    def __init__(self, state_factory: Any) -> None:
        self._state_factory = state_factory
        self.libraries: dict[str, Library] = {}
        self.functions: dict[str, Function] = {}

    @property
    def state(self) -> LuaState:
        return self._state_factory()

    def compile(self, code: bytes, replace: bool = True) -> Library:
        """Build a library from its code (not yet installed); raises ReplyError."""
        engine, name, end = library_metadata(code)
        if not valid_name(name):
            raise ReplyError(BAD_NAME)
        if engine.lower() != "lua":
            raise ReplyError(f"ERR Engine '{engine}' not found")
        if not replace and name in self.libraries:
            raise ReplyError(f"ERR Library '{name}' already exists")
        try:
            return self._build(code, name, end)
        except lua51.LuaError as exc:  # never expected: the prelude catches errors in Lua
            raise ReplyError(f"ERR Error registering functions: {exc}") from None

    def _build(self, code: bytes, name: str, end: int) -> Library:
        state = self.state
        chunk, error = state.compile(code[end:], b"@user_function")
        if chunk is None:
            raise ReplyError(f"ERR Error compiling function: {error}")
        ok, result = state.load_library(chunk, time.monotonic() + LOAD_TIMEOUT)
        if not ok:
            raise ReplyError(f"ERR Error registering functions: {result}")
        library = Library(name, code)
        for fname, fn, flags, desc in result:
            text = fname.decode("utf-8", "surrogateescape")
            library.functions[text.lower()] = Function(text, fn, flags, desc, library)
        if not library.functions:
            raise ReplyError("ERR No functions registered")
        return library

    def load(self, code: bytes, replace: bool) -> str:
        """FUNCTION LOAD: returns the library name."""
        library = self.compile(code, replace)
        self.install([library], replace=True)
        return library.name

    def install(self, libraries: list[Library], replace: bool) -> None:
        """Add libraries atomically: every collision is checked before anything changes."""
        replaced = {lib.name for lib in libraries if lib.name in self.libraries}
        if replaced and not replace:  # only RESTORE gets here; Redis's libraryJoin leaves out the quotes
            raise ReplyError(f"ERR Library {sorted(replaced)[0]} already exists")
        seen: set[str] = set()
        for library in libraries:
            for key, function in library.functions.items():
                existing = self.functions.get(key)
                if key in seen or (existing is not None and existing.library.name not in replaced):
                    raise ReplyError(f"ERR Function {function.name} already exists")
                seen.add(key)
        for name in replaced:
            self.delete(name)
        for library in libraries:
            self.libraries[library.name] = library
            self.functions.update(library.functions)

    def delete(self, name: str) -> None:
        library = self.libraries.pop(name, None)
        if library is None:
            raise ReplyError("ERR Library not found")
        for key in library.functions:
            self.functions.pop(key, None)

    def flush(self) -> None:
        self.libraries.clear()
        self.functions.clear()

    def get(self, name: bytes) -> Function | None:
        return self.functions.get(name.decode("utf-8", "surrogateescape").lower())

    # -- FUNCTION LIST / STATS -------------------------------------------------------------------

    def listing(self, pattern: bytes | None, withcode: bool) -> list[dict[bytes, Any]]:
        out = []
        for library in self.libraries.values():
            name = library.name.encode("utf-8", "surrogateescape")
            if pattern is not None and not glob_match(pattern, name, nocase=True):
                continue
            entry: dict[bytes, Any] = {b"library_name": name, b"engine": b"LUA", b"functions": [
                {b"name": fn.name.encode("utf-8", "surrogateescape"), b"description": fn.description,
                 b"flags": SetReply(Status(flag) for flag in fn.flags)}
                for fn in library.functions.values()
            ]}
            if withcode:
                entry[b"library_code"] = library.code
            out.append(entry)
        return out

    # -- DUMP / RESTORE ----------------------------------------------------------------------------

    def dump(self) -> bytes:
        out = bytearray()
        for library in self.libraries.values():
            out.append(OPCODE_FUNCTION2)
            out += _encode_length(len(library.code)) + library.code
        out += RDB_VERSION.to_bytes(2, "little")
        return bytes(out) + crc64(bytes(out)).to_bytes(8, "little")

    def restore(self, payload: bytes, policy: str) -> None:
        """FUNCTION RESTORE with APPEND, REPLACE or FLUSH; nothing changes on error."""
        codes = parse_payload(payload)
        libraries: list[Library] = []
        names: set[str] = set()
        for code in codes:
            library = self.compile(code)
            if library.name in names:
                raise ReplyError(f"ERR Library '{library.name}' already exists")
            names.add(library.name)
            libraries.append(library)
        if policy == "flush":
            saved = self.libraries.copy(), self.functions.copy()
            self.flush()
            try:
                self.install(libraries, replace=False)
            except ReplyError:
                self.libraries, self.functions = saved
                raise
            return
        self.install(libraries, replace=policy == "replace")


# -- the payload ----------------------------------------------------------------------------------


def _encode_length(length: int) -> bytes:
    if length < 64:
        return bytes([length])
    if length < 16384:
        return bytes([0x40 | (length >> 8), length & 0xFF])
    if length <= 0xFFFFFFFF:
        return b"\x80" + length.to_bytes(4, "big")
    return b"\x81" + length.to_bytes(8, "big")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise ReplyError("ERR DUMP payload version or checksum are wrong")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def length(self) -> tuple[int, bool]:
        first = self.take(1)[0]
        kind = first >> 6
        if kind == 0:
            return first & 0x3F, False
        if kind == 1:
            return ((first & 0x3F) << 8) | self.take(1)[0], False
        if kind == 2:
            size = 4 if first == 0x80 else 8
            return int.from_bytes(self.take(size), "big"), False
        return first & 0x3F, True

    def string(self) -> bytes:
        length, encoded = self.length()
        if not encoded:
            return self.take(length)
        if length in (0, 1, 2):
            return str(int.from_bytes(self.take(1 << length), "little", signed=True)).encode()
        if length == 3:
            compressed, _ = self.length()
            size, _ = self.length()
            return lzf_decompress(self.take(compressed), size)
        raise ReplyError("ERR DUMP payload version or checksum are wrong")


def parse_payload(payload: bytes) -> list[bytes]:
    if len(payload) < 10:
        raise ReplyError("ERR DUMP payload version or checksum are wrong")
    body, version, crc = payload[:-10], payload[-10:-8], payload[-8:]
    if int.from_bytes(version, "little") > MAX_RDB_VERSION:
        raise ReplyError("ERR DUMP payload version or checksum are wrong")
    if crc != b"\0" * 8 and crc64(payload[:-8]).to_bytes(8, "little") != crc:
        raise ReplyError("ERR DUMP payload version or checksum are wrong")
    reader = _Reader(body)
    codes = []
    while reader.pos < len(body):
        opcode = reader.take(1)[0]
        if opcode == OPCODE_FUNCTION_PRE_GA:
            raise ReplyError("ERR Pre-GA function format not supported")
        if opcode != OPCODE_FUNCTION2:
            raise ReplyError("ERR given type is not a function")
        codes.append(reader.string())
    return codes


def lzf_decompress(data: bytes, size: int) -> bytes:
    out = bytearray()
    i = 0
    while i < len(data):
        ctrl = data[i]
        i += 1
        if ctrl < 32:
            out += data[i:i + ctrl + 1]
            i += ctrl + 1
            continue
        length = ctrl >> 5
        if length == 7:
            length += data[i]
            i += 1
        ref = len(out) - ((ctrl & 0x1F) << 8) - data[i] - 1
        i += 1
        if ref < 0:
            raise ReplyError("ERR DUMP payload version or checksum are wrong")
        for _ in range(length + 2):
            out.append(out[ref])
            ref += 1
    if len(out) != size:
        raise ReplyError("ERR DUMP payload version or checksum are wrong")
    return bytes(out)


def _crc64_table() -> list[int]:
    poly = 0x95AC9329AC4BC9B5  # Jones polynomial, reflected
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64 = _crc64_table()


def crc64(data: bytes, crc: int = 0) -> int:
    """Redis's crc64 (Jones, reflected, no final xor)."""
    table = _CRC64
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc
