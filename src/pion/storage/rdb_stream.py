"""Streams in Redis's DUMP payload format (RDB_TYPE_STREAM_LISTPACKS_2, 19, Redis 7.0's; 15 and
21, 7.2's, are read too): entries in listpack nodes keyed by their master ID, then the stream's
length, last ID, first ID, max deleted ID, entries added, and the consumer groups with their
pending entries lists and consumers (t_stream.c, rdb.c).

Each node written holds up to ``NODE_ENTRIES`` entries (stream-node-max-entries' default), its
master entry the node's first entry's fields; an entry with the same fields is written with
Redis's SAMEFIELDS flag. What 7.0's format has no room for is not carried: a consumer's
active-time (7.2) is written as its seen-time's.
"""

from __future__ import annotations

import struct

from pion.storage.rdb_encoding import RdbReader, listpack, listpack_entries, rdb_len, rdb_str
from pion.storage.serialize import PayloadError
from pion.storage.stream_value import Consumer, ConsumerGroup, PendingEntry, Stream

T_STREAM, T_STREAM_2, T_STREAM_3 = 15, 19, 21
NODE_ENTRIES = 100
FLAG_DELETED, FLAG_SAMEFIELDS = 1, 2
U64 = (1 << 64) - 1


def _id(sid: tuple[int, int]) -> bytes:
    return struct.pack(">QQ", *sid)


def _node(entries: list[tuple[tuple[int, int], list[bytes]]]) -> bytes:
    master_id, master_fields = entries[0][0], entries[0][1][0::2]
    items: list = [len(entries), 0, len(master_fields), *master_fields, 0]
    for (ms, seq), flat in entries:
        fields, values = flat[0::2], flat[1::2]
        ms_diff, seq_diff = ms - master_id[0], seq - master_id[1]
        if fields == master_fields:
            items += [FLAG_SAMEFIELDS, ms_diff, seq_diff, *values, len(values) + 3]
        else:
            items += [0, ms_diff, seq_diff, len(fields)]
            for pair in zip(fields, values, strict=True):
                items += pair
            items.append(len(fields) * 2 + 1 + 3)
    return listpack(items)


def dump_stream(stream: Stream, out: list[bytes]) -> None:
    """The body of a type-19 payload (after its type byte)."""
    entries = list(stream.entries.items())
    nodes = [entries[i:i + NODE_ENTRIES] for i in range(0, len(entries), NODE_ENTRIES)]
    out.append(rdb_len(len(nodes)))
    for chunk in nodes:
        rdb_str(out, _id(chunk[0][0]))
        rdb_str(out, _node(chunk))
    first = stream.first_id if entries else (0, 0)
    for n in (len(entries), *stream.last_id, *first, *stream.max_deleted_id, stream.entries_added, len(stream.groups)):
        out.append(rdb_len(n))
    for group in stream.groups.values():
        rdb_str(out, group.name)
        out += [rdb_len(group.last_id[0]), rdb_len(group.last_id[1]),
                rdb_len(U64 if group.entries_read is None else group.entries_read), rdb_len(len(group.pel))]
        for sid, pending in group.pel.items():
            out += [_id(sid), struct.pack("<Q", pending.delivery_time), rdb_len(pending.delivery_count)]
        out.append(rdb_len(len(group.consumers)))
        for consumer in group.consumers.values():
            rdb_str(out, consumer.name)
            out.append(struct.pack("<Q", consumer.seen_time))
            out.append(rdb_len(len(consumer.pending)))
            out += [_id(sid) for sid in consumer.pending]


def _number(reader: RdbReader) -> int:
    n, encoded = reader.length()
    if encoded:
        raise PayloadError("bad stream number")
    return n


def _entries(master: tuple[int, int], blob: bytes) -> list[tuple[tuple[int, int], list[bytes], bool]]:
    items = listpack_entries(blob)
    count, deleted, nfields = int(items[0]), int(items[1]), int(items[2])
    master_fields = items[3:3 + nfields]
    if items[3 + nfields] != b"0":
        raise PayloadError("bad stream master entry")
    pos, out = 4 + nfields, []
    for _ in range(count + deleted):
        flags, ms_diff, seq_diff = int(items[pos]), int(items[pos + 1]), int(items[pos + 2])
        pos += 3
        if flags & FLAG_SAMEFIELDS:
            values = items[pos:pos + nfields]
            flat = [x for pair in zip(master_fields, values, strict=True) for x in pair]
            pos += nfields
        else:
            n = int(items[pos])
            flat = items[pos + 1:pos + 1 + 2 * n]
            pos += 1 + 2 * n
        pos += 1  # lp-count
        out.append(((master[0] + ms_diff, master[1] + seq_diff), flat, bool(flags & FLAG_DELETED)))
    if pos != len(items):
        raise PayloadError("bad stream node")
    return out


def load_stream(reader: RdbReader, kind: int) -> Stream:
    stream = Stream()
    for _ in range(_number(reader)):
        key = reader.string()
        if len(key) != 16:
            raise PayloadError("bad stream node key")
        master = struct.unpack(">QQ", key)
        for sid, flat, deleted in _entries(master, reader.string()):
            if not deleted:
                stream.entries[sid] = flat
    length = _number(reader)
    stream.last_id = (_number(reader), _number(reader))
    if kind >= T_STREAM_2:
        _first = (_number(reader), _number(reader))
        stream.max_deleted_id = (_number(reader), _number(reader))
        stream.entries_added = _number(reader)
    else:
        stream.entries_added = length
    if length != len(stream.entries):
        raise PayloadError("stream length mismatch")
    stream.rebuild_nodes()
    for _ in range(_number(reader)):
        name = reader.string()
        last = (_number(reader), _number(reader))
        if kind >= T_STREAM_2:
            raw = _number(reader)
            entries_read = None if raw == U64 else raw
        else:  # a payload from before Redis 7.0 has no read counter: Redis's rdbLoad estimates it
            entries_read = stream.estimate_distance(last)
        group = stream.groups[name] = ConsumerGroup(name, last, entries_read)
        for _ in range(_number(reader)):
            sid = struct.unpack(">QQ", reader.take(16))
            when = struct.unpack("<Q", reader.take(8))[0]
            group.pel[sid] = PendingEntry(b"", when, _number(reader))
        for _ in range(_number(reader)):
            cname = reader.string()
            seen = struct.unpack("<Q", reader.take(8))[0]
            active = struct.unpack("<Q", reader.take(8))[0] if kind >= T_STREAM_3 else seen  # as 7.2 loads older ones
            consumer = group.consumers[cname] = Consumer(cname, seen, active)
            for _ in range(_number(reader)):
                sid = struct.unpack(">QQ", reader.take(16))
                pending = group.pel.get(sid)
                if pending is None:
                    raise PayloadError("a consumer's pending entry is not in its group's list")
                pending.consumer = cname
                consumer.pending[sid] = pending
    return stream
