"""Stream consumer groups: XGROUP XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM XINFO.

Reading through a group is logged the way Redis propagates it: one ``XCLAIM ... FORCE JUSTID``
per delivered entry (absolute TIME, RETRYCOUNT) plus ``XGROUP SETID``, so replay rebuilds the
same pending entries lists without re-reading.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY, OK, KeyedArrays, Status
from pion.server.args import parse_int
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.commands.streams import entry_reply, get_stream, parse_read_options, stream_if_any, streams_keys
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.stream_value import (
    MAX_ID,
    ConsumerGroup,
    PendingEntry,
    Stream,
    StreamID,
    format_id,
    next_id,
    now_ms,
    parse_id,
)

_GROUP = "stream"


def _group(ctx: Ctx, key: bytes, name: bytes, where: str = "") -> tuple[Stream, ConsumerGroup]:
    """The stream and group, or Redis's NOGROUP (XREADGROUP adds where it happened)."""
    stream = get_stream(ctx, key)
    group = stream.groups.get(name) if stream is not None else None
    if group is None:
        suffix = f" in {where}" if where else ""
        raise ReplyError(
            f"NOGROUP No such key '{key.decode('utf-8', 'replace')}' or consumer group "
            f"'{name.decode('utf-8', 'replace')}'{suffix}"
        )
    return stream, group  # type: ignore[return-value]


_NEEDS_KEY = ("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use "
              "the MKSTREAM option to create an empty stream automatically.")


def existing_group(ctx: Ctx, key: bytes, name: bytes, missing_key: str = _NEEDS_KEY) -> tuple[Stream, ConsumerGroup]:
    """For XGROUP and XINFO: a missing key and a missing group are two different errors."""
    stream = get_stream(ctx, key)
    if stream is None:
        raise ReplyError(missing_key)
    group = stream.groups.get(name)
    if group is None:
        raise ReplyError(f"NOGROUP No such consumer group '{name.decode('utf-8', 'replace')}' for key name "
                         f"'{key.decode('utf-8', 'replace')}'")
    return stream, group


def _changed(ctx: Ctx, key: bytes) -> None:
    ctx.db.signal(key)
    ctx.dirty()


# -- XGROUP ---------------------------------------------------------------------------------


def _group_id(raw: bytes, stream: Stream, strict: bool = True) -> StreamID:
    """'$' or an ID; CREATE refuses '-' and '+' while SETID takes them (Redis 7.0 parses the two
    with different strictness)."""
    return stream.last_id if raw == b"$" else parse_id(raw, strict=strict)


def _capped(stream: Stream, entries_read: int | None) -> int | None:
    """Redis 8.2.2: an ENTRIESREAD past the stream's entries-added is capped to it (7.x kept it,
    which made the lag negative)."""
    if entries_read is not None and entries_read > stream.entries_added:
        return stream.entries_added
    return entries_read


def _entries_read(argv: list[bytes], i: int) -> int | None:
    if i == len(argv):
        return None
    if len(argv) != i + 2 or argv[i].upper() != b"ENTRIESREAD":
        raise ReplyError(errors.SYNTAX)
    value = parse_int(argv[i + 1])
    if value < 0 and value != -1:
        raise ReplyError("ERR value for ENTRIESREAD must be positive or -1")
    return None if value == -1 else value


@command("XGROUP|CREATE", -5, "write denyoom", keys=(2, 2, 1), categories="@write @stream @slow", group=_GROUP, since="5.0.0")
def xgroup_create(ctx: Ctx, argv: list[bytes]):
    """XGROUP CREATE key group id | $ [MKSTREAM] [ENTRIESREAD entries-read]"""
    key, name = argv[2], argv[3]
    i, mkstream = 5, False
    if i < len(argv) and argv[i].upper() == b"MKSTREAM":
        mkstream, i = True, i + 1
    entries_read = _entries_read(argv, i)
    stream = get_stream(ctx, key)
    if stream is None:
        if not mkstream:
            raise ReplyError(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use "
                "the MKSTREAM option to create an empty stream automatically."
            )
        stream = Stream()
        ctx.db.set(key, stream)
    last = _group_id(argv[4], stream)
    if name in stream.groups:
        raise ReplyError("BUSYGROUP Consumer Group name already exists")
    entries_read = _capped(stream, entries_read)
    stream.groups[name] = ConsumerGroup(name, last, entries_read)
    _changed(ctx, key)
    ctx.rewrite([b"XGROUP", b"CREATE", key, name, format_id(last), b"MKSTREAM"] +
                ([b"ENTRIESREAD", b"%d" % entries_read] if entries_read is not None else []))
    ctx.notify("t", "xgroup-create", key)
    return OK


