"""List commands (non-blocking): pushes, pops, indexing, LINSERT/LREM/LTRIM, LPOS, LMOVE, LMPOP.

Values are ``ListValue`` (a deque). Every write notifies with Redis's event name, signals the
key (WATCH, and clients blocked in BLPOP wake up after this command), and deletes a list it
empties. The blocking commands live in ``blocking_lists``.
"""

from __future__ import annotations

from itertools import islice

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY, OK
from pion.server.args import parse_int
from pion.server.commands.core.zparse import parse_count, parse_mpop_tail, parse_numkeys
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.list_value import ListValue, entry_size, list_fill

_W = "@write @list"


def where_arg(raw: bytes) -> bool:
    """LEFT -> True, RIGHT -> False (LMOVE/BLMOVE/LMPOP), else a syntax error."""
    lowered = raw.lower()
    if lowered == b"left":
        return True
    if lowered == b"right":
        return False
    raise ReplyError(errors.SYNTAX)


def push_into(ctx: Ctx, key: bytes, lst: ListValue | None, values: list[bytes], left: bool) -> int:
    """Push onto ``lst`` (created when None) and announce it; returns the new length."""
    db = ctx.db
    fill = list_fill(ctx.server.settings)
    if lst is None:
        lst = ListValue()
        length = lst.push(values, left, fill)
        db.set(key, lst)
    else:
        length = lst.push(values, left, fill)
        db.signal(key)
    ctx.dirty(len(values))
    ctx.notify("l", "lpush" if left else "rpush", key)
    return length


def pop_from(ctx: Ctx, key: bytes, lst: ListValue, left: bool, count: int) -> list[bytes]:
    """Pop up to ``count`` items, announce it, delete the key if now empty."""
    items = [lst.pop(left) for _ in range(min(count, len(lst.items)))]
    ctx.notify("l", "lpop" if left else "rpop", key)
    after_shrink(ctx, key, lst)
    ctx.dirty()
    return items


def after_shrink(ctx: Ctx, key: bytes, lst: ListValue) -> None:
    if not lst.items:
        ctx.db.delete(key)
        ctx.notify("g", "del", key)
    else:
        lst.shrank(list_fill(ctx.server.settings))
        ctx.db.signal(key)


def _push(ctx: Ctx, argv: list[bytes], left: bool, existing_only: bool) -> int:
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None and existing_only:
        return 0
    return push_into(ctx, argv[1], lst, argv[2:], left)


