"""The low-level pieces of Redis's RDB value encoding that DUMP payloads use (``rdb_payload``,
``rdb_stream``): CRC-64/Jones, lengths, strings (integer and LZF forms), listpacks, intsets."""

from __future__ import annotations

import struct

from pion.storage.crc64 import crc64
from pion.storage.serialize import PayloadError

__all__ = ["crc64"]  # re-exported for rdb_payload

def rdb_len(n: int) -> bytes:
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if n <= 0xFFFFFFFF:
        return b"\x80" + struct.pack(">I", n)
    return b"\x81" + struct.pack(">Q", n)


def rdb_str(out: list[bytes], value: bytes) -> None:
    out.append(rdb_len(len(value)))
    out.append(value)


class RdbReader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise PayloadError("truncated payload")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def length(self) -> tuple[int, bool]:
        """(length, encoded): ``encoded`` when the top bits say 11 (a special string encoding)."""
        first = self.byte()
        kind = first >> 6
        if kind == 0:
            return first & 0x3F, False
        if kind == 1:
            return ((first & 0x3F) << 8) | self.byte(), False
        if kind == 3:
            return first & 0x3F, True
        if first == 0x80:
            return struct.unpack(">I", self.take(4))[0], False
        if first == 0x81:
            return struct.unpack(">Q", self.take(8))[0], False
        raise PayloadError("bad length encoding")

    def count(self) -> int:
        n, encoded = self.length()
        if encoded or n == 0:
            raise PayloadError("bad element count")
        return n

    def string(self) -> bytes:
        n, encoded = self.length()
        if not encoded:
            return self.take(n)
        if n == 0:
            return b"%d" % struct.unpack("<b", self.take(1))[0]
        if n == 1:
            return b"%d" % struct.unpack("<h", self.take(2))[0]
        if n == 2:
            return b"%d" % struct.unpack("<i", self.take(4))[0]
        if n == 3:
            compressed, _ = self.length()
            size, _ = self.length()
            return lzf_decompress(self.take(compressed), size)
        raise PayloadError("unknown string encoding")


def lzf_decompress(data: bytes, size: int) -> bytes:
    """liblzf's lzf_decompress (Redis compresses strings over 20 bytes when rdbcompression yes)."""
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        ctrl = data[i]
        i += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            end = i + ctrl + 1
            if end > n:
                raise PayloadError("bad LZF data")
            out += data[i:end]
            i = end
            continue
        length = ctrl >> 5
        if length == 7:
            if i >= n:
                raise PayloadError("bad LZF data")
            length += data[i]
            i += 1
        if i >= n:
            raise PayloadError("bad LZF data")
        ref = len(out) - ((ctrl & 0x1F) << 8) - data[i] - 1
        i += 1
        if ref < 0:
            raise PayloadError("bad LZF back reference")
        for k in range(length + 2):  # byte by byte: the copy may overlap what it writes
            out.append(out[ref + k])
    if len(out) != size:
        raise PayloadError("LZF length mismatch")
    return bytes(out)


def listpack_entries(blob: bytes) -> list[bytes]:
    """The entries of one listpack (integers as their decimal text, as Redis returns them)."""
    if len(blob) < 7 or blob[-1] != 0xFF or struct.unpack_from("<I", blob)[0] != len(blob):
        raise PayloadError("bad listpack")
    out: list[bytes] = []
    pos, end = 6, len(blob) - 1
    while pos < end:
        first = blob[pos]
        if first < 0x80:
            value, size = b"%d" % first, 1
        elif first < 0xC0:
            n = first & 0x3F
            value, size = blob[pos + 1:pos + 1 + n], 1 + n
        elif first < 0xE0:
            raw = ((first & 0x1F) << 8) | blob[pos + 1]
            value, size = b"%d" % (raw - (1 << 13) if raw >= 1 << 12 else raw), 2
        elif first < 0xF0:
            n = ((first & 0x0F) << 8) | blob[pos + 1]
            value, size = blob[pos + 2:pos + 2 + n], 2 + n
        elif first == 0xF0:
            n = struct.unpack_from("<I", blob, pos + 1)[0]
            value, size = blob[pos + 5:pos + 5 + n], 5 + n
        elif first in (0xF1, 0xF2, 0xF3, 0xF4):
            width = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}[first]
            value = b"%d" % int.from_bytes(blob[pos + 1:pos + 1 + width], "little", signed=True)
            size = 1 + width
        else:
            raise PayloadError("bad listpack entry")
        back = _backlen_size(size)
        pos += size + back
        if pos > end:
            raise PayloadError("bad listpack")
        out.append(bytes(value))
    if len(out) != struct.unpack_from("<H", blob, 4)[0] and struct.unpack_from("<H", blob, 4)[0] != 0xFFFF:
        raise PayloadError("listpack count mismatch")
    return out


def intset_members(blob: bytes) -> list[bytes]:
    if len(blob) < 8:
        raise PayloadError("bad intset")
    width, count = struct.unpack_from("<II", blob)
    fmt = {2: "h", 4: "i", 8: "q"}.get(width)
    if fmt is None or len(blob) != 8 + width * count:
        raise PayloadError("bad intset")
    return [b"%d" % v for v in struct.unpack_from(f"<{count}{fmt}", blob, 8)]


def _backlen_size(size: int) -> int:
    """Bytes of an entry's back-length (listpack.c lpEncodeBacklen)."""
    return 1 if size <= 127 else 2 if size < 16383 else 3 if size < 2097151 else 4 if size < 268435455 else 5


def _backlen(size: int) -> bytes:
    n = _backlen_size(size)
    if n == 1:
        return bytes([size])
    groups = [(size >> (7 * k)) & 127 for k in range(n)]  # least significant first
    return bytes([groups[-1]] + [g | 128 for g in reversed(groups[:-1])])


def _lp_entry(item: bytes | int) -> bytes:
    if item.__class__ is int:
        v = item
        if 0 <= v <= 127:
            enc = bytes([v])
        elif -4096 <= v <= 4095:
            u = v & 0x1FFF
            enc = bytes([0xC0 | (u >> 8), u & 0xFF])
        else:
            width, tag = next((w, t) for w, t in ((2, 0xF1), (3, 0xF2), (4, 0xF3), (8, 0xF4))
                              if -(1 << (8 * w - 1)) <= v < (1 << (8 * w - 1)))
            enc = bytes([tag]) + v.to_bytes(width, "little", signed=True)
    else:
        data = bytes(item)  # type: ignore[arg-type]
        n = len(data)
        if n < 64:
            enc = bytes([0x80 | n]) + data
        elif n < 4096:
            enc = bytes([0xE0 | (n >> 8), n & 0xFF]) + data
        else:
            enc = b"\xf0" + struct.pack("<I", n) + data
    return enc + _backlen(len(enc))


def listpack(items: list) -> bytes:
    """A listpack of ``items`` (ints encoded as integers, bytes as strings), as listpack.c writes it."""
    body = b"".join(_lp_entry(item) for item in items)
    total = 6 + len(body) + 1
    return struct.pack("<IH", total, min(len(items), 0xFFFF)) + body + b"\xff"