@command("XGROUP|SETID", -5, "write", keys=(2, 2, 1), categories="@write @stream @slow", group=_GROUP, since="5.0.0")
def xgroup_setid(ctx: Ctx, argv: list[bytes]):
    """XGROUP SETID key group id | $ [ENTRIESREAD entries-read]"""
    entries_read = _entries_read(argv, 5)
    stream, group = existing_group(ctx, argv[2], argv[3])
    group.last_id = _group_id(argv[4], stream, strict=False)
    group.entries_read = entries_read = _capped(stream, entries_read)
    _changed(ctx, argv[2])
    ctx.rewrite([b"XGROUP", b"SETID", argv[2], argv[3], format_id(group.last_id)] +
                ([b"ENTRIESREAD", b"%d" % entries_read] if entries_read is not None else []))
    ctx.notify("t", "xgroup-setid", argv[2])
    return OK


@command("XGROUP|DESTROY", 4, "write", keys=(2, 2, 1), categories="@write @stream @slow", group=_GROUP, since="5.0.0")
def xgroup_destroy(ctx: Ctx, argv: list[bytes]):
    """XGROUP DESTROY key group"""
    stream = get_stream(ctx, argv[2])
    if stream is None:
        raise ReplyError(_NEEDS_KEY)
    if stream.groups.pop(argv[3], None) is None:
        return 0
    _changed(ctx, argv[2])
    ctx.notify("t", "xgroup-destroy", argv[2])
    return 1


@command("XGROUP|CREATECONSUMER", 5, "write denyoom", keys=(2, 2, 1), categories="@write @stream @slow", group=_GROUP, since="6.2.0")
def xgroup_createconsumer(ctx: Ctx, argv: list[bytes]):
    """XGROUP CREATECONSUMER key group consumer"""
    _, group = existing_group(ctx, argv[2], argv[3])
    if argv[4] in group.consumers:
        return 0
    group.consumer(argv[4])
    _changed(ctx, argv[2])
    ctx.notify("t", "xgroup-createconsumer", argv[2])
    return 1


@command("XGROUP|DELCONSUMER", 5, "write", keys=(2, 2, 1), categories="@write @stream @slow", group=_GROUP, since="5.0.0")
def xgroup_delconsumer(ctx: Ctx, argv: list[bytes]):
    """XGROUP DELCONSUMER key group consumer"""
    _, group = existing_group(ctx, argv[2], argv[3])
    consumer = group.consumers.pop(argv[4], None)
    if consumer is None:
        return 0
    for sid in consumer.pending:
        group.pel.pop(sid, None)
    _changed(ctx, argv[2])
    ctx.notify("t", "xgroup-delconsumer", argv[2])
    return len(consumer.pending)


@command("XGROUP|HELP", 2, "loading stale", categories="@stream @slow", group=_GROUP, since="5.0.0")
def xgroup_help(ctx: Ctx, argv: list[bytes]):
    """XGROUP HELP"""
    return [Status(line) for line in (
        "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CREATE <key> <groupname> <id|$> [option]", "CREATECONSUMER <key> <groupname> <consumer>",
        "DELCONSUMER <key> <groupname> <consumer>", "DESTROY <key> <groupname>",
        "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]", "HELP",
    )]


# -- XREADGROUP -------------------------------------------------------------------------------


