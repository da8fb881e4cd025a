"""FT.SUGADD / FT.SUGGET / FT.SUGDEL / FT.SUGLEN: RediSearch's autocomplete dictionaries.

A dictionary is a key of its own (TYPE ``trietype0``, ``storage/suggest_value.py``), so it is
persisted, expires, moves with RENAME/MOVE/DUMP and is flushed like any key, and it is unrelated to
any index. Replies, error texts and the order of equal-scored suggestions follow RediSearch 2.10
(checked against Redis Stack in ``tests/search/stack_diff.py``): FT.SUGADD answers the dictionary's
size; FT.SUGGET on a missing key answers nil, scores are doubles and a
missing payload is nil.
"""

from __future__ import annotations

import math
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import HumanDouble
from pion.server.commands.core.zparse import parse_double
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.suggest_value import SuggestValue, format_score

_CATS = "@search"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _get(ctx: Ctx, key: bytes) -> SuggestValue | None:
    return ctx.db.get_typed(key, SuggestValue)


@command("FT.SUGADD", -4, "write denyoom", keys=(1, 1, 1), categories="@search @write",
         group="search", since="1.0.0")
def ft_sugadd(ctx: Ctx, argv: list[bytes]):
    """FT.SUGADD key string score [INCR] [PAYLOAD payload]"""
    if len(argv) > 7:
        raise ReplyError(errors.wrong_arity("FT.SUGADD"))
    incr = False
    payload: bytes | None = None
    i = 4
    while i < len(argv):
        word = argv[i].upper()
        if word == b"INCR":
            incr = True
        elif word == b"PAYLOAD":
            if i + 1 >= len(argv):
                raise ReplyError("Invalid payload: Expected an argument, but none provided")
            i += 1
            payload = bytes(argv[i])
        else:
            raise ReplyError(f"Unknown argument `{argv[i].decode('utf-8', 'replace')}`")
        i += 1
    value = _get(ctx, argv[1])  # RediSearch checks the key's type before the score
    score = parse_double(argv[3], "ERR invalid score")
    if value is None:
        value = SuggestValue()
        ctx.db.set(argv[1], value)
    value.add(_text(argv[2]), score, payload or None, incr)
    ctx.db.signal(argv[1])
    ctx.dirty()
    return value.size


def _max_arg(argv: list[bytes], i: int) -> int:
    if i >= len(argv):
        raise ReplyError("MAX: Expected an argument, but none provided")
    try:
        number = parse_double(argv[i])
    except ReplyError:
        raise ReplyError("MAX: Could not convert argument to expected type") from None
    if math.isinf(number) or number < 1 or number >= 2**63:
        raise ReplyError("MAX: Value is outside acceptable bounds")
    return int(number)


@command("FT.SUGGET", -3, "readonly", keys=(1, 1, 1), categories="@search @read",
         group="search", since="1.0.0")
def ft_sugget(ctx: Ctx, argv: list[bytes]):
    """FT.SUGGET key prefix [FUZZY] [WITHSCORES] [WITHPAYLOADS] [MAX num] [TRIM]"""
    if len(argv) > 10:
        raise ReplyError(errors.wrong_arity("FT.SUGGET"))
    if len(argv[2]) >= 200:  # TRIE_MAX_PREFIX runes of two bytes
        raise ReplyError("Invalid query length")
    fuzzy = scores = payloads = trim = False
    num = 5
    i = 3
    while i < len(argv):
        word = argv[i].upper()
        if word == b"FUZZY":
            fuzzy = True
        elif word == b"WITHSCORES":
            scores = True
        elif word == b"WITHPAYLOADS":
            payloads = True
        elif word == b"TRIM":
            trim = True
        elif word == b"OPTIMIZE":
            pass  # RediSearch parses it and no longer reads it
        elif word == b"MAX":
            num = _max_arg(argv, i + 1)
            i += 1
        else:
            raise ReplyError(f"Unrecognized argument: {argv[i].decode('utf-8', 'replace')}")
        i += 1
    value = _get(ctx, argv[1])
    if value is None:
        return None
    try:
        found = value.search(_text(argv[2]), num, fuzzy, trim)
    except ValueError as exc:
        raise ReplyError(str(exc)) from None
    out: list[Any] = []
    for score, text, payload in found:
        out.append(text.encode("utf-8", "surrogateescape"))
        if scores:
            out.append(HumanDouble(format_score(score)))
        if payloads:
            out.append(payload)
    return out


@command("FT.SUGDEL", 3, "write", keys=(1, 1, 1), categories="@search @write",
         group="search", since="1.0.0")
def ft_sugdel(ctx: Ctx, argv: list[bytes]):
    """FT.SUGDEL key string: 1 if the string was in the dictionary, else 0"""
    value = _get(ctx, argv[1])
    if value is None:
        return 0
    removed = value.delete(_text(argv[2]))
    if removed:
        ctx.db.signal(argv[1])
        ctx.dirty()
    return removed


@command("FT.SUGLEN", 2, "readonly", keys=(1, 1, 1), categories="@search @read",
         group="search", since="1.0.0")
def ft_suglen(ctx: Ctx, argv: list[bytes]):
    """FT.SUGLEN key"""
    value = _get(ctx, argv[1])
    return 0 if value is None else value.size