@command("LPUSH", -3, "write denyoom fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="list")
def lpush(ctx: Ctx, argv: list[bytes]):
    """LPUSH key element [element ...]"""
    return _push(ctx, argv, True, False)


@command("RPUSH", -3, "write denyoom fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="list")
def rpush(ctx: Ctx, argv: list[bytes]):
    """RPUSH key element [element ...]"""
    return _push(ctx, argv, False, False)


@command("LPUSHX", -3, "write denyoom fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="list", since="2.2.0")
def lpushx(ctx: Ctx, argv: list[bytes]):
    """LPUSHX key element [element ...]"""
    return _push(ctx, argv, True, True)


@command("RPUSHX", -3, "write denyoom fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="list", since="2.2.0")
def rpushx(ctx: Ctx, argv: list[bytes]):
    """RPUSHX key element [element ...]"""
    return _push(ctx, argv, False, True)


def _pop(ctx: Ctx, argv: list[bytes], left: bool):
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity(argv[0].decode("latin-1").lower()))
    count = parse_count(argv[2]) if len(argv) == 3 else None
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        return None if count is None else NULL_ARRAY
    if count is None:
        return pop_from(ctx, argv[1], lst, left, 1)[0]
    if count == 0:
        return []
    return pop_from(ctx, argv[1], lst, left, count)


@command("LPOP", -2, "write fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="list")
def lpop(ctx: Ctx, argv: list[bytes]):
    """LPOP key [count]"""
    return _pop(ctx, argv, True)


@command("RPOP", -2, "write fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="list")
def rpop(ctx: Ctx, argv: list[bytes]):
    """RPOP key [count]"""
    return _pop(ctx, argv, False)


@command("LLEN", 2, "readonly fast", keys=(1, 1, 1), categories="@read @list @fast", group="list")
def llen(ctx: Ctx, argv: list[bytes]):
    """LLEN key"""
    lst = ctx.db.get_typed(argv[1], ListValue)
    return 0 if lst is None else len(lst.items)


@command("LINDEX", 3, "readonly", keys=(1, 1, 1), categories="@read @list @slow", group="list")
def lindex(ctx: Ctx, argv: list[bytes]):
    """LINDEX key index"""
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        return None
    index = parse_int(argv[2])
    items = lst.items
    if index < 0:
        index += len(items)
    return items[index] if 0 <= index < len(items) else None


@command("LSET", 4, "write denyoom", keys=(1, 1, 1), categories=f"{_W} @slow", group="list")
def lset(ctx: Ctx, argv: list[bytes]):
    """LSET key index element"""
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        raise ReplyError(errors.NO_SUCH_KEY)
    index = parse_int(argv[2])
    items = lst.items
    if index < 0:
        index += len(items)
    if not 0 <= index < len(items):
        raise ReplyError(errors.OUT_OF_RANGE)
    old, items[index] = items[index], argv[3]
    lst.adjust(entry_size(argv[3]) - entry_size(old), list_fill(ctx.server.settings))
    ctx.db.signal(argv[1])
    ctx.notify("l", "lset", argv[1])
    ctx.dirty()
    return OK


@command("LINSERT", 5, "write denyoom", keys=(1, 1, 1), categories=f"{_W} @slow", group="list", since="2.2.0")
def linsert(ctx: Ctx, argv: list[bytes]):
    """LINSERT key BEFORE|AFTER pivot element"""
    where = argv[2].lower()
    if where not in (b"before", b"after"):
        raise ReplyError(errors.SYNTAX)
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        return 0
    try:
        index = lst.items.index(argv[3])
    except ValueError:
        return -1
    lst.items.insert(index + (where == b"after"), argv[4])
    lst.adjust(entry_size(argv[4]), list_fill(ctx.server.settings))
    ctx.db.signal(argv[1])
    ctx.notify("l", "linsert", argv[1])
    ctx.dirty()
    return len(lst.items)


@command("LREM", 4, "write", keys=(1, 1, 1), categories=f"{_W} @slow", group="list")
def lrem(ctx: Ctx, argv: list[bytes]):
    """LREM key count element"""
    count = parse_int(argv[2])
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        return 0
    target, items = argv[3], lst.items
    limit = abs(count) or len(items)
    ordered = items if count >= 0 else reversed(items)
    kept, removed = [], 0
    for item in ordered:
        if removed < limit and item == target:
            removed += 1
        else:
            kept.append(item)
    if removed:
        lst.items = type(items)(kept if count >= 0 else reversed(kept))
        lst.nbytes -= removed * entry_size(target)
        ctx.notify("l", "lrem", argv[1])
        after_shrink(ctx, argv[1], lst)
        ctx.dirty(removed)
    return removed


def rank_window(start: int, end: int, length: int) -> tuple[int, int] | None:
    """Redis's start/end normalisation for LRANGE/LTRIM/ZRANGE: an inclusive window or None."""
    if start < 0:
        start += length
    if end < 0:
        end += length
    start = max(start, 0)
    if start > end or start >= length:
        return None
    return start, min(end, length - 1)


@command("LTRIM", 4, "write", keys=(1, 1, 1), categories=f"{_W} @slow", group="list")
def ltrim(ctx: Ctx, argv: list[bytes]):
    """LTRIM key start stop"""
    start, end = parse_int(argv[2]), parse_int(argv[3])
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        return OK
    size = len(lst.items)
    window = rank_window(start, end, size)
    head, tail = (size, 0) if window is None else (window[0], size - 1 - window[1])
    for _ in range(head):
        lst.pop(True)
    for _ in range(tail):
        lst.pop(False)
    removed = head + tail
    ctx.notify("l", "ltrim", argv[1])
    after_shrink(ctx, argv[1], lst)
    ctx.dirty(removed)
    return OK


@command("LRANGE", 4, "readonly", keys=(1, 1, 1), categories="@read @list @slow", group="list")
def lrange(ctx: Ctx, argv: list[bytes]):
    """LRANGE key start stop"""
    start, end = parse_int(argv[2]), parse_int(argv[3])
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        return []
    items = lst.items
    window = rank_window(start, end, len(items))
    if window is None:
        return []
    if window[0] > len(items) // 2:  # walk from the nearer end, as a deque indexes
        tail = list(islice(reversed(items), len(items) - 1 - window[1], len(items) - window[0]))
        tail.reverse()
        return tail
    return list(islice(items, window[0], window[1] + 1))


def _lpos_options(argv: list[bytes]) -> tuple[int, int, int]:
    rank, count, maxlen = 1, -1, 0
    pos = 3
    while pos < len(argv):
        option = argv[pos].lower()
        if pos + 1 >= len(argv) or option not in (b"rank", b"count", b"maxlen"):
            raise ReplyError(errors.SYNTAX)
        value = argv[pos + 1]
        if option == b"rank":
            rank = parse_int(value)
            if rank == 0:
                raise ReplyError(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the "
                    "second ... or use negative to start from the end of the list"
                )
        else:
            number = parse_int(value, f"ERR {option.upper().decode()} can't be negative")
            if number < 0:
                raise ReplyError(f"ERR {option.upper().decode()} can't be negative")
            count, maxlen = (number, maxlen) if option == b"count" else (count, number)
        pos += 2
    return rank, count, maxlen


@command("LPOS", -3, "readonly", keys=(1, 1, 1), categories="@read @list @slow", group="list", since="6.0.6")
def lpos(ctx: Ctx, argv: list[bytes]):
    """LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]"""
    rank, count, maxlen = _lpos_options(argv)
    lst = ctx.db.get_typed(argv[1], ListValue)
    if lst is None:
        return [] if count != -1 else None
    items, target = lst.items, argv[2]
    size = len(items)
    backwards = rank < 0
    rank = min(abs(rank), 2**63 - 1) if rank != -(2**63) else 1  # Redis's negation wraps here
    walk = reversed(items) if backwards else iter(items)
    found, matches = [], 0
    for index, item in enumerate(islice(walk, maxlen or None)):
        if item == target:
            matches += 1
            if matches >= rank:
                found.append(size - 1 - index if backwards else index)
                if count == -1 or (count and matches - rank + 1 >= count):
                    break
    if count == -1:
        return found[0] if found else None
    return found


def lmove_now(ctx: Ctx, src: bytes, dst: bytes, left_from: bool, left_to: bool) -> bytes | None:
    """Pop from src and push onto dst (LMOVE, and BLMOVE when src has items)."""
    db = ctx.db
    source = db.get_typed(src, ListValue)
    if source is None or not source.items:
        return None
    target = db.get_typed(dst, ListValue)
    value = source.pop(left_from)
    push_into(ctx, dst, target, [value], left_to)
    ctx.notify("l", "lpop" if left_from else "rpop", src)
    if source is not target or not source.items:
        after_shrink(ctx, src, source)
    return value


@command("LMOVE", 5, "write denyoom", keys=(1, 2, 1), categories=f"{_W} @slow", group="list", since="6.2.0")
def lmove(ctx: Ctx, argv: list[bytes]):
    """LMOVE source destination LEFT|RIGHT LEFT|RIGHT"""
    left_from, left_to = where_arg(argv[3]), where_arg(argv[4])
    return lmove_now(ctx, argv[1], argv[2], left_from, left_to)


@command("RPOPLPUSH", 3, "write denyoom", keys=(1, 2, 1), categories=f"{_W} @slow", group="list", since="1.2.0")
def rpoplpush(ctx: Ctx, argv: list[bytes]):
    """RPOPLPUSH source destination"""
    return lmove_now(ctx, argv[1], argv[2], False, True)


def mpop_keys(argv: list[bytes], numkeys_at: int) -> list[int]:
    """Key positions of LMPOP/ZMPOP-shaped commands (for COMMAND GETKEYS and ACLs)."""
    try:
        numkeys = parse_int(argv[numkeys_at])
    except (ReplyError, IndexError):
        return []
    return list(range(numkeys_at + 1, min(numkeys_at + 1 + max(numkeys, 0), len(argv))))


def lmpop_now(ctx: Ctx, keys: list[bytes], left: bool, count: int):
    """Pop from the first non-empty list of ``keys``: [key, items] logged as LPOP/RPOP, or None."""
    for key in keys:
        lst = ctx.db.get_typed(key, ListValue)
        if lst is not None and lst.items:
            items = pop_from(ctx, key, lst, left, count)
            ctx.rewrite([b"LPOP" if left else b"RPOP", key, b"%d" % count])
            return [key, items]
    return None


@command("LMPOP", -4, "write", categories=f"{_W} @slow", group="list", since="7.0.0",
         key_finder=lambda argv: mpop_keys(argv, 1))
def lmpop(ctx: Ctx, argv: list[bytes]):
    """LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]"""
    numkeys = parse_numkeys(argv[1])
    left, count = parse_mpop_tail(argv, 2 + numkeys, (b"left", b"right"))
    reply = lmpop_now(ctx, argv[2 : 2 + numkeys], left, max(count, 1))
    return NULL_ARRAY if reply is None else reply