@command("XREADGROUP", -7, "write blocking movablekeys", categories="@write @stream @slow @blocking", group=_GROUP, since="5.0.0", key_finder=streams_keys)
def xreadgroup(ctx: Ctx, argv: list[bytes]):
    """XREADGROUP GROUP group consumer [COUNT count] [BLOCK milliseconds] [CLAIM min-idle-time] [NOACK] STREAMS key [key ...] id [id ...]

    CLAIM (Redis 8.4): with ``>``, first the group's pending entries idle at least
    min-idle-time ms (longest idle first) are claimed for this consumer, then new entries are
    read, COUNT bounding both together per stream; every entry then carries two more fields,
    its idle time and its earlier delivery count (0 and 0 for a new one). NOACK does not apply
    to claimed entries. A blocked CLAIM read also wakes when a pending entry becomes idle enough.
    """
    if argv[1].upper() != b"GROUP":
        raise ReplyError(errors.SYNTAX)
    name, consumer = argv[2], argv[3]
    opts = parse_read_options(argv, 4, group=True, in_script=ctx.client.in_script)
    keys, count, noack, claim = opts.keys, opts.count, opts.noack, opts.claim
    ids = [None if raw == b">" else parse_id(raw, strict=True) for raw in opts.ids]
    for key in keys:
        _group(ctx, key, name, "XREADGROUP with GROUP option")
    reply = _group_read(ctx, name, consumer, keys, ids, count, noack, claim)
    if reply is not None or opts.block is None or any(sid is not None for sid in ids):
        return reply if reply is not None else NULL_ARRAY
    if not ctx.can_block:
        return NULL_ARRAY

    def retry(retry_ctx: Ctx):
        for key in keys:
            stream = stream_if_any(retry_ctx, key)
            if stream is None or name not in stream.groups:
                return ReplyError("NOGROUP the consumer group this client was blocked on no longer exists")
        found = _group_read(retry_ctx, name, consumer, keys, ids, count, noack, claim)
        return NOT_READY if found is None else found

    def wake() -> float | None:
        """Seconds until the oldest pending entry of these keys' groups is idle enough."""
        if claim is None:
            return None
        oldest = None
        for key in keys:
            stream = stream_if_any(ctx, key)
            group = stream.groups.get(name) if stream is not None else None
            if group is not None and group.pel:
                first = min(entry.delivery_time for entry in group.pel.values())
                oldest = first if oldest is None else min(oldest, first)
        return None if oldest is None else (oldest + claim - now_ms()) / 1000.0

    return BlockRequest(keys=list(keys), timeout=opts.block, retry=retry, on_timeout=NULL_ARRAY, wake=wake)


def _group_read(ctx: Ctx, name: bytes, consumer_name: bytes, keys: list[bytes], ids: list, count: int | None,
                noack: bool, claim: int | None = None):
    result = KeyedArrays()
    now = now_ms()
    effects: list[list[bytes]] = []
    for key, sid in zip(keys, ids, strict=True):
        stream, group = _group(ctx, key, name, "XREADGROUP with GROUP option")
        created = consumer_name not in group.consumers
        consumer = group.consumer(consumer_name)
        consumer.seen_time = now
        if created:
            effects.append([b"XGROUP", b"CREATECONSUMER", key, name, consumer_name])
            ctx.notify("t", "xgroup-createconsumer", key)
        if sid is not None:  # history: this consumer's pending entries after sid (CLAIM ignored)
            pending = [p for p in consumer.pending.irange(next_id(sid) or MAX_ID, MAX_ID)][: count or None]
            result[key] = [[format_id(p), list(stream.entries[p])] if p in stream.entries else [format_id(p), None]
                           for p in pending]
            continue
        claimed = _claim_idle(key, stream, group, consumer_name, claim, now, count, effects) if claim is not None else []
        budget = None if count is None else count - len(claimed)
        entries = stream.range(next_id(group.last_id) or MAX_ID, MAX_ID, budget) if budget != 0 else []
        if not entries and not claimed:
            continue
        consumer.active_time = now
        for entry_id, _ in entries:
            stream.note_delivered(group, entry_id)
            if not noack:
                _deliver(group, consumer_name, entry_id, now, 1)
                effects.append([b"XCLAIM", key, name, consumer_name, b"0", format_id(entry_id), b"TIME", b"%d" % now,
                                b"RETRYCOUNT", b"1", b"FORCE", b"JUSTID", b"LASTID", format_id(group.last_id)])
        if entries:
            effects.append([b"XGROUP", b"SETID", key, name, format_id(group.last_id)] +
                           ([b"ENTRIESREAD", b"%d" % group.entries_read] if group.entries_read is not None else []))
        if claim is None:
            result[key] = entry_reply(entries)
        else:
            result[key] = claimed + [[format_id(entry_id), list(fields), 0, 0] for entry_id, fields in entries]
        ctx.db.signal(key)
    if effects:
        ctx.dirty()
        ctx.rewrite(*effects)
    else:
        ctx.no_propagate()
    return result or None


