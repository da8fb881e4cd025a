"""The stream type: entries ordered by ID, consumer groups, pending entries lists.

IDs are ``(ms, seq)`` tuples of unsigned 64-bit integers. Entries live in a ``SortedDict`` so
ranges are O(log n + k). Storage never imports the server: parsing IDs from arguments and the
error texts live here because they are part of the type's contract.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sortedcontainers import SortedDict

from pion.protocol.errors import ReplyError
from pion.storage.encodings import register_encoding
from pion.storage.keyspace import register_type
from pion.storage.serialize import pack_tree, register_codec, unpack_tree

StreamID = tuple[int, int]
U64 = 2**64 - 1
MIN_ID: StreamID = (0, 0)
MAX_ID: StreamID = (U64, U64)
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"


def format_id(sid: StreamID) -> bytes:
    return b"%d-%d" % sid


def parse_id(raw: bytes, missing_seq: int = 0, strict: bool = False) -> StreamID:
    """``ms-seq`` or ``ms`` (seq defaults to ``missing_seq``: 0 for a start, max for an end)."""
    text = raw.decode("latin-1")
    if text == "-" and not strict:
        return MIN_ID
    if text == "+" and not strict:
        return MAX_ID
    ms_text, dash, seq_text = text.partition("-")
    try:
        ms = _u64(ms_text)
        seq = _u64(seq_text) if dash else missing_seq
    except ValueError:
        raise ReplyError(INVALID_ID) from None
    return ms, seq


def _u64(text: str) -> int:
    if not text.isdigit():
        raise ValueError(text)
    value = int(text)
    if value > U64:
        raise ValueError(text)
    return value


def next_id(sid: StreamID) -> StreamID | None:
    ms, seq = sid
    if seq < U64:
        return ms, seq + 1
    return (ms + 1, 0) if ms < U64 else None


def prev_id(sid: StreamID) -> StreamID | None:
    ms, seq = sid
    if seq > 0:
        return ms, seq - 1
    return (ms - 1, U64) if ms > 0 else None


@dataclass
class PendingEntry:
    consumer: bytes
    delivery_time: int
    delivery_count: int


@dataclass
class Consumer:
    name: bytes
    seen_time: int
    active_time: int = -1
    pending: SortedDict = field(default_factory=SortedDict)  # id -> PendingEntry (shared objects)


@dataclass
class ConsumerGroup:
    name: bytes
    last_id: StreamID
    entries_read: int | None
    pel: SortedDict = field(default_factory=SortedDict)  # id -> PendingEntry
    consumers: dict[bytes, Consumer] = field(default_factory=dict)

    def consumer(self, name: bytes, create: bool = True) -> Consumer | None:
        found = self.consumers.get(name)
        if found is None and create:
            found = self.consumers[name] = Consumer(name, now_ms())
        return found


def now_ms() -> int:
    return int(time.time() * 1000)


class Stream:
    """A stream value. ``entries`` maps ID -> flat [field, value, ...] list.

    ``nodes`` models Redis's listpack nodes (first ID -> [inserted, live, last inserted ID]),
    because ``MAXLEN ~``/``MINID ~`` trimming is observable at node granularity: a node takes
    stream-node-max-entries appends, deletions inside it only lower its live count, and it goes
    away when its last live entry does. (stream-node-max-bytes is not modelled.)"""

    __slots__ = ("entries", "last_id", "max_deleted_id", "entries_added", "groups", "nodes")

    def __init__(self) -> None:
        self.entries: SortedDict = SortedDict()
        self.last_id: StreamID = MIN_ID
        self.max_deleted_id: StreamID = MIN_ID
        self.entries_added = 0
        self.groups: dict[bytes, ConsumerGroup] = {}
        self.nodes: SortedDict = SortedDict()

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def first_id(self) -> StreamID:
        return self.entries.peekitem(0)[0] if self.entries else MIN_ID

    def add(self, sid: StreamID, fields: list[bytes], node_max: int = 100) -> None:
        self.entries[sid] = fields
        self.last_id = sid
        self.entries_added += 1
        self._append_to_node(sid, node_max)

    def _append_to_node(self, sid: StreamID, node_max: int) -> None:
        if self.nodes:
            node = self.nodes.peekitem(-1)[1]
            if node_max <= 0 or node[0] < node_max:
                node[0] += 1
                node[1] += 1
                node[2] = sid
                return
        self.nodes[sid] = [1, 1, sid]

    def _node_lost(self, sid: StreamID) -> None:
        index = self.nodes.bisect_right(sid) - 1
        if index >= 0:
            start, node = self.nodes.peekitem(index)
            node[1] -= 1
            if node[1] <= 0:
                del self.nodes[start]

    def delete(self, sid: StreamID) -> bool:
        if self.entries.pop(sid, None) is None:
            return False
        self._node_lost(sid)
        if sid > self.max_deleted_id:
            self.max_deleted_id = sid
        return True

    def range(self, start: StreamID, end: StreamID, count: int | None = None, reverse: bool = False) -> list:
        if start > end:
            return []
        out = []
        for sid in self.entries.irange(start, end, reverse=reverse):
            out.append((sid, self.entries[sid]))
            if count is not None and len(out) >= count:
                break
        return out

    def trim(self, threshold: int | StreamID, by_minid: bool, approx: bool, limit: int = 0,
             policy: bytes = b"KEEPREF", removed: list | None = None) -> int:
        """Redis's streamTrim: drop whole head nodes while the stream stays at or above MAXLEN
        (or the node's last ID is below MINID) and LIMIT (0: none) allows; then, unless ``approx``,
        single entries of the next node. Returns how many entries went.

        Redis 8.2's reference policies: KEEPREF leaves the groups' PELs as they are; DELREF also
        drops every PEL reference to a trimmed entry; ACKED trims only entries no group still
        needs (``is_referenced``), skipping the others, so it goes on entry by entry (within
        whole nodes only under ``~``) until the threshold is met or the eligible nodes run out.
        ``removed`` collects the trimmed IDs (for logging ACKED's effect)."""
        acked, delref = policy == b"ACKED", policy == b"DELREF"
        deleted = index = 0
        while index < len(self.nodes):
            if not by_minid and len(self.entries) <= threshold:  # type: ignore[operator]
                break
            start, (_, live, last) = self.nodes.peekitem(index)
            if limit and deleted + live > limit:
                break
            whole = last < threshold if by_minid else len(self.entries) - live >= threshold  # type: ignore[operator]
            if whole and not acked:
                for sid in list(self.entries.irange(start, last)):
                    del self.entries[sid]
                    if delref:
                        self.drop_refs(sid)
                    if removed is not None:
                        removed.append(sid)
                self.max_deleted_id = max(self.max_deleted_id, last)
                del self.nodes[start]
                deleted += live
                continue
            if approx and not whole:
                break
            reached = False
            for sid in list(self.entries.irange(start, last)):
                if (sid >= threshold if by_minid else len(self.entries) <= threshold):  # type: ignore[operator]
                    reached = True
                    break
                if acked and self.is_referenced(sid):
                    continue
                del self.entries[sid]
                self._node_lost(sid)
                self.max_deleted_id = max(self.max_deleted_id, sid)
                if delref:
                    self.drop_refs(sid)
                if removed is not None:
                    removed.append(sid)
                deleted += 1
            if reached or not acked:
                break
            if index < len(self.nodes) and self.nodes.peekitem(index)[0] == start:
                index += 1
        return deleted

    def is_referenced(self, sid: StreamID) -> bool:
        """Redis's streamEntryIsReferenced: some group has ``sid`` pending, or has not delivered
        it yet (its last-delivered ID is below it)."""
        return any(sid in group.pel or group.last_id < sid for group in self.groups.values())

    def drop_refs(self, sid: StreamID) -> bool:
        """Remove ``sid`` from every group's PEL (and its consumer's); True if one had it."""
        dropped = False
        for group in self.groups.values():
            entry = group.pel.pop(sid, None)
            if entry is not None:
                dropped = True
                consumer = group.consumers.get(entry.consumer)
                if consumer is not None:
                    consumer.pending.pop(sid, None)
        return dropped

    def rebuild_nodes(self, node_max: int = 100) -> None:
        """Pack the live entries into fresh nodes (after a load, where node history is not kept)."""
        self.nodes = SortedDict()
        for sid in self.entries:
            self._append_to_node(sid, node_max)

    def estimate_distance(self, sid: StreamID) -> int | None:
        """The logical read counter of ``sid`` (Redis's streamEstimateDistanceFromFirstEverEntry);
        None when tombstones make it unknowable."""
        if not self.entries_added:
            return 0
        if sid == self.last_id or (not self.entries and sid < self.last_id):
            return self.entries_added
        if sid > self.last_id:
            return None
        first = self.first_id
        if self.max_deleted_id == MIN_ID or self.max_deleted_id < first:
            if sid < first:
                return self.entries_added - len(self.entries)
            if sid == first:
                return self.entries_added - len(self.entries) + 1
        return None

    def _has_tombstone_after(self, sid: StreamID) -> bool:
        return self.max_deleted_id != MIN_ID and self.max_deleted_id >= sid and bool(self.entries)

    def note_delivered(self, group: ConsumerGroup, sid: StreamID) -> None:
        """Advance ``group`` past ``sid`` keeping its read counter as Redis does: count on while no
        tombstone lies ahead, else re-estimate (which may make it unknown)."""
        if sid <= group.last_id:
            return
        if group.entries_read is not None and not self._has_tombstone_after(sid):
            group.entries_read += 1
        elif self.entries_added:
            group.entries_read = self.estimate_distance(sid)
        group.last_id = sid

    def lag(self, group: ConsumerGroup) -> int | None:
        """Entries not yet delivered to ``group`` (Redis's streamReplyWithCGLag); None when unknown.
        Not clamped: a counter set past entries_added gives a negative lag, as in Redis."""
        if not self.entries_added or not self.entries:
            return 0
        first = self.first_id
        if group.last_id < first and self.max_deleted_id < first:
            return len(self.entries)
        if group.entries_read is not None and not self._has_tombstone_after(group.last_id):
            return self.entries_added - group.entries_read
        read = self.estimate_distance(group.last_id)
        return None if read is None else self.entries_added - read


register_type(Stream, "stream")
register_encoding(Stream, lambda value, settings: "stream")


def _dump(stream: Stream) -> bytes:
    groups = []
    for group in stream.groups.values():
        pel = [(sid, entry.consumer, entry.delivery_time, entry.delivery_count) for sid, entry in group.pel.items()]
        consumers = [(c.name, c.seen_time, c.active_time) for c in group.consumers.values()]
        groups.append((group.name, group.last_id, group.entries_read, pel, consumers))
    tree = (list(stream.entries.items()), stream.last_id, stream.max_deleted_id, stream.entries_added, groups)
    return pack_tree(tree)


def _load(body: bytes) -> Stream:
    entries, last_id, max_deleted, added, groups = unpack_tree(body)
    stream = Stream()
    for sid, fields in entries:
        stream.entries[tuple(sid)] = fields
    stream.last_id, stream.max_deleted_id, stream.entries_added = tuple(last_id), tuple(max_deleted), added
    stream.rebuild_nodes()
    for name, group_last, entries_read, pel, consumers in groups:
        group = ConsumerGroup(name, tuple(group_last), entries_read)
        for cname, seen, active in consumers:
            group.consumers[cname] = Consumer(cname, seen, active)
        for sid, cname, when, count in pel:
            entry = PendingEntry(cname, when, count)
            group.pel[tuple(sid)] = entry
            group.consumer(cname).pending[tuple(sid)] = entry
        stream.groups[name] = group
    return stream


register_codec(Stream, 6, _dump, _load)
