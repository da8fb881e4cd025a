"""Redis's DUMP payload format, so values travel between Pion and redis-server (MIGRATE, RESTORE).

A Redis payload is ``[u8 RDB type][RDB value encoding][u16 RDB version][u64 CRC64]`` (little
endian; CRC-64/Jones as Redis's crc64.c, over everything before it). Pion's own payloads
(``pion.storage.serialize``) stay what DUMP and snapshots use between Pions: they are lossless
for what Redis's format cannot carry (hash field TTLs, JSON, vector sets, encodings as they are).

``dump_redis`` writes the Redis types in the plain RDB encodings every Redis since 2.x loads
(string, list, set, ZSET_2 with binary scores, hash) and streams as Redis 7.0 does
(``rdb_stream``), with RDB version 10 (Redis 7.0's, so 7.0 and later accept it); a value
Redis's format cannot hold raises ``NotRedisType``. ``load_redis`` reads what Redis 7.0-7.2
DUMP writes: strings (raw, integer, LZF), lists (plain, quicklist 2 of listpacks), sets (plain,
intset, listpack), zsets (ZSET_2, listpack), hashes (plain, listpack) and streams (15, 19, 21);
the value is encoded as Redis encodes a RESTOREd one (by the ``*-max-*`` thresholds).
"""

from __future__ import annotations

import struct
from typing import Any

from pion.storage.hash_value import HASHTABLE, LISTPACK, HashValue, hash_limits
from pion.storage.list_value import ListValue, list_fill
from pion.storage.rdb_encoding import RdbReader, crc64, intset_members, listpack_entries, rdb_len, rdb_str
from pion.storage.rdb_stream import T_STREAM, T_STREAM_2, T_STREAM_3, dump_stream, load_stream
from pion.storage.serialize import PayloadError
from pion.storage.set_value import SetValue, set_limits
from pion.storage.stream_value import Stream
from pion.storage.zset_value import ZSetValue, zset_limits

RDB_VERSION = 10  # Redis 7.0's; a payload names the version it was written with
MAX_LOAD_VERSION = 11  # Redis 7.2 writes 11 (same value encodings for these types)

T_STRING, T_LIST, T_SET, T_ZSET_2, T_HASH = 0, 1, 2, 5, 4
T_SET_INTSET, T_HASH_LISTPACK, T_ZSET_LISTPACK, T_LIST_QUICKLIST_2, T_SET_LISTPACK = 11, 16, 17, 18, 20
T_STREAMS = (T_STREAM, T_STREAM_2, T_STREAM_3)

class NotRedisType(PayloadError):
    """A value Redis's payload format cannot carry (a Pion-only type, or a hash with field TTLs)."""


# -- writing -------------------------------------------------------------------------------


def dump_redis(value: Any) -> bytes:
    """``value`` as redis-server's DUMP would write it (plain encodings, RDB version 10)."""
    cls = value.__class__
    out: list[bytes] = []
    if cls is bytes or cls is bytearray:
        out.append(bytes([T_STRING]))
        rdb_str(out, bytes(value))
    elif cls is ListValue:
        out += [bytes([T_LIST]), rdb_len(len(value.items))]
        for item in value.items:
            rdb_str(out, item)
    elif cls is SetValue:
        out += [bytes([T_SET]), rdb_len(len(value.members))]
        for member in value.members:
            rdb_str(out, member)
    elif cls is ZSetValue:
        out += [bytes([T_ZSET_2]), rdb_len(len(value.scores))]
        for member, score in value.scores.items():
            rdb_str(out, member)
            out.append(struct.pack("<d", score))
    elif cls is HashValue:
        if value.ttls:
            raise NotRedisType("a hash with field TTLs (Redis 7.0's format has no field TTLs)")
        out += [bytes([T_HASH]), rdb_len(len(value.fields))]
        for field, item in value.fields.items():
            rdb_str(out, field)
            rdb_str(out, item)
    elif cls is Stream:
        out.append(bytes([T_STREAM_2]))
        dump_stream(value, out)
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


def _pairs(items: list[bytes]) -> list[tuple[bytes, bytes]]:
    if len(items) % 2:
        raise PayloadError("odd listpack")
    return list(zip(items[::2], items[1::2], strict=True))


def load_redis(payload: bytes, settings: object) -> Any:
    """The value of a Redis DUMP payload (checked with ``is_redis_payload`` first)."""
    reader = RdbReader(memoryview(payload)[:-10].tobytes())
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
        value = load_stream(reader, kind)
    else:
        raise PayloadError(f"RDB type {kind} is not supported")
    if reader.pos != len(reader.data):
        raise PayloadError("trailing bytes in payload")
    return value
