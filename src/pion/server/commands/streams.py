"""Stream commands: XADD XRANGE XREVRANGE XLEN XDEL XTRIM XREAD XSETID.

Consumer groups are in ``stream_groups``. Writes log deterministic effects: XADD with ``*``
is logged with the ID it generated, and trimming is logged as an exact ``XTRIM ... MINID``.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY, OK, KeyedArrays
from pion.server.args import parse_int
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.stream_value import (
    INVALID_ID,
    MAX_ID,
    MIN_ID,
    U64,
    Stream,
    StreamID,
    format_id,
    next_id,
    now_ms,
    parse_id,
    prev_id,
)

_GROUP = "stream"


def get_stream(ctx: Ctx, key: bytes) -> Stream | None:
    return ctx.db.get_typed(key, Stream)


def stream_if_any(ctx: Ctx, key: bytes) -> Stream | None:
    """The stream at ``key``, or None when absent or of another type: a blocked reader waits on
    through a key that is (for now) a list, as Redis's XREAD BLOCK does."""
    value = ctx.db.get(key)
    return value if value.__class__ is Stream else None


def entry_reply(entries: list) -> list:
    return [[format_id(sid), list(fields)] for sid, fields in entries]


# -- XADD / XTRIM ----------------------------------------------------------------------------


class TrimSpec:
    __slots__ = ("strategy", "threshold", "approx", "limit", "policy")

    def __init__(self) -> None:
        self.strategy: bytes | None = None
        self.threshold: int | StreamID = 0
        self.approx = False
        self.limit: int | None = None
        self.policy = KEEPREF

    def apply(self, stream: Stream, node_entries: int = 0, removed: list | None = None) -> int:
        """Trim as Redis does: ``~`` removes whole nodes only, at most LIMIT entries (default
        100 nodes' worth, LIMIT 0: no limit); with stream-node-max-entries 0 there are no nodes
        and ``~`` is exact. The reference policy (KEEPREF, DELREF, ACKED) is Redis 8.2's."""
        approx = self.approx and node_entries > 0
        if self.limit is not None:
            limit = self.limit
        else:
            limit = 100 * node_entries if approx else 0
        if self.strategy not in (b"MAXLEN", b"MINID"):
            return 0
        return stream.trim(self.threshold, self.strategy == b"MINID", approx, limit, self.policy,
                           removed if self.policy == ACKED else None)

    def effect(self, key: bytes, stream: Stream, removed: list[StreamID], last: StreamID) -> list[bytes]:
        """The exact XTRIM that replays this trim: MINID = the first entry left (KEEPREF,
        DELREF: they trim a prefix), or for ACKED, which skips entries a group still needs,
        MINID = just past the last one trimmed with ACKED again (every entry below it that no
        group needed went, so the same state trims the same set)."""
        if self.policy == ACKED:
            edge = next_id(max(removed)) or MAX_ID
            return [b"XTRIM", key, b"MINID", b"=", format_id(edge), ACKED]
        first = stream.first_id if stream.entries else next_id(last) or last
        return [b"XTRIM", key, b"MINID", b"=", format_id(first)] + ([DELREF] if self.policy == DELREF else [])


KEEPREF, DELREF, ACKED = b"KEEPREF", b"DELREF", b"ACKED"
_POLICIES = (KEEPREF, DELREF, ACKED)
_BOTH = "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"


def node_entries(ctx: Ctx) -> int:
    """stream-node-max-entries (0: no node granularity, ``~`` then trims exactly)."""
    return ctx.server.settings.stream_node_max_entries


def parse_trim(argv: list[bytes], i: int, spec: TrimSpec) -> int:
    """Parse ``MAXLEN|MINID [=|~] threshold`` at argv[i]; returns the next index."""
    if spec.strategy is not None:
        raise ReplyError(_BOTH)
    strategy = argv[i].upper()
    spec.approx = False
    i += 1
    if i + 1 < len(argv) and argv[i] in (b"=", b"~"):
        spec.approx = argv[i] == b"~"
        i += 1
    if strategy == b"MAXLEN":
        value = parse_int(argv[i])
        if value < 0:
            raise ReplyError("ERR The MAXLEN argument must be >= 0.")
        spec.threshold = value
    else:
        spec.threshold = parse_id(argv[i], strict=True)
    spec.strategy = strategy
    return i + 1


