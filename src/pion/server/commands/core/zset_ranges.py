"""Sorted-set ranges: ZRANGE (BYSCORE, BYLEX, REV, LIMIT, WITHSCORES), the older ZRANGEBY* and
ZREVRANGE* forms, ZRANGESTORE, and ZREMRANGEBYRANK/SCORE/LEX.

All forms go through ``zrange_generic``, a port of Redis's zrangeGenericCommand, so options,
their conflicts and error texts match in every spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import Pairs
from pion.server.args import parse_int
from pion.server.commands.core.lists import rank_window
from pion.server.commands.core.zparse import parse_lex_range, parse_score_range
from pion.server.commands.core.zsets import shrink_done
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.zset_value import ZSetValue, zset_limits

_R = "@read @sortedset @slow"
_W = "@write @sortedset @slow"
RANK, SCORE, LEX = "rank", "score", "lex"


@dataclass(slots=True)
class RangeQuery:
    kind: str
    reverse: bool
    low: object = None
    high: object = None
    offset: int = 0
    limit: int = -1
    with_scores: bool = False


def _parse_options(argv: list[bytes], at: int, store: bool, kind: str | None, reverse: bool | None) -> RangeQuery:
    with_scores, offset, limit = False, 0, -1
    pos = at + 3
    while pos < len(argv):
        option = argv[pos].lower()
        if not store and option == b"withscores":
            with_scores = True
        elif option == b"limit" and len(argv) - pos - 1 >= 2:
            offset, limit = parse_int(argv[pos + 1]), parse_int(argv[pos + 2])
            pos += 2
        elif reverse is None and option == b"rev":
            reverse = True
        elif kind is None and option in (b"bylex", b"byscore"):
            kind = LEX if option == b"bylex" else SCORE
        else:
            raise ReplyError(errors.SYNTAX)
        pos += 1
    kind, reverse = kind or RANK, bool(reverse)
    if limit != -1 and kind == RANK:
        raise ReplyError("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    if with_scores and kind == LEX:
        raise ReplyError("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    return RangeQuery(kind, reverse, offset=offset, limit=limit, with_scores=with_scores)


def parse_range(argv: list[bytes], at: int, store: bool, kind: str | None, reverse: bool | None) -> RangeQuery:
    """Options after ``key min max`` (key at ``at``), then the range itself."""
    query = _parse_options(argv, at, store, kind, reverse)
    low, high = argv[at + 1], argv[at + 2]
    if query.reverse and query.kind != RANK:
        low, high = high, low  # given as max min
    if query.kind == RANK:
        query.low, query.high = parse_int(low), parse_int(high)
    elif query.kind == SCORE:
        query.low = parse_score_range(low, high)
    else:
        query.low = parse_lex_range(low, high)
    return query


def select(zset: ZSetValue, query: RangeQuery) -> list[tuple[float, bytes]]:
    """The (score, member) pairs a query names, in reply order."""
    size = len(zset)
    if query.kind == RANK:
        window = rank_window(query.low, query.high, size)  # type: ignore[arg-type]
        if window is None:
            return []
        start, end = window
        if query.reverse:
            return zset.span(size - 1 - end, size - start, reverse=True)
        return zset.span(start, end + 1)
    if query.kind == SCORE:
        start, stop = zset.score_span(query.low)  # type: ignore[arg-type]
    else:
        start, stop = zset.lex_span(query.low, query.reverse)  # type: ignore[arg-type]
    offset, limit = query.offset, query.limit
    if offset < 0 or offset >= stop - start:
        return []
    available = stop - start - offset
    take = available if limit < 0 else min(limit, available)
    if query.reverse:
        return zset.span(stop - offset - take, stop - offset, reverse=True)
    return zset.span(start + offset, start + offset + take)


_MEMBER = itemgetter(1)


def zrange_generic(ctx: Ctx, argv: list[bytes], at: int, kind: str | None, reverse: bool | None):
    """Z[REV]RANGE[BYSCORE|BYLEX] reply for the key at ``at``."""
    query = parse_range(argv, at, False, kind, reverse)
    zset = ctx.db.get_typed(argv[at], ZSetValue)
    if zset is None:
        return []
    pairs = select(zset, query)
    if query.with_scores:
        return Pairs((member, score) for score, member in pairs)
    return list(map(_MEMBER, pairs))  # C-level: a long range is streamed, its building should not dominate


def store_result(ctx: Ctx, dst: bytes, pairs, event: str) -> int:
    """Replace ``dst`` with a new sorted set (or delete it when empty); returns its size."""
    zset = ZSetValue.from_pairs(pairs, zset_limits(ctx.server.settings))
    if zset.scores:
        ctx.db.set(dst, zset)
        ctx.notify("z", event, dst)
        ctx.dirty()
    elif ctx.db.delete(dst):
        ctx.notify("g", "del", dst)
        ctx.dirty()
    return len(zset)


@command("ZRANGE", -4, "readonly", keys=(1, 1, 1), categories=_R, group="sorted_set", since="1.2.0")
def zrange(ctx: Ctx, argv: list[bytes]):
    """ZRANGE key start stop [BYSCORE | BYLEX] [REV] [LIMIT offset count] [WITHSCORES]"""
    return zrange_generic(ctx, argv, 1, None, None)


@command("ZRANGESTORE", -5, "write denyoom", keys=(1, 2, 1), categories=_W, group="sorted_set", since="6.2.0")
def zrangestore(ctx: Ctx, argv: list[bytes]):
    """ZRANGESTORE dst src min max [BYSCORE | BYLEX] [REV] [LIMIT offset count]"""
    query = parse_range(argv, 2, True, None, None)
    zset = ctx.db.get_typed(argv[2], ZSetValue)
    pairs = [] if zset is None else select(zset, query)
    return store_result(ctx, argv[1], ((member, score) for score, member in pairs), "zrangestore")


@command("ZREVRANGE", -4, "readonly", keys=(1, 1, 1), categories=_R, group="sorted_set", since="1.2.0")
def zrevrange(ctx: Ctx, argv: list[bytes]):
    """ZREVRANGE key start stop [WITHSCORES]"""
    return zrange_generic(ctx, argv, 1, RANK, True)


@command("ZRANGEBYSCORE", -4, "readonly", keys=(1, 1, 1), categories=_R, group="sorted_set", since="1.0.5")
def zrangebyscore(ctx: Ctx, argv: list[bytes]):
    """ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]"""
    return zrange_generic(ctx, argv, 1, SCORE, False)


@command("ZREVRANGEBYSCORE", -4, "readonly", keys=(1, 1, 1), categories=_R, group="sorted_set", since="2.2.0")
def zrevrangebyscore(ctx: Ctx, argv: list[bytes]):
    """ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]"""
    return zrange_generic(ctx, argv, 1, SCORE, True)


@command("ZRANGEBYLEX", -4, "readonly", keys=(1, 1, 1), categories=_R, group="sorted_set", since="2.8.9")
def zrangebylex(ctx: Ctx, argv: list[bytes]):
    """ZRANGEBYLEX key min max [LIMIT offset count]"""
    return zrange_generic(ctx, argv, 1, LEX, False)


@command("ZREVRANGEBYLEX", -4, "readonly", keys=(1, 1, 1), categories=_R, group="sorted_set", since="2.8.9")
def zrevrangebylex(ctx: Ctx, argv: list[bytes]):
    """ZREVRANGEBYLEX key max min [LIMIT offset count]"""
    return zrange_generic(ctx, argv, 1, LEX, True)


def _zremrange(ctx: Ctx, argv: list[bytes], kind: str, event: str) -> int:
    if kind == RANK:
        low, high = parse_int(argv[2]), parse_int(argv[3])
    elif kind == SCORE:
        spec = parse_score_range(argv[2], argv[3])
    else:
        spec = parse_lex_range(argv[2], argv[3])
    zset = ctx.db.get_typed(argv[1], ZSetValue)
    if zset is None:
        return 0
    if kind == RANK:
        window = rank_window(low, high, len(zset))
        start, stop = (0, 0) if window is None else (window[0], window[1] + 1)
    else:
        start, stop = zset.score_span(spec) if kind == SCORE else zset.lex_span(spec)
    removed = zset.remove_span(start, stop)
    if removed:
        ctx.notify("z", event, argv[1])
        shrink_done(ctx, argv[1], zset)
        ctx.dirty(removed)
    return removed


@command("ZREMRANGEBYRANK", 4, "write", keys=(1, 1, 1), categories=_W, group="sorted_set", since="2.0.0")
def zremrangebyrank(ctx: Ctx, argv: list[bytes]):
    """ZREMRANGEBYRANK key start stop"""
    return _zremrange(ctx, argv, RANK, "zremrangebyrank")


@command("ZREMRANGEBYSCORE", 4, "write", keys=(1, 1, 1), categories=_W, group="sorted_set", since="1.2.0")
def zremrangebyscore(ctx: Ctx, argv: list[bytes]):
    """ZREMRANGEBYSCORE key min max"""
    return _zremrange(ctx, argv, SCORE, "zremrangebyscore")


@command("ZREMRANGEBYLEX", 4, "write", keys=(1, 1, 1), categories=_W, group="sorted_set", since="2.8.9")
def zremrangebylex(ctx: Ctx, argv: list[bytes]):
    """ZREMRANGEBYLEX key min max"""
    return _zremrange(ctx, argv, LEX, "zremrangebylex")
