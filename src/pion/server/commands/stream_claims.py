"""Stream ownership and introspection: XCLAIM XAUTOCLAIM XINFO."""

from __future__ import annotations

from itertools import islice

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import Status
from pion.server.args import parse_int
from pion.server.commands.stream_groups import _deliver, _group, claim_effect, existing_group
from pion.server.commands.streams import entry_reply, get_stream
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.stream_value import (
    MAX_ID,
    MIN_ID,
    ConsumerGroup,
    Stream,
    StreamID,
    format_id,
    next_id,
    now_ms,
    parse_id,
)

_GROUP = "stream"


def _forget(group: ConsumerGroup, sid: StreamID) -> None:
    entry = group.pel.pop(sid, None)
    if entry is not None and entry.consumer in group.consumers:
        group.consumers[entry.consumer].pending.pop(sid, None)


@command("XCLAIM", -6, "write fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="5.0.0")
def xclaim(ctx: Ctx, argv: list[bytes]):
    """XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]"""
    key, consumer = argv[1], argv[3]
    stream, group = _group(ctx, key, argv[2])
    min_idle = max(parse_int(argv[4], "ERR Invalid min-idle-time argument for XCLAIM"), 0)
    ids, i = [], 5
    while i < len(argv):
        try:
            ids.append(parse_id(argv[i], strict=True))
        except ReplyError:
            break
        i += 1
    now = now_ms()
    when, retry, force, justid, lastid = now, None, False, False, None
    while i < len(argv):
        option = argv[i].upper()
        if option in (b"IDLE", b"TIME", b"RETRYCOUNT", b"LASTID") and i + 1 < len(argv):
            value = argv[i + 1]
            if option == b"IDLE":
                when = now - parse_int(value, "ERR Invalid IDLE option argument for XCLAIM")
            elif option == b"TIME":
                when = parse_int(value, "ERR Invalid TIME option argument for XCLAIM")
            elif option == b"RETRYCOUNT":
                retry = parse_int(value, "ERR Invalid RETRYCOUNT option argument for XCLAIM")
            else:
                lastid = parse_id(value, strict=True)
            i += 2
        elif option in (b"FORCE", b"JUSTID"):
            force, justid = force or option == b"FORCE", justid or option == b"JUSTID"
            i += 1
        else:
            raise ReplyError(f"ERR Unrecognized XCLAIM option '{argv[i].decode('utf-8', 'replace')}'")
    if lastid is not None and lastid > group.last_id:
        group.last_id = lastid
    claimed, effects = [], []
    for sid in ids:
        entry = group.pel.get(sid)
        if entry is None:
            if not (force and sid in stream.entries):
                continue
        elif sid not in stream.entries:
            _forget(group, sid)
            effects.append([b"XACK", key, group.name, format_id(sid)])
            continue
        elif min_idle and now - entry.delivery_time < min_idle:
            continue
        count = retry if retry is not None else (entry.delivery_count if entry else 0) + (0 if justid else 1)
        _note_new_consumer(ctx, key, group, consumer)
        _deliver(group, consumer, sid, when, count)
        claimed.append(sid)
        effects.append(claim_effect(key, group, consumer, sid))
    if effects or lastid is not None:
        ctx.db.signal(key)
        ctx.dirty()
        ctx.rewrite(*effects) if effects else None
    return [format_id(sid) for sid in claimed] if justid else entry_reply([(sid, stream.entries[sid]) for sid in claimed])


@command("XAUTOCLAIM", -6, "write fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="6.2.0")
def xautoclaim(ctx: Ctx, argv: list[bytes]):
    """XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]"""
    key, consumer = argv[1], argv[3]
    min_idle = max(parse_int(argv[4], "ERR Invalid min-idle-time argument for XAUTOCLAIM"), 0)
    start = _start_id(argv[5])
    count, justid = _autoclaim_options(argv)
    stream, group = _group(ctx, key, argv[2])
    now = now_ms()
    claimed, deleted, effects = [], [], []
    cursor: StreamID = MIN_ID
    attempts = count * 10
    scanned = list(islice(group.pel.irange(start, MAX_ID), attempts + 1))
    index = 0
    while index < len(scanned) and count > 0 and attempts > 0:
        sid = scanned[index]
        index += 1
        attempts -= 1
        if sid not in stream.entries:  # a deleted entry leaves the PEL and counts against COUNT
            _forget(group, sid)
            deleted.append(sid)
            effects.append([b"XACK", key, group.name, format_id(sid)])
            count -= 1
            continue
        entry = group.pel[sid]
        if min_idle and now - entry.delivery_time < min_idle:
            continue
        _note_new_consumer(ctx, key, group, consumer)
        _deliver(group, consumer, sid, now, entry.delivery_count + (0 if justid else 1))
        claimed.append(sid)
        count -= 1
        effects.append(claim_effect(key, group, consumer, sid))
    if index < len(scanned):
        cursor = scanned[index]
    if effects:
        ctx.db.signal(key)
        ctx.dirty()
        ctx.rewrite(*effects)
    body = [format_id(sid) for sid in claimed] if justid else entry_reply([(sid, stream.entries[sid]) for sid in claimed])
    return [format_id(cursor), body, [format_id(sid) for sid in deleted]]


def _note_new_consumer(ctx: Ctx, key: bytes, group: ConsumerGroup, consumer: bytes) -> None:
    """A claim creates its consumer on the first entry it takes, with Redis's keyspace event."""
    if consumer not in group.consumers:
        ctx.notify("t", "xgroup-createconsumer", key)


def _autoclaim_options(argv: list[bytes]) -> tuple[int, bool]:
    """[COUNT count] [JUSTID], checked before the key is looked up, as Redis does."""
    count, justid, i = 100, False, 6
    while i < len(argv):
        option = argv[i].upper()
        if option == b"COUNT" and i + 1 < len(argv):
            count = parse_int(argv[i + 1], "ERR COUNT must be > 0")
            if count < 1 or count > (2**63 - 1) // 16:
                raise ReplyError("ERR COUNT must be > 0")
            i += 2
        elif option == b"JUSTID":
            justid, i = True, i + 1
        else:
            raise ReplyError(errors.SYNTAX)
    return count, justid


def _start_id(raw: bytes) -> StreamID:
    if raw.startswith(b"("):
        sid = parse_id(raw[1:], strict=True)
        following = next_id(sid)
        if following is None:
            raise ReplyError("ERR invalid start ID for the interval")
        return following
    return parse_id(raw)


# -- XINFO --------------------------------------------------------------------------------------


def _group_info(stream: Stream, group: ConsumerGroup) -> dict:
    return {
        b"name": group.name,
        b"consumers": len(group.consumers),
        b"pending": len(group.pel),
        b"last-delivered-id": format_id(group.last_id),
        b"entries-read": group.entries_read,
        b"lag": stream.lag(group),
    }


def _first_last(stream: Stream) -> tuple:
    if not stream.entries:
        return None, None
    first, last = stream.entries.peekitem(0), stream.entries.peekitem(-1)
    return entry_reply([first])[0], entry_reply([last])[0]


@command("XINFO|STREAM", -3, "readonly", keys=(2, 2, 1), categories="@read @stream @slow", group=_GROUP, since="5.0.0")
def xinfo_stream(ctx: Ctx, argv: list[bytes]):
    """XINFO STREAM key [FULL [COUNT count]]"""
    stream = _must_exist(ctx, argv[2])
    full, count = False, 10
    if len(argv) > 3:
        if argv[3].upper() != b"FULL" or len(argv) not in (4, 6) or (len(argv) == 6 and argv[4].upper() != b"COUNT"):
            raise ReplyError(errors.SYNTAX)
        full = True
        if len(argv) == 6:
            count = parse_int(argv[5])
    info = {
        b"length": len(stream),
        b"radix-tree-keys": (len(stream) + 99) // 100,
        b"radix-tree-nodes": (len(stream) + 99) // 100 + 1,
        b"last-generated-id": format_id(stream.last_id),
        b"max-deleted-entry-id": format_id(stream.max_deleted_id),
        b"entries-added": stream.entries_added,
        b"recorded-first-entry-id": format_id(stream.first_id),
    }
    if not full:
        first, last = _first_last(stream)
        info.update({b"groups": len(stream.groups), b"first-entry": first, b"last-entry": last})
        return info
    limit = count if count > 0 else None
    info[b"entries"] = entry_reply(stream.range(MIN_ID, MAX_ID, limit))
    info[b"groups"] = [_full_group(stream, group, limit) for group in stream.groups.values()]
    return info


def _full_group(stream: Stream, group: ConsumerGroup, limit: int | None) -> dict:
    pel = list(group.pel.items())[:limit]
    consumers = []
    for consumer in group.consumers.values():
        consumers.append({
            b"name": consumer.name, b"seen-time": consumer.seen_time, b"active-time": consumer.active_time,
            b"pel-count": len(consumer.pending),
            b"pending": [[format_id(sid), e.delivery_time, e.delivery_count] for sid, e in list(consumer.pending.items())[:limit]],
        })
    return {
        b"name": group.name, b"last-delivered-id": format_id(group.last_id),
        b"entries-read": group.entries_read, b"lag": stream.lag(group), b"pel-count": len(group.pel),
        b"pending": [[format_id(sid), e.consumer, e.delivery_time, e.delivery_count] for sid, e in pel],
        b"consumers": consumers,
    }


def _must_exist(ctx: Ctx, key: bytes) -> Stream:
    stream = get_stream(ctx, key)
    if stream is None:
        raise ReplyError("ERR no such key")
    return stream


@command("XINFO|GROUPS", 3, "readonly", keys=(2, 2, 1), categories="@read @stream @slow", group=_GROUP, since="5.0.0")
def xinfo_groups(ctx: Ctx, argv: list[bytes]):
    """XINFO GROUPS key"""
    stream = _must_exist(ctx, argv[2])
    return [_group_info(stream, group) for group in stream.groups.values()]


@command("XINFO|CONSUMERS", 4, "readonly", keys=(2, 2, 1), categories="@read @stream @slow", group=_GROUP, since="5.0.0")
def xinfo_consumers(ctx: Ctx, argv: list[bytes]):
    """XINFO CONSUMERS key group"""
    _, group = existing_group(ctx, argv[2], argv[3], "ERR no such key")
    now = now_ms()
    return [
        {b"name": c.name, b"pending": len(c.pending), b"idle": max(now - c.seen_time, 0),
         b"inactive": max(now - c.active_time, 0) if c.active_time >= 0 else -1}
        for c in group.consumers.values()
    ]


@command("XINFO|HELP", 2, "loading stale", categories="@stream @slow", group=_GROUP, since="5.0.0")
def xinfo_help(ctx: Ctx, argv: list[bytes]):
    """XINFO HELP"""
    return [Status(line) for line in (
        "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CONSUMERS <key> <groupname>", "    Show consumers of <groupname>.",
        "GROUPS <key>", "    Show the stream consumer groups.",
        "STREAM <key> [FULL [COUNT <count>]", "    Show information about the stream.",
        "HELP", "    Print this help.",
    )]