def _claim_idle(key: bytes, stream: Stream, group: ConsumerGroup, consumer_name: bytes, min_idle: int, now: int,
                count: int | None, effects: list[list[bytes]]) -> list:
    """CLAIM's first step: the group's pending entries idle >= min_idle, longest idle first (ties
    by ID), up to ``count``, moved to this consumer as XCLAIM moves them (delivery time now, one
    more delivery), each logged as the XCLAIM that replays it. Answers [id, fields, idle, earlier
    deliveries] per entry; an entry deleted from the stream keeps its reference and answers a nil
    body, as a read of the pending history does."""
    idle = sorted((entry.delivery_time, sid) for sid, entry in group.pel.items()
                  if now - entry.delivery_time >= min_idle)
    out = []
    for delivered, sid in idle[: count or None]:
        before = group.pel[sid].delivery_count
        _deliver(group, consumer_name, sid, now, before + 1)
        effects.append(claim_effect(key, group, consumer_name, sid))
        fields = stream.entries.get(sid)
        out.append([format_id(sid), list(fields) if fields is not None else None, now - delivered, before])
    return out


def claim_effect(key: bytes, group: ConsumerGroup, consumer: bytes, sid: StreamID) -> list[bytes]:
    """The XCLAIM that replays a claim exactly: absolute TIME, RETRYCOUNT, FORCE JUSTID, LASTID."""
    entry = group.pel[sid]
    return [b"XCLAIM", key, group.name, consumer, b"0", format_id(sid), b"TIME", b"%d" % entry.delivery_time,
            b"RETRYCOUNT", b"%d" % entry.delivery_count, b"FORCE", b"JUSTID", b"LASTID", format_id(group.last_id)]


def _deliver(group: ConsumerGroup, consumer_name: bytes, sid: StreamID, when: int, count: int) -> None:
    old = group.pel.get(sid)
    if old is not None and old.consumer in group.consumers:
        group.consumers[old.consumer].pending.pop(sid, None)
    entry = PendingEntry(consumer_name, when, count)
    group.pel[sid] = entry
    group.consumer(consumer_name).pending[sid] = entry  # type: ignore[union-attr]


# -- XACK / XPENDING ----------------------------------------------------------------------------


@command("XACK", -4, "write fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="5.0.0")
def xack(ctx: Ctx, argv: list[bytes]):
    """XACK key group id [id ...]"""
    ids = [parse_id(raw, strict=True) for raw in argv[3:]]
    stream = get_stream(ctx, argv[1])
    group = stream.groups.get(argv[2]) if stream is not None else None
    if group is None:
        return 0
    acked = 0
    for sid in ids:
        entry = group.pel.pop(sid, None)
        if entry is not None:
            consumer = group.consumers.get(entry.consumer)
            if consumer is not None:
                consumer.pending.pop(sid, None)
            acked += 1
    if acked:
        _changed(ctx, argv[1])
    return acked


@command("XPENDING", -3, "readonly", keys=(1, 1, 1), categories="@read @stream @slow", group=_GROUP, since="5.0.0")
def xpending(ctx: Ctx, argv: list[bytes]):
    """XPENDING key group [[IDLE min-idle-time] start end count [consumer]]"""
    stream, group = _group(ctx, argv[1], argv[2])
    if len(argv) == 3:
        return _pending_summary(group)
    i, min_idle = 3, 0
    if argv[3].upper() == b"IDLE":
        if len(argv) < 6:
            raise ReplyError(errors.SYNTAX)
        min_idle, i = parse_int(argv[4]), 5
    if len(argv) - i not in (3, 4):
        raise ReplyError(errors.SYNTAX)
    start = _bound(argv[i], True)
    end = _bound(argv[i + 1], False)
    count = parse_int(argv[i + 2])
    if count < 0:
        count = 0
    source = group.pel
    if len(argv) - i == 4:
        consumer = group.consumers.get(argv[i + 3])
        source = consumer.pending if consumer is not None else {}
    now = now_ms()
    out = []
    if start is None or end is None or start > end:
        return out
    for sid in source.irange(start, end) if source else ():
        entry = group.pel[sid]
        idle = max(now - entry.delivery_time, 0)
        if idle < min_idle:
            continue
        out.append([format_id(sid), entry.consumer, idle, entry.delivery_count])
        if len(out) >= count:
            break
    return out


def _bound(raw: bytes, is_start: bool) -> StreamID | None:
    from pion.server.commands.streams import _range_bound

    return _range_bound(raw, is_start)


def _pending_summary(group: ConsumerGroup) -> list:
    if not group.pel:
        return [0, None, None, NULL_ARRAY]
    per_consumer = [[c.name, b"%d" % len(c.pending)] for c in group.consumers.values() if c.pending]
    return [len(group.pel), format_id(group.pel.peekitem(0)[0]), format_id(group.pel.peekitem(-1)[0]), per_consumer]
