"""Sorted-set algebra: ZUNION/ZINTER/ZDIFF (+STORE) and ZINTERCARD, WEIGHTS and AGGREGATE.

A port of Redis's zunionInterDiffGenericCommand: plain sets count as sorted sets whose scores
are all 1; inputs are visited smallest first (for union and intersection) so floating-point
sums add up in Redis's order; ``inf + -inf`` sums to 0 as in Redis.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import Pairs
from pion.server.args import parse_int
from pion.server.commands.core.zparse import parse_double
from pion.server.commands.core.zset_ranges import store_result
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.keyspace import type_name
from pion.storage.zset_value import ZSetValue

UNION, INTER, DIFF = "union", "inter", "diff"


def set_scores(value: object) -> dict[bytes, float]:
    """Members of a sorted set or a plain set (score 1), as member -> score."""
    if value.__class__ is ZSetValue:
        return value.scores  # type: ignore[attr-defined]
    members = getattr(value, "members", value)
    return dict.fromkeys(members, 1.0)  # type: ignore[call-overload]


def _aggregate(name: bytes) -> Callable[[float, float], float]:
    if name == b"sum":
        return lambda total, value: 0.0 if math.isnan(total + value) else total + value
    if name == b"min":
        return lambda total, value: value if value < total else total
    if name == b"max":
        return lambda total, value: value if value > total else total
    raise ReplyError(errors.SYNTAX)


def _inputs(ctx: Ctx, argv: list[bytes], at: int, name: str) -> list[dict[bytes, float]]:
    numkeys = parse_int(argv[at])
    if numkeys < 1:
        raise ReplyError(f"ERR at least 1 input key is needed for '{name}' command")
    if numkeys > len(argv) - at - 1:
        raise ReplyError(errors.SYNTAX)
    inputs = []
    for key in argv[at + 1 : at + 1 + numkeys]:
        value = ctx.db.get(key)
        if value is not None and type_name(value) not in ("zset", "set"):
            raise ReplyError(errors.WRONGTYPE)
        inputs.append({} if value is None else set_scores(value))
    return inputs


def _options(argv: list[bytes], pos: int, count: int, op: str, store: bool, card: bool):
    weights, aggregate, with_scores, limit = [1.0] * count, _aggregate(b"sum"), False, 0
    while pos < len(argv):
        option, left = argv[pos].lower(), len(argv) - pos
        if op != DIFF and not card and option == b"weights" and left >= count + 1:
            weights = [parse_double(raw, "ERR weight value is not a float") for raw in argv[pos + 1 : pos + 1 + count]]
            pos += count + 1
        elif op != DIFF and not card and option == b"aggregate" and left >= 2:
            aggregate = _aggregate(argv[pos + 1].lower())
            pos += 2
        elif not store and not card and option == b"withscores":
            with_scores, pos = True, pos + 1
        elif card and option == b"limit" and left >= 2:
            limit = parse_int(argv[pos + 1], "ERR LIMIT can't be negative")
            if limit < 0:
                raise ReplyError("ERR LIMIT can't be negative")
            pos += 2
        else:
            raise ReplyError(errors.SYNTAX)
    return weights, aggregate, with_scores, limit


def combine(op: str, inputs: list[dict[bytes, float]], weights: list[float], aggregate, limit: int = 0):
    """The result as member -> score (for INTER with ``limit``: stops after that many)."""
    if op == DIFF:
        first, others = inputs[0], inputs[1:]
        return {m: s for m, s in first.items() if not any(m in other for other in others)}
    order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
    sources = [(inputs[i], weights[i]) for i in order]
    result: dict[bytes, float] = {}
    if op == UNION:
        for scores, weight in sources:
            for member, score in scores.items():
                value = weight * score
                value = 0.0 if math.isnan(value) else value
                result[member] = aggregate(result[member], value) if member in result else value
        return result
    (first, first_weight), rest = sources[0], sources[1:]
    for member, score in first.items():
        total = first_weight * score
        total = 0.0 if math.isnan(total) else total
        for scores, weight in rest:
            if member not in scores:
                break
            total = aggregate(total, scores[member] * weight)
        else:
            result[member] = total
            if limit and len(result) >= limit:
                break
    return result


def _algebra(ctx: Ctx, argv: list[bytes], op: str, store: bool):
    at = 2 if store else 1
    name = argv[0].decode("latin-1").lower()
    inputs = _inputs(ctx, argv, at, name)
    weights, aggregate, with_scores, _ = _options(argv, at + 1 + len(inputs), len(inputs), op, store, False)
    result = combine(op, inputs, weights, aggregate)
    if store:
        return store_result(ctx, argv[1], result.items(), f"z{op}store")
    pairs = sorted((score, member) for member, score in result.items())
    if with_scores:
        return Pairs((member, score) for score, member in pairs)
    return [member for _, member in pairs]


def _numkeys_keys(argv: list[bytes], at: int) -> list[int]:
    try:
        numkeys = parse_int(argv[at])
    except (ReplyError, IndexError):
        return []
    return list(range(at + 1, min(at + 1 + max(numkeys, 0), len(argv))))


def _store_keys(argv: list[bytes]) -> list[int]:
    return [1, *_numkeys_keys(argv, 2)]


_RD = dict(categories="@read @sortedset @slow", group="sorted_set", key_finder=lambda argv: _numkeys_keys(argv, 1))
_ST = dict(keys=(1, 1, 1), categories="@write @sortedset @slow", group="sorted_set", key_finder=_store_keys)


@command("ZUNION", -3, "readonly", since="6.2.0", **_RD)
def zunion(ctx: Ctx, argv: list[bytes]):
    """ZUNION numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]"""
    return _algebra(ctx, argv, UNION, False)


@command("ZINTER", -3, "readonly", since="6.2.0", **_RD)
def zinter(ctx: Ctx, argv: list[bytes]):
    """ZINTER numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]"""
    return _algebra(ctx, argv, INTER, False)


@command("ZDIFF", -3, "readonly", since="6.2.0", **_RD)
def zdiff(ctx: Ctx, argv: list[bytes]):
    """ZDIFF numkeys key [key ...] [WITHSCORES]"""
    return _algebra(ctx, argv, DIFF, False)


@command("ZUNIONSTORE", -4, "write denyoom", since="2.0.0", **_ST)
def zunionstore(ctx: Ctx, argv: list[bytes]):
    """ZUNIONSTORE destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX]"""
    return _algebra(ctx, argv, UNION, True)


@command("ZINTERSTORE", -4, "write denyoom", since="2.0.0", **_ST)
def zinterstore(ctx: Ctx, argv: list[bytes]):
    """ZINTERSTORE destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX]"""
    return _algebra(ctx, argv, INTER, True)


@command("ZDIFFSTORE", -4, "write denyoom", since="6.2.0", **_ST)
def zdiffstore(ctx: Ctx, argv: list[bytes]):
    """ZDIFFSTORE destination numkeys key [key ...]"""
    return _algebra(ctx, argv, DIFF, True)


@command("ZINTERCARD", -3, "readonly", since="7.0.0", **_RD)
def zintercard(ctx: Ctx, argv: list[bytes]):
    """ZINTERCARD numkeys key [key ...] [LIMIT limit]"""
    inputs = _inputs(ctx, argv, 1, "zintercard")
    _, _, _, limit = _options(argv, 2 + len(inputs), len(inputs), INTER, False, True)
    return len(combine(INTER, inputs, [1.0] * len(inputs), _aggregate(b"sum"), limit))
