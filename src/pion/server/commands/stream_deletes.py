"""Redis 8.2's stream deletes that know about consumer groups: XDELEX and XACKDEL.

Both take ``[KEEPREF | DELREF | ACKED] IDS numids id ...`` (in any order, as Redis's parser
reads them) and answer one code per ID. KEEPREF deletes the entry and leaves the groups' pending
entries pointing at it (XDEL's behaviour); DELREF also removes it from every group's PEL (even
when the entry itself is already gone); ACKED deletes only an entry no group still needs: none
has it pending and none can still deliver it (its last-delivered ID is below the entry's).
The argv is logged as given: what it does depends only on the data, never on the clock.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.commands.streams import get_stream
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.stream_value import ConsumerGroup, Stream, StreamID, parse_id

_GROUP = "stream"
KEEPREF, DELREF, ACKED = b"KEEPREF", b"DELREF", b"ACKED"
NOT_FOUND, DELETED, REFERENCED = -1, 1, 2
_LONG_MAX = (1 << 63) - 1


def _parse(argv: list[bytes], start: int) -> tuple[bytes, list[StreamID]]:
    """The strategy (KEEPREF unless given) and the IDs, with Redis's texts: one strategy at most,
    IDS once, ``numids`` positive and matching; every ID checked before anything changes."""
    strategy: bytes | None = None
    ids: list[bytes] | None = None
    i = start
    while i < len(argv):
        word = argv[i].upper()
        if word in (KEEPREF, DELREF, ACKED) and strategy is None:
            strategy, i = word, i + 1
        elif word == b"IDS" and ids is None and i + 1 < len(argv):
            count = parse_int(argv[i + 1], "ERR Number of IDs must be a positive integer")
            if not 1 <= count <= _LONG_MAX:
                raise ReplyError("ERR Number of IDs must be a positive integer")
            if count > len(argv) - i - 2:
                raise ReplyError("ERR The `numids` parameter must match the number of arguments")
            ids = argv[i + 2 : i + 2 + count]
            i += 2 + count
        else:
            raise ReplyError(errors.SYNTAX)
    if ids is None:
        raise ReplyError(errors.SYNTAX)
    return strategy or KEEPREF, [parse_id(raw, strict=True) for raw in ids]


def _unpend(group: ConsumerGroup, sid: StreamID) -> bool:
    """Remove ``sid`` from the group's PEL and its consumer's; True if it was pending."""
    entry = group.pel.pop(sid, None)
    if entry is None:
        return False
    consumer = group.consumers.get(entry.consumer)
    if consumer is not None:
        consumer.pending.pop(sid, None)
    return True


def _delete(stream: Stream, sid: StreamID, strategy: bytes) -> int:
    """One entry under the strategy: DELETED, REFERENCED (ACKED kept it) or NOT_FOUND."""
    if strategy == ACKED and sid in stream.entries and stream.is_referenced(sid):
        return REFERENCED
    deleted = stream.delete(sid)
    if strategy == DELREF:
        stream.drop_refs(sid)
    return DELETED if deleted else NOT_FOUND


def _changed(ctx: Ctx, key: bytes, deleted: bool) -> None:
    ctx.db.signal(key)
    ctx.dirty()
    if deleted:
        ctx.notify("t", "xdel", key)


@command("XDELEX", -5, "write fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="8.2.0")
def xdelex(ctx: Ctx, argv: list[bytes]):
    """XDELEX key [KEEPREF | DELREF | ACKED] IDS numids id [id ...]

    One code per ID: 1 deleted, -1 not in the stream, 2 kept by ACKED because a group still
    needs it. A missing key answers -1 for every ID.
    """
    strategy, ids = _parse(argv, 2)
    key = argv[1]
    stream = get_stream(ctx, key)
    if stream is None:
        return [NOT_FOUND] * len(ids)
    pending_before = sum(len(group.pel) for group in stream.groups.values())
    replies = [_delete(stream, sid, strategy) for sid in ids]
    deleted = DELETED in replies
    if deleted or sum(len(group.pel) for group in stream.groups.values()) != pending_before:
        _changed(ctx, key, deleted)
    return replies


@command("XACKDEL", -6, "write fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="8.2.0")
def xackdel(ctx: Ctx, argv: list[bytes]):
    """XACKDEL key group [KEEPREF | DELREF | ACKED] IDS numids id [id ...]

    Acknowledges each ID in the group, then deletes it under the strategy. One code per ID: 1
    acknowledged and deleted, 2 acknowledged but kept by ACKED (another group still needs it),
    -1 not pending in the group. A missing key or group answers -1 for every ID.
    """
    strategy, ids = _parse(argv, 3)
    key = argv[1]
    stream = get_stream(ctx, key)
    group = stream.groups.get(argv[2]) if stream is not None else None
    if stream is None or group is None:
        return [NOT_FOUND] * len(ids)
    replies, acked, deleted = [], False, False
    for sid in ids:
        if not _unpend(group, sid):
            replies.append(NOT_FOUND)
            continue
        acked = True
        code = _delete(stream, sid, strategy)
        deleted = deleted or code == DELETED
        replies.append(REFERENCED if code == REFERENCED else DELETED)
    if acked:
        _changed(ctx, key, deleted)
    return replies
