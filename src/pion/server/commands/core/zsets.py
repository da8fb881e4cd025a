"""Sorted-set commands: ZADD/ZINCRBY/ZREM, scores and ranks, counts, pops, ZRANDMEMBER, ZSCAN.

Ranges (ZRANGE & co., ZREM*RANGE*) live in ``zset_ranges``, set algebra in ``zset_ops``, the
blocking pops in ``blocking_pops``. Scores are parsed as Redis's strtod reads them (``zparse``)
and replied as doubles (RESP3 ``,``; RESP2 ``%.17g`` bulk strings).
"""

from __future__ import annotations

import math
import random

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY, Pairs, format_double
from pion.protocol.streamed import STREAM_MIN, sampled
from pion.server.args import parse_int
from pion.server.commands.core.lists import mpop_keys
from pion.server.commands.core.zparse import (
    NAN_SCORE,
    parse_count,
    parse_double,
    parse_lex_range,
    parse_mpop_tail,
    parse_numkeys,
    parse_score_range,
)
from pion.server.context import Ctx
from pion.server.deferred import can_defer
from pion.server.registry import command
from pion.storage.glob import glob_match
from pion.storage.scan import parse_cursor
from pion.storage.zset_value import ZSetValue, zset_limits

_W = "@write @sortedset"
_R = "@read @sortedset"
_ZADD_FLAGS = (b"nx", b"xx", b"ch", b"incr", b"gt", b"lt")


def shrink_done(ctx: Ctx, key: bytes, zset: ZSetValue) -> None:
    """After removals: delete an emptied set (with its "del" event) or signal the change."""
    if not zset.scores:
        ctx.db.delete(key)
        ctx.notify("g", "del", key)
    else:
        ctx.db.signal(key)


def _zadd_parse(argv: list[bytes]) -> tuple[set[bytes], list[tuple[float, bytes]]]:
    flags: set[bytes] = set()
    pos = 2
    while pos < len(argv) and argv[pos].lower() in _ZADD_FLAGS:
        flags.add(argv[pos].lower())
        pos += 1
    elements = len(argv) - pos
    if elements % 2 or not elements:
        raise ReplyError(errors.SYNTAX)
    if b"nx" in flags and b"xx" in flags:
        raise ReplyError("ERR XX and NX options at the same time are not compatible")
    if len(flags & {b"gt", b"lt", b"nx"}) > 1:
        raise ReplyError("ERR GT, LT, and/or NX options at the same time are not compatible")
    if b"incr" in flags and elements > 2:
        raise ReplyError("ERR INCR option supports a single increment-element pair")
    return flags, [(parse_double(argv[i]), argv[i + 1]) for i in range(pos, len(argv), 2)]


def zadd_apply(ctx: Ctx, key: bytes, flags: set[bytes], pairs: list[tuple[float, bytes]]):
    """zsetAdd for each pair; the reply ZADD/ZINCRBY/GEOADD give."""
    incr = b"incr" in flags
    zset = ctx.db.get_typed(key, ZSetValue)
    if zset is None and b"xx" in flags:
        return None if incr else 0
    created, zset = zset is None, zset or ZSetValue()
    limits = zset_limits(ctx.server.settings)
    added, updated, processed, result = 0, 0, 0, 0.0
    for score, member in pairs:
        current = zset.scores.get(member)
        if current is None:
            if b"xx" in flags:
                continue
            zset.set_score(member, score, limits)
            added, processed, result = added + 1, processed + 1, score
            continue
        if b"nx" in flags:
            continue
        if incr:
            score += current
            if math.isnan(score):
                raise ReplyError(NAN_SCORE)
        if (b"lt" in flags and score >= current) or (b"gt" in flags and score <= current):
            continue
        processed, result = processed + 1, score
        if score != current:
            zset.set_score(member, score)
            updated += 1
    _announce_adds(ctx, key, zset, created, added + updated, "zincr" if incr else "zadd")
    if incr:
        return result if processed else None
    return added + updated if b"ch" in flags else added


def _announce_adds(ctx: Ctx, key: bytes, zset: ZSetValue, created: bool, changed: int, event: str) -> None:
    if not changed:
        return
    if created:
        ctx.db.set(key, zset)
    else:
        ctx.db.signal(key)
    ctx.notify("z", event, key)
    ctx.dirty(changed)


@command("ZADD", -4, "write denyoom fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="sorted_set",
         since="1.2.0")
def zadd(ctx: Ctx, argv: list[bytes]):
    """ZADD key [NX | XX] [GT | LT] [CH] [INCR] score member [score member ...]"""
    flags, pairs = _zadd_parse(argv)
    return zadd_apply(ctx, argv[1], flags, pairs)


@command("ZINCRBY", 4, "write denyoom fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="sorted_set",
         since="1.2.0")