def parse_add_or_trim(argv: list[bytes], xadd: bool) -> tuple[TrimSpec, int, bool]:
    """Redis's streamParseAddOrTrimArgsOrReply: the options of XADD (up to the ID, which is
    checked here) or XTRIM (all of argv) in any order, then the checks Redis makes after the
    loop, in its order. Returns the trim, the ID's index (XADD) and NOMKSTREAM."""
    spec, nomkstream, limit_given, i = TrimSpec(), False, False, 2
    while i < len(argv):
        option = argv[i].upper()
        more = len(argv) - 1 - i
        if xadd and option == b"*":
            break
        if option in (b"MAXLEN", b"MINID") and more:
            i = parse_trim(argv, i, spec)
            continue
        if option == b"LIMIT" and more:
            value = parse_int(argv[i + 1])
            if value < 0:
                raise ReplyError("ERR The LIMIT argument must be >= 0.")
            spec.limit, limit_given, i = value, True, i + 2
            continue
        if option in _POLICIES:
            spec.policy = option
        elif xadd and option == b"NOMKSTREAM":
            nomkstream = True
        elif xadd:
            _check_id_syntax(argv[i])
            break
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1
    if spec.limit and spec.strategy is None:
        raise ReplyError("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
    if not xadd and spec.strategy is None:
        raise ReplyError("ERR syntax error, XTRIM must be called with a trimming strategy")
    if limit_given and not spec.approx:
        raise ReplyError("ERR syntax error, LIMIT cannot be used without the special ~ option")
    return spec, i, nomkstream


def _check_id_syntax(raw: bytes) -> None:
    """The ID argument of XADD is parsed where Redis parses it (before the arity check)."""
    if raw != b"*":
        parse_id(raw[:-2] if raw.endswith(b"-*") else raw, strict=True)


@command("XADD", -5, "write denyoom fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="5.0.0")
def xadd(ctx: Ctx, argv: list[bytes]):
    """XADD key [NOMKSTREAM] [KEEPREF | DELREF | ACKED] [MAXLEN | MINID [= | ~] threshold [LIMIT count]] * | id field value [field value ...]"""
    key = argv[1]
    trim, i, nomkstream = parse_add_or_trim(argv, xadd=True)
    fields = argv[i + 1 :]
    if i >= len(argv) or not fields or len(fields) % 2:
        raise ReplyError(errors.wrong_arity("xadd"))
    stream = get_stream(ctx, key)
    new_id = _new_id(argv[i], stream)
    if stream is None:
        if nomkstream:
            return None
        stream = Stream()
        ctx.db.set(key, stream)
    if new_id is None:
        new_id = _auto_id(stream)
    _check_id_order(new_id, stream, "XADD")
    nodes = node_entries(ctx)
    stream.add(new_id, list(fields), nodes)
    removed: list[StreamID] = []
    trimmed = trim.apply(stream, nodes, removed)
    ctx.db.signal(key)
    ctx.dirty()
    ctx.rewrite([b"XADD", key, format_id(new_id), *fields])
    if trimmed:
        ctx.propagate(trim.effect(key, stream, removed, new_id))
    ctx.notify("t", "xadd", key)
    if trimmed:
        ctx.notify("t", "xtrim", key)
    return format_id(new_id)


def _new_id(raw: bytes, stream: Stream | None) -> StreamID | None:
    """None means fully automatic ('*'); 'ms-*' picks the sequence."""
    if raw == b"*":
        return None
    if raw.endswith(b"-*"):
        ms = parse_id(raw[:-2], strict=True)[0]
        last = stream.last_id if stream is not None else MIN_ID
        if last[0] == ms:
            if last[1] == U64:
                raise ReplyError("ERR The ID specified in XADD is equal or smaller than the target stream top item")
            return ms, last[1] + 1
        return ms, 0 if ms > 0 else 1
    sid = parse_id(raw, strict=True)
    if sid == MIN_ID:
        raise ReplyError("ERR The ID specified in XADD must be greater than 0-0")
    return sid


def _auto_id(stream: Stream) -> StreamID:
    ms = now_ms()
    last = stream.last_id
    if ms > last[0]:
        return ms, 0
    following = next_id(last)
    if following is None:
        raise ReplyError("ERR The stream has exhausted the last possible ID, unable to add more items")
    return following


def _check_id_order(sid: StreamID, stream: Stream, name: str) -> None:
    if sid <= stream.last_id:
        raise ReplyError(f"ERR The ID specified in {name} is equal or smaller than the target stream top item")


@command("XTRIM", -4, "write", keys=(1, 1, 1), categories="@write @stream @slow", group=_GROUP, since="5.0.0")
def xtrim(ctx: Ctx, argv: list[bytes]):
    """XTRIM key MAXLEN | MINID [= | ~] threshold [LIMIT count] [KEEPREF | DELREF | ACKED]"""
    trim, _, _ = parse_add_or_trim(argv, xadd=False)
    stream = get_stream(ctx, argv[1])
    if stream is None:
        return 0
    removed: list[StreamID] = []
    count = trim.apply(stream, node_entries(ctx), removed)
    if count:
        ctx.db.signal(argv[1])
        ctx.dirty()
        ctx.notify("t", "xtrim", argv[1])
        ctx.rewrite(trim.effect(argv[1], stream, removed, stream.last_id))
    return count


# -- reads ------------------------------------------------------------------------------------


def _range_bound(raw: bytes, is_start: bool) -> StreamID | None:
    """A range bound: '-', '+', 'ms', 'ms-seq', or exclusive '(id'; an exclusive bound past the
    first or last possible ID is an error, as in Redis."""
    if raw.startswith(b"("):
        if raw in (b"(-", b"(+"):
            raise ReplyError(INVALID_ID)
        sid = parse_id(raw[1:], 0 if is_start else U64, strict=True)
        moved = next_id(sid) if is_start else prev_id(sid)
        if moved is None:
            raise ReplyError(f"ERR invalid {'start' if is_start else 'end'} ID for the interval")
        return moved
    return parse_id(raw, 0 if is_start else U64)


def _count_option(argv: list[bytes], i: int) -> int | None:
    if i == len(argv):
        return None
    if len(argv) != i + 2 or argv[i].upper() != b"COUNT":
        raise ReplyError(errors.SYNTAX)
    count = parse_int(argv[i + 1])
    return max(count, 0)


@command("XRANGE", -4, "readonly", keys=(1, 1, 1), categories="@read @stream @slow", group=_GROUP, since="5.0.0")
def xrange(ctx: Ctx, argv: list[bytes]):
    """XRANGE key start end [COUNT count]"""
    return _range(ctx, argv, argv[2], argv[3], reverse=False)


@command("XREVRANGE", -4, "readonly", keys=(1, 1, 1), categories="@read @stream @slow", group=_GROUP, since="5.0.0")
def xrevrange(ctx: Ctx, argv: list[bytes]):
    """XREVRANGE key end start [COUNT count]"""
    return _range(ctx, argv, argv[3], argv[2], reverse=True)


def _range(ctx: Ctx, argv: list[bytes], raw_start: bytes, raw_end: bytes, reverse: bool):
    """XRANGE and XREVRANGE: the same bounds and COUNT rules, walked in either direction."""
    start, end = _range_bound(raw_start, True), _range_bound(raw_end, False)
    count = _count_option(argv, 4)
    if count == 0:
        return NULL_ARRAY
    stream = get_stream(ctx, argv[1])
    if stream is None or start is None or end is None:
        return []
    return entry_reply(stream.range(start, end, count, reverse=reverse))


@command("XLEN", 2, "readonly fast", keys=(1, 1, 1), categories="@read @stream @fast", group=_GROUP, since="5.0.0")
def xlen(ctx: Ctx, argv: list[bytes]):
    """XLEN key"""
    stream = get_stream(ctx, argv[1])
    return len(stream) if stream is not None else 0


@command("XDEL", -3, "write fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="5.0.0")
def xdel(ctx: Ctx, argv: list[bytes]):
    """XDEL key id [id ...]"""
    ids = [parse_id(raw, strict=True) for raw in argv[2:]]
    stream = get_stream(ctx, argv[1])
    if stream is None:
        return 0
    deleted = sum(stream.delete(sid) for sid in ids)
    if deleted:
        ctx.db.signal(argv[1])
        ctx.dirty()
        ctx.notify("t", "xdel", argv[1])
    return deleted


@command("XSETID", -3, "write denyoom fast", keys=(1, 1, 1), categories="@write @stream @fast", group=_GROUP, since="5.0.0")
def xsetid(ctx: Ctx, argv: list[bytes]):
    """XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]"""
    sid = parse_id(argv[2], strict=True)
    added = max_deleted = None
    i = 3
    while i < len(argv):
        option = argv[i].upper()
        if option == b"ENTRIESADDED" and i + 1 < len(argv):
            added = parse_int(argv[i + 1])
            if added < 0:
                raise ReplyError("ERR entries_added must be positive")
        elif option == b"MAXDELETEDID" and i + 1 < len(argv):
            max_deleted = parse_id(argv[i + 1], strict=True)
            if sid < max_deleted:
                raise ReplyError("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
        else:
            raise ReplyError(errors.SYNTAX)
        i += 2
    stream = get_stream(ctx, argv[1])
    if stream is None:
        raise ReplyError("ERR no such key")
    if stream.entries and sid < stream.entries.peekitem(-1)[0]:
        raise ReplyError("ERR The ID specified in XSETID is smaller than the target stream top item")
    if added is not None and len(stream) > added:
        raise ReplyError("ERR The entries_added specified in XSETID is smaller than the target stream length")
    stream.last_id = sid
    if added is not None:
        stream.entries_added = added
    if max_deleted is not None:
        stream.max_deleted_id = max_deleted
    ctx.db.signal(argv[1])
    ctx.dirty()
    ctx.notify("t", "xsetid", argv[1])
    return OK


# -- XREAD ----------------------------------------------------------------------------------


def streams_keys(argv: list[bytes]) -> list[int]:
    """Key positions of XREAD/XREADGROUP: the first half of what follows STREAMS."""
    for i, arg in enumerate(argv):
        if arg.upper() == b"STREAMS":
            rest = len(argv) - i - 1
            return list(range(i + 1, i + 1 + rest // 2))
    return []


class ReadOptions:
    """XREAD's and XREADGROUP's options: COUNT, BLOCK (seconds), NOACK, CLAIM (ms), the keys and IDs."""

    __slots__ = ("count", "block", "noack", "claim", "keys", "ids")

    def __init__(self) -> None:
        self.count: int | None = None
        self.block: float | None = None
        self.noack = False
        self.claim: int | None = None
        self.keys: list[bytes] = []
        self.ids: list[bytes] = []


def parse_read_options(argv: list[bytes], start: int, group: bool, in_script: bool = False) -> ReadOptions:
    """[COUNT n] [BLOCK ms] [CLAIM min-idle-time] [NOACK] STREAMS keys... ids...; BLOCK is
    refused inside scripts, NOACK and CLAIM (Redis 8.4) outside XREADGROUP."""
    opts = ReadOptions()
    i = start
    while i < len(argv):
        option = argv[i].upper()
        if option == b"COUNT" and i + 1 < len(argv):
            opts.count = max(parse_int(argv[i + 1]), 0) or None
            i += 2
        elif option == b"BLOCK" and i + 1 < len(argv):
            if in_script:
                raise ReplyError(f"ERR {argv[0].decode('utf-8', 'replace')} command is not allowed with BLOCK "
                                 "option from scripts")
            block = parse_int(argv[i + 1], "ERR timeout is not an integer or out of range")
            if block < 0:
                raise ReplyError("ERR timeout is negative")
            opts.block = block / 1000.0
            i += 2
        elif option == b"NOACK":
            if not group:
                raise ReplyError("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
            opts.noack, i = True, i + 1
        elif option == b"CLAIM" and i + 1 < len(argv):
            if not group:
                raise ReplyError("ERR The CLAIM option is only supported by XREADGROUP. You called XREAD instead.")
            opts.claim = max(parse_int(argv[i + 1], "ERR Invalid min-idle-time argument for XREADGROUP"), 0)
            i += 2
        elif option == b"STREAMS":
            rest = argv[i + 1 :]
            if not rest or len(rest) % 2:
                name = "xreadgroup" if group else "xread"
                what = "an ID or '>'" if group else "an ID"
                raise ReplyError(f"ERR Unbalanced '{name}' list of streams: for each stream key {what} must be specified.")
            half = len(rest) // 2
            opts.keys, opts.ids = rest[:half], rest[half:]
            return opts
        else:
            raise ReplyError(errors.SYNTAX)
    raise ReplyError(errors.SYNTAX)


@command("XREAD", -4, "readonly blocking movablekeys", categories="@read @stream @slow @blocking", group=_GROUP, since="5.0.0", key_finder=streams_keys)
def xread(ctx: Ctx, argv: list[bytes]):
    """XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]"""
    opts = parse_read_options(argv, 1, group=False, in_script=ctx.client.in_script)
    count, block, keys, raw_ids = opts.count, opts.block, opts.keys, opts.ids
    after: list[StreamID] = []
    for key, raw in zip(keys, raw_ids, strict=True):
        if raw == b">":
            raise ReplyError("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.")
        if raw == b"$":
            stream = get_stream(ctx, key)
            after.append(stream.last_id if stream is not None else MIN_ID)
        else:
            after.append(parse_id(raw, strict=True) if raw != b"+" else _last_entry_before(ctx, key))
    reply = _read_new(ctx, keys, after, count)
    if reply is not None or block is None:
        return reply if reply is not None else NULL_ARRAY
    if not ctx.can_block:
        return NULL_ARRAY

    def retry(retry_ctx: Ctx):
        found = _read_new(retry_ctx, keys, after, count, stream_if_any)
        return NOT_READY if found is None else found

    return BlockRequest(keys=list(keys), timeout=block, retry=retry, on_timeout=NULL_ARRAY)


def _last_entry_before(ctx: Ctx, key: bytes) -> StreamID:
    stream = get_stream(ctx, key)
    if stream is None or not stream.entries:
        return MIN_ID
    return prev_id(stream.entries.peekitem(-1)[0]) or MIN_ID


def _read_new(ctx: Ctx, keys: list[bytes], after: list[StreamID], count: int | None,
              lookup=get_stream) -> KeyedArrays | None:
    result = KeyedArrays()
    for key, last in zip(keys, after, strict=True):
        stream = lookup(ctx, key)
        if stream is None:
            continue
        start = next_id(last)
        if start is None:
            continue
        entries = stream.range(start, MAX_ID, count)
        if entries:
            result[key] = entry_reply(entries)
    return result or None
