"""Redis's DUMP payload format, so values travel between Pion and redis-server (MIGRATE, RESTORE).

A Redis payload is ``[u8 RDB type][RDB value encoding][u16 RDB version][u64 CRC64]`` (little
endian; CRC-64/Jones as Redis's crc64.c, over everything before it). Pion's own payloads
(``pion.storage.serialize``) stay what DUMP and snapshots use between Pions: they are lossless
for what Redis's format cannot carry (hash field TTLs, JSON, vector sets, encodings as they are).

``dump_redis`` writes the Redis types in the plain RDB encodings every Redis since 2.x loads
(string, list, set, ZSET_2 with binary scores, hash) with RDB version 10 (Redis 7.0's, so
7.0 and later accept it); a value Redis's format cannot hold raises ``NotRedisType``.
``load_redis`` reads what Redis 7.0-7.2 DUMP writes: strings (raw, integer, LZF), lists (plain,
quicklist 2 of listpacks), sets (plain, intset, listpack), zsets (ZSET_2, listpack) and hashes
(plain, listpack); the value is encoded as Redis encodes a RESTOREd one (by the ``*-max-*``
thresholds). Streams are not carried in either direction yet (``NotRedisType`` / refused).
"""

from __future__ import annotations

import struct
from typing import Any

from pion.storage.hash_value import HASHTABLE, LISTPACK, HashValue, hash_limits
from pion.storage.list_value import ListValue, list_fill
from pion.storage.serialize import PayloadError
from pion.storage.set_value import SetValue, set_limits
from pion.storage.stream_value import Stream
from pion.storage.zset_value import ZSetValue, zset_limits

RDB_VERSION = 10  # Redis 7.0's; a payload names the version it was written with
MAX_LOAD_VERSION = 11  # Redis 7.2 writes 11 (same value encodings for these types)

T_STRING, T_LIST, T_SET, T_ZSET_2, T_HASH = 0, 1, 2, 5, 4
T_SET_INTSET, T_HASH_LISTPACK, T_ZSET_LISTPACK, T_LIST_QUICKLIST_2, T_SET_LISTPACK = 11, 16, 17, 18, 20
T_STREAMS = (15, 19, 21)

_POLY = 0x95AC9329AC4BC9B5  # CRC-64/Jones, reflected (Redis's crc64.c)


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _table()


def crc64(data: bytes, crc: int = 0) -> int:
    """Redis's crc64 (``crc64(0, "123456789") == 0xe9c6d914c4b8d9ca``)."""
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


class NotRedisType(PayloadError):
    """A value Redis's payload format cannot carry (a Pion-only type, or a hash with field TTLs)."""


# -- writing -------------------------------------------------------------------------------


def _len(n: int) -> bytes:
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if n <= 0xFFFFFFFF:
        return b"\x80" + struct.pack(">I", n)
    return b"\x81" + struct.pack(">Q", n)


def _str(out: list[bytes], value: bytes) -> None:
    out.append(_len(len(value)))
    out.append(value)


def dump_redis(value: Any) -> bytes:
    """``value`` as redis-server's DUMP would write it (plain encodings, RDB version 10)."""
    cls = value.__class__
    out: list[bytes] = []
    if cls is bytes or cls is bytearray:
        out.append(bytes([T_STRING]))
        _str(out, bytes(value))
    elif cls is ListValue:
        out += [bytes([T_LIST]), _len(len(value.items))]
        for item in value.items:
            _str(out, item)
    elif cls is SetValue:
        out += [bytes([T_SET]), _len(len(value.members))]
        for member in value.members:
            _str(out, member)
    elif cls is ZSetValue:
        out += [bytes([T_ZSET_2]), _len(len(value.scores))]
        for member, score in value.scores.items():
            _str(out, member)
            out.append(struct.pack("<d", score))
    elif cls is HashValue:
        if value.ttls:
            raise NotRedisType("a hash with field TTLs (Redis 7.0's format has no field TTLs)")
        out += [bytes([T_HASH]), _len(len(value.fields))]
        for field, item in value.fields.items():
            _str(out, field)
            _str(out, item)
    elif cls is Stream:
        raise NotRedisType("a stream (Pion does not write Redis's stream encoding yet)")
    else:
        raise NotRedisType(f"a Pion {cls.__name__} value (not a Redis type)")
    out.append(struct.pack("<H", RDB_VERSION))
    body = b"".join(out)
    return body + struct.pack("<Q", crc64(body))


# -- reading -------------------------------------------------------------------------------


def is_redis_payload(payload: bytes) -> bool:
    """True when the footer is Redis's: a version this reader knows and a matching CRC64."""
    if len(payload) < 11:
        return False
    (version,) = struct.unpack_from("<H", payload, len(payload) - 10)
    if version > MAX_LOAD_VERSION:
        return False
    (crc,) = struct.unpack_from("<Q", payload, len(payload) - 8)
    return crc in (0, crc64(memoryview(payload)[:-8]))  # 0: written with rdbchecksum no


class _Reader:
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
        back = 1 if size < 128 else 2 if size < 16384 else 3 if size < 2097152 else 4 if size < 268435456 else 5
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


def _pairs(items: list[bytes]) -> list[tuple[bytes, bytes]]:
    if len(items) % 2:
        raise PayloadError("odd listpack")
    return list(zip(items[::2], items[1::2], strict=True))


def load_redis(payload: bytes, settings: object) -> Any:
    """The value of a Redis DUMP payload (checked with ``is_redis_payload`` first)."""
    reader = _Reader(memoryview(payload)[:-10].tobytes())
    kind = reader.byte()
    if kind == T_STRING:
        value: Any = reader.string()
    elif kind in (T_LIST, T_LIST_QUICKLIST_2):
        items: list[bytes] = []
        for _ in range(reader.count()):
            if kind == T_LIST:
                items.append(reader.string())
                continue
            container = reader.length()[0]
            node = reader.string()
            items += [node] if container == 1 else listpack_entries(node)
        value = ListValue(items)
        value.grew(list_fill(settings))
    elif kind in (T_SET, T_SET_INTSET, T_SET_LISTPACK):
        members = ([reader.string() for _ in range(reader.count())] if kind == T_SET
                   else intset_members(reader.string()) if kind == T_SET_INTSET
                   else listpack_entries(reader.string()))
        value = SetValue.from_members(set(members), set_limits(settings))
    elif kind in (T_ZSET_2, T_ZSET_LISTPACK):
        if kind == T_ZSET_2:
            pairs = [(reader.string(), struct.unpack("<d", reader.take(8))[0]) for _ in range(reader.count())]
        else:
            pairs = [(m, float(s)) for m, s in _pairs(listpack_entries(reader.string()))]
        value = ZSetValue.from_pairs(pairs, zset_limits(settings))
    elif kind in (T_HASH, T_HASH_LISTPACK):
        fields = (dict((reader.string(), reader.string()) for _ in range(reader.count())) if kind == T_HASH
                  else dict(_pairs(listpack_entries(reader.string()))))
        entries, longest = hash_limits(settings)
        small = len(fields) <= entries and all(len(f) <= longest and len(v) <= longest for f, v in fields.items())
        value = HashValue(fields, encoding=LISTPACK if small else HASHTABLE)
    elif kind in T_STREAMS:
        raise PayloadError("Redis stream payloads are not supported")
    else:
        raise PayloadError(f"RDB type {kind} is not supported")
    if reader.pos != len(reader.data):
        raise PayloadError("trailing bytes in payload")
    return value