def zincrby(ctx: Ctx, argv: list[bytes]):
    """ZINCRBY key increment member"""
    return zadd_apply(ctx, argv[1], {b"incr"}, [(parse_double(argv[2]), argv[3])])


@command("ZREM", -3, "write fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="sorted_set", since="1.2.0")
def zrem(ctx: Ctx, argv: list[bytes]):
    """ZREM key member [member ...]"""
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    if zset is None:
        return 0
    removed = sum(1 for member in argv[2:] if zset.remove(member))
    if removed:
        ctx.notify("z", "zrem", argv[1])
        shrink_done(ctx, argv[1], zset)
        ctx.dirty(removed)
    return removed


@command("ZCARD", 2, "readonly fast", keys=(1, 1, 1), categories=f"{_R} @fast", group="sorted_set", since="1.2.0")
def zcard(ctx: Ctx, argv: list[bytes]):
    """ZCARD key"""
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    return 0 if zset is None else len(zset)


@command("ZSCORE", 3, "readonly fast", keys=(1, 1, 1), categories=f"{_R} @fast", group="sorted_set", since="1.2.0")
def zscore(ctx: Ctx, argv: list[bytes]):
    """ZSCORE key member"""
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    return None if zset is None else zset.scores.get(argv[2])


@command("ZMSCORE", -3, "readonly fast", keys=(1, 1, 1), categories=f"{_R} @fast", group="sorted_set",
         since="6.2.0")
def zmscore(ctx: Ctx, argv: list[bytes]):
    """ZMSCORE key member [member ...]"""
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    scores = {} if zset is None else zset.scores
    return [scores.get(member) for member in argv[2:]]


def _rank(ctx: Ctx, argv: list[bytes], reverse: bool):
    if len(argv) > 4:
        raise ReplyError(errors.wrong_arity(argv[0].decode("latin-1").lower()))
    with_score = len(argv) == 4
    if with_score and argv[3].lower() != b"withscore":
        raise ReplyError(errors.SYNTAX)
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    rank = None if zset is None else zset.rank(argv[2], reverse)
    if rank is None:
        return NULL_ARRAY if with_score else None
    return [rank, zset.scores[argv[2]]] if with_score else rank


@command("ZRANK", -3, "readonly fast", keys=(1, 1, 1), categories=f"{_R} @fast", group="sorted_set", since="2.0.0")
def zrank(ctx: Ctx, argv: list[bytes]):
    """ZRANK key member [WITHSCORE]"""
    return _rank(ctx, argv, False)


@command("ZREVRANK", -3, "readonly fast", keys=(1, 1, 1), categories=f"{_R} @fast", group="sorted_set",
         since="2.0.0")
def zrevrank(ctx: Ctx, argv: list[bytes]):
    """ZREVRANK key member [WITHSCORE]"""
    return _rank(ctx, argv, True)


@command("ZCOUNT", 4, "readonly fast", keys=(1, 1, 1), categories=f"{_R} @fast", group="sorted_set",
         since="2.0.0")
def zcount(ctx: Ctx, argv: list[bytes]):
    """ZCOUNT key min max"""
    spec = parse_score_range(argv[2], argv[3])
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    if zset is None:
        return 0
    start, stop = zset.score_span(spec)
    return stop - start


@command("ZLEXCOUNT", 4, "readonly fast", keys=(1, 1, 1), categories=f"{_R} @fast", group="sorted_set",
         since="2.8.9")
def zlexcount(ctx: Ctx, argv: list[bytes]):
    """ZLEXCOUNT key min max"""
    spec = parse_lex_range(argv[2], argv[3])
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    if zset is None:
        return 0
    start, stop = zset.lex_span(spec)
    return stop - start


def pop_pairs(ctx: Ctx, key: bytes, zset: ZSetValue, count: int, highest: bool) -> list[tuple[bytes, float]]:
    """Pop and announce (zpopmin/zpopmax event, "del" when emptied)."""
    popped = zset.pop(count, highest)
    ctx.notify("z", "zpopmax" if highest else "zpopmin", key)
    shrink_done(ctx, key, zset)
    ctx.dirty(len(popped))
    return popped


def _zpop(ctx: Ctx, argv: list[bytes], highest: bool):
    if len(argv) > 3:
        raise ReplyError(errors.SYNTAX)
    count = parse_count(argv[2]) if len(argv) == 3 else None
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    if zset is None or count == 0:
        return []
    popped = pop_pairs(ctx, argv[1], zset, count or 1, highest)
    if count is None:
        return [popped[0][0], popped[0][1]]
    return Pairs(popped)


@command("ZPOPMIN", -2, "write fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="sorted_set", since="5.0.0")
def zpopmin(ctx: Ctx, argv: list[bytes]):
    """ZPOPMIN key [count]"""
    return _zpop(ctx, argv, False)


@command("ZPOPMAX", -2, "write fast", keys=(1, 1, 1), categories=f"{_W} @fast", group="sorted_set", since="5.0.0")
def zpopmax(ctx: Ctx, argv: list[bytes]):
    """ZPOPMAX key [count]"""
    return _zpop(ctx, argv, True)


def zmpop_now(ctx: Ctx, keys: list[bytes], highest: bool, count: int, strict: bool = True):
    """Pop from the first non-empty set: [key, [[member, score], ...]] logged as ZPOPMIN/MAX."""
    for key in keys:
        value = ctx.db.get(key)
        if value is None:
            continue
        if value.__class__ is not ZSetValue:
            if strict:
                raise ReplyError(errors.WRONGTYPE)
            continue
        popped = pop_pairs(ctx, key, value, count, highest)
        ctx.rewrite([b"ZPOPMAX" if highest else b"ZPOPMIN", key, b"%d" % count])
        return [key, [[member, score] for member, score in popped]]
    return None


@command("ZMPOP", -4, "write", categories=f"{_W} @slow", group="sorted_set", since="7.0.0",
         key_finder=lambda argv: mpop_keys(argv, 1))
def zmpop(ctx: Ctx, argv: list[bytes]):
    """ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]"""
    numkeys = parse_numkeys(argv[1])
    lowest, count = parse_mpop_tail(argv, 2 + numkeys, (b"min", b"max"))
    reply = zmpop_now(ctx, argv[2 : 2 + numkeys], not lowest, max(count, 1))
    return NULL_ARRAY if reply is None else reply


def _random_count(argv: list[bytes]) -> tuple[int, bool]:
    count = parse_int(argv[2])
    if count == -(2**63):
        raise ReplyError(f"ERR value is out of range, value must between {-(2**63 - 1)} and {2**63 - 1}")
    if len(argv) > 4 or (len(argv) == 4 and argv[3].lower() != b"withscores"):
        raise ReplyError(errors.SYNTAX)
    if len(argv) == 4 and abs(count) > (2**63 - 1) // 2:
        raise ReplyError("ERR value is out of range")
    return count, len(argv) == 4


@command("ZRANDMEMBER", -2, "readonly", keys=(1, 1, 1), categories=f"{_R} @slow", group="sorted_set",
         since="6.2.0")
def zrandmember(ctx: Ctx, argv: list[bytes]):
    """ZRANDMEMBER key [count [WITHSCORES]]"""
    count, with_scores = _random_count(argv) if len(argv) > 2 else (None, False)
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    if count is None:
        return None if zset is None else zset.order[random.randrange(len(zset))][1]
    if zset is None:
        return []
    size = len(zset)
    if count < 0 and -count >= STREAM_MIN and can_defer(ctx):  # made in pieces (pion.protocol.streamed)
        if with_scores:
            return sampled([(member, score) for score, member in zset.order], -count, pairs=True)
        return sampled([member for _, member in zset.order], -count)
    if count < 0:  # one C call for the picks over a snapshot (not a sorted-list lookup per pick)
        picks = random.choices(list(zset.order), k=-count)
    elif count >= size:
        picks = list(zset.order)
        random.shuffle(picks)
    else:
        picks = [zset.order[i] for i in random.sample(range(size), count)]
    if with_scores:
        return Pairs((member, score) for score, member in picks)
    return [member for _, member in picks]


def listpack_score(score: float) -> bytes:
    """A score as a listpack holds it (d2string): integral values up to 2**62 as integers."""
    if -(2.0**62) <= score <= 2.0**62 and score == int(score):
        return b"%d" % int(score)
    return format_double(score)


def _scan_options(argv: list[bytes]) -> tuple[int, bytes | None]:
    count, pattern, pos = 10, None, 3
    while pos < len(argv):
        option = argv[pos].lower()
        if option == b"count" and pos + 1 < len(argv):
            count = parse_int(argv[pos + 1])
            if count < 1:
                raise ReplyError(errors.SYNTAX)
        elif option == b"match" and pos + 1 < len(argv):
            pattern = None if argv[pos + 1] == b"*" else argv[pos + 1]
        else:
            raise ReplyError(errors.SYNTAX)
        pos += 2
    return count, pattern


@command("ZSCAN", -3, "readonly", keys=(1, 1, 1), categories=f"{_R} @slow", group="sorted_set", since="2.8.0")
def zscan(ctx: Ctx, argv: list[bytes]):
    """ZSCAN key cursor [MATCH pattern] [COUNT count]"""
    cursor = parse_cursor(argv[2])
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    if zset is None:
        return [b"0", []]
    count, pattern = _scan_options(argv)
    cursor, batch = zset.scan(cursor, count)
    text = format_double if zset.skiplist else listpack_score
    out = []
    for member, score in batch:
        if pattern is None or glob_match(pattern, member):
            out += [member, text(score)]
    return [b"%d" % cursor, out]
