"""Blocking pops: BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX BZMPOP.

Each tries its non-blocking form first. With nothing to pop it returns a ``BlockRequest``
(clients are then served first come, first served when a push signals a key), or, inside
MULTI (and scripts, for BLMPOP/BZMPOP: the others carry Redis 7.0's ``noscript`` flag),
answers at once as a timeout would. A pop that is served, now or later, is
logged as its non-blocking form (BLPOP -> LPOP, BLMOVE -> LMOVE, BZMPOP -> ZPOPMIN ...),
never as the blocking command. While blocked, a key holding another type keeps the client
waiting (Redis 7.0); the first attempt answers WRONGTYPE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY
from pion.server.blocking import NOT_READY, BlockRequest
from pion.server.commands.core.lists import lmove_now, mpop_keys, pop_from, where_arg
from pion.server.commands.core.zparse import parse_block_timeout, parse_mpop_tail, parse_numkeys
from pion.server.commands.core.zsets import pop_pairs, zmpop_now
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.list_value import ListValue
from pion.storage.zset_value import ZSetValue

_LIST = "@write @list @slow @blocking"
_ZSET = "@write @sortedset @fast @blocking"


def _wait(ctx: Ctx, keys: list[bytes], timeout: float, attempt: Callable[[Ctx, bool], Any], immediate: Any):
    """Answer now if ``attempt`` pops something, else block (or answer ``immediate``)."""
    reply = attempt(ctx, True)
    if reply is not None:
        return reply
    if not ctx.can_block:
        return immediate

    def retry(retry_ctx: Ctx) -> Any:
        result = attempt(retry_ctx, False)
        return NOT_READY if result is None else result

    return BlockRequest(list(keys), timeout, retry, NULL_ARRAY)


def _first(ctx: Ctx, keys: list[bytes], cls: type, strict: bool) -> tuple[bytes, Any] | None:
    """The first key holding a non-empty ``cls`` value; another type is WRONGTYPE when strict."""
    for key in keys:
        value = ctx.db.get(key)
        if value is None:
            continue
        if value.__class__ is not cls:
            if strict:
                raise ReplyError(errors.WRONGTYPE)
            continue
        if len(value):
            return key, value
    return None


def _bpop(ctx: Ctx, argv: list[bytes], left: bool):
    timeout = parse_block_timeout(argv[-1])
    keys = argv[1:-1]

    def attempt(actx: Ctx, strict: bool):
        found = _first(actx, keys, ListValue, strict)
        if found is None:
            return None
        key, lst = found
        item = pop_from(actx, key, lst, left, 1)[0]
        actx.rewrite([b"LPOP" if left else b"RPOP", key])
        return [key, item]

    return _wait(ctx, keys, timeout, attempt, NULL_ARRAY)


@command("BLPOP", -3, "write noscript blocking", keys=(1, -2, 1), categories=_LIST, group="list", since="2.0.0")
def blpop(ctx: Ctx, argv: list[bytes]):
    """BLPOP key [key ...] timeout"""
    return _bpop(ctx, argv, True)


@command("BRPOP", -3, "write noscript blocking", keys=(1, -2, 1), categories=_LIST, group="list", since="2.0.0")
def brpop(ctx: Ctx, argv: list[bytes]):
    """BRPOP key [key ...] timeout"""
    return _bpop(ctx, argv, False)


def _bmove(ctx: Ctx, argv: list[bytes], left_from: bool, left_to: bool, timeout_raw: bytes):
    timeout = parse_block_timeout(timeout_raw)
    src, dst = argv[1], argv[2]
    logged = [b"LMOVE", src, dst, b"LEFT" if left_from else b"RIGHT", b"LEFT" if left_to else b"RIGHT"]

    def attempt(actx: Ctx, strict: bool):
        found = _first(actx, [src], ListValue, strict)
        if found is None:
            return None
        value = lmove_now(actx, src, dst, left_from, left_to)
        actx.rewrite(logged)
        return value

    return _wait(ctx, [src], timeout, attempt, None)


@command("BLMOVE", 6, "write denyoom noscript blocking", keys=(1, 2, 1), categories=_LIST, group="list", since="6.2.0")
def blmove(ctx: Ctx, argv: list[bytes]):
    """BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout"""
    left_from, left_to = where_arg(argv[3]), where_arg(argv[4])
    return _bmove(ctx, argv, left_from, left_to, argv[5])


@command("BRPOPLPUSH", 4, "write denyoom noscript blocking", keys=(1, 2, 1), categories=_LIST, group="list",
         since="2.2.0")
def brpoplpush(ctx: Ctx, argv: list[bytes]):
    """BRPOPLPUSH source destination timeout"""
    return _bmove(ctx, argv, False, True, argv[3])


@command("BLMPOP", -5, "write blocking", categories=_LIST, group="list", since="7.0.0",
         key_finder=lambda argv: mpop_keys(argv, 2))
def blmpop(ctx: Ctx, argv: list[bytes]):
    """BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]"""
    numkeys = parse_numkeys(argv[2])
    left, count = parse_mpop_tail(argv, 3 + numkeys, (b"left", b"right"))
    timeout = parse_block_timeout(argv[1])
    keys, count = argv[3 : 3 + numkeys], max(count, 1)

    def attempt(actx: Ctx, strict: bool):
        found = _first(actx, keys, ListValue, strict)
        if found is None:
            return None
        key, lst = found
        items = pop_from(actx, key, lst, left, count)
        actx.rewrite([b"LPOP" if left else b"RPOP", key, b"%d" % count])
        return [key, items]

    return _wait(ctx, keys, timeout, attempt, NULL_ARRAY)


def _bzpop(ctx: Ctx, argv: list[bytes], highest: bool):
    timeout = parse_block_timeout(argv[-1])
    keys = argv[1:-1]

    def attempt(actx: Ctx, strict: bool):
        found = _first(actx, keys, ZSetValue, strict)
        if found is None:
            return None
        key, zset = found
        member, score = pop_pairs(actx, key, zset, 1, highest)[0]
        actx.rewrite([b"ZPOPMAX" if highest else b"ZPOPMIN", key])
        return [key, member, score]

    return _wait(ctx, keys, timeout, attempt, NULL_ARRAY)


@command("BZPOPMIN", -3, "write noscript blocking fast", keys=(1, -2, 1), categories=_ZSET, group="sorted_set",
         since="5.0.0")
def bzpopmin(ctx: Ctx, argv: list[bytes]):
    """BZPOPMIN key [key ...] timeout"""
    return _bzpop(ctx, argv, False)


@command("BZPOPMAX", -3, "write noscript blocking fast", keys=(1, -2, 1), categories=_ZSET, group="sorted_set",
         since="5.0.0")
def bzpopmax(ctx: Ctx, argv: list[bytes]):
    """BZPOPMAX key [key ...] timeout"""
    return _bzpop(ctx, argv, True)


@command("BZMPOP", -5, "write blocking", categories="@write @sortedset @slow @blocking", group="sorted_set",
         since="7.0.0", key_finder=lambda argv: mpop_keys(argv, 2))
def bzmpop(ctx: Ctx, argv: list[bytes]):
    """BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]"""
    numkeys = parse_numkeys(argv[2])
    lowest, count = parse_mpop_tail(argv, 3 + numkeys, (b"min", b"max"))
    timeout = parse_block_timeout(argv[1])
    keys, count = argv[3 : 3 + numkeys], max(count, 1)
    return _wait(ctx, keys, timeout, lambda actx, strict: zmpop_now(actx, keys, not lowest, count, strict), NULL_ARRAY)
