"""The smaller FT.* commands: FT.DICTADD/DICTDEL/DICTDUMP,
FT.SYNUPDATE/SYNDUMP, FT.SPELLCHECK, FT.GET/FT.MGET (RediSearch 1.x document reads) and
FT.PROFILE (the query's reply plus where the time went).

Replies follow RediSearch: FT.SPELLCHECK ``[[TERM, term, [[score, suggestion], ...]], ...]`` in
RESP2 and ``{results: {term: [{suggestion: score}]}}`` in RESP3; FT.SYNDUMP a flat
``[term, [groups], ...]`` (a map in RESP3). FT.CONFIG is ``search_config.py``.
"""

from __future__ import annotations

import time
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, SetReply
from pion.server.commands.search import aggregate as search_aggregate
from pion.server.commands.search import query as search_query
from pion.server.commands.search.admin import engine
from pion.server.commands.search.replies import live_value
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.budget import TIMEOUT_TEXT
from pion.storage.hash_value import HashValue
from pion.storage.json_value import JsonValue
from pion.vector import query_profile, text
from pion.vector.engine import UNKNOWN_INDEX

_CATS = "@search"


def _s(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


# -- dictionaries ----------------------------------------------------------------------------------


@command("FT.DICTADD", -3, "write denyoom", categories="@search", group="search", since="1.4.0")
def ft_dictadd(ctx: Ctx, argv: list[bytes]):
    """FT.DICTADD dict term [term ...]"""
    words = engine(ctx).dicts.setdefault(_s(argv[1]), set())
    added = 0
    for raw in argv[2:]:
        term = _s(raw)
        if term not in words:
            words.add(term)
            added += 1
    ctx.dirty()
    return added


@command("FT.DICTDEL", -3, "write", categories="@search", group="search", since="1.4.0")
def ft_dictdel(ctx: Ctx, argv: list[bytes]):
    """FT.DICTDEL dict term [term ...]"""
    eng = engine(ctx)
    words = eng.dicts.get(_s(argv[1]))
    if words is None:
        return 0
    removed = 0
    for raw in argv[2:]:
        if _s(raw) in words:
            words.discard(_s(raw))
            removed += 1
    if not words:
        del eng.dicts[_s(argv[1])]
    ctx.dirty()
    return removed


@command("FT.DICTDUMP", 2, "readonly", categories="@search", group="search", since="1.4.0")
def ft_dictdump(ctx: Ctx, argv: list[bytes]):
    """FT.DICTDUMP dict"""
    words = engine(ctx).dicts.get(_s(argv[1]))
    if words is None:
        raise ReplyError("could not open dict key")
    return SetReply(w.encode() for w in sorted(words))


# -- synonyms -------------------------------------------------------------------------------------


@command("FT.SYNUPDATE", -4, "write denyoom", categories="@search", group="search", since="1.2.0")
def ft_synupdate(ctx: Ctx, argv: list[bytes]):
    """FT.SYNUPDATE index group [SKIPINITIALSCAN] term [term ...]"""
    eng = engine(ctx)
    index = eng.get(ctx.db, _s(argv[1]), error=UNKNOWN_INDEX)
    rest = argv[3:]
    skip = bool(rest) and rest[0].upper() == b"SKIPINITIALSCAN"
    if skip:
        rest = rest[1:]
    if not rest:
        raise ReplyError(errors.wrong_arity("ft.synupdate"))
    index.update_synonyms(_s(argv[2]), [_s(t) for t in rest])
    index.definition.history.append(list(argv))
    if not skip:
        eng.reindex(ctx.db, index)
    ctx.dirty()
    return OK


@command("FT.SYNDUMP", 2, "readonly", categories="@search", group="search", since="1.2.0")
def ft_syndump(ctx: Ctx, argv: list[bytes]):
    """FT.SYNDUMP index"""
    index = engine(ctx).get(ctx.db, _s(argv[1]), error=UNKNOWN_INDEX)
    groups = index.synonym_groups()
    if ctx.client.proto >= 3:
        return {term.encode(): [g.encode() for g in ids] for term, ids in groups.items()}
    out: list[Any] = []
    for term, ids in groups.items():
        out += [term.encode(), [g.encode() for g in ids]]
    return out


# -- FT.SPELLCHECK --------------------------------------------------------------------------------


@command("FT.SPELLCHECK", -3, "readonly", categories="@search", group="search", since="1.4.0")
def ft_spellcheck(ctx: Ctx, argv: list[bytes]):
    """FT.SPELLCHECK index query [DISTANCE d] [TERMS INCLUDE|EXCLUDE dict ...] [DIALECT d]"""
    eng = engine(ctx)
    index = eng.get(ctx.db, _s(argv[1]))
    distance, include, exclude = 1, [], []
    i = 3
    while i < len(argv):
        word = argv[i].upper()
        if word == b"DISTANCE" and i + 1 < len(argv):
            try:
                distance = int(argv[i + 1])
            except ValueError:
                raise ReplyError("bad distance given, distance must be a number between 1 and 4") from None
            if not 1 <= distance <= 4:
                raise ReplyError("bad distance given, distance must be a number between 1 and 4")
            i += 2
        elif word == b"TERMS" and i + 2 < len(argv):
            kind = argv[i + 1].upper()
            name = _s(argv[i + 2])
            if name not in eng.dicts:
                raise ReplyError(f"Dict does not exist: {name}")
            if kind == b"INCLUDE":
                include.append(name)
            elif kind == b"EXCLUDE":
                exclude.append(name)
            else:
                raise ReplyError("bad format for TERMS, expected INCLUDE or EXCLUDE")
            i += 3
        elif word == b"DIALECT" and i + 1 < len(argv):
            i += 2
        else:
            raise ReplyError(f"Unknown argument `{_s(argv[i])}`")
    excluded = set().union(*(eng.dicts[d] for d in exclude)) if exclude else set()
    included = [w for d in include for w in sorted(eng.dicts[d])]
    postings = index.text.postings
    total = max(len(index), 1)
    terms: list[tuple[str, list[tuple[float, str]]]] = []
    for word in dict.fromkeys(text.tokenize(_s(argv[2]))):
        if word in postings or word in excluded or word in index.definition.stopword_set:
            continue
        found: dict[str, float] = {}
        for term in index.text.terms_matching(lambda t, w=word: text.edit_distance_at_most(t, w, distance), 10_000):
            if term not in excluded:
                found[term] = len(postings[term]) / total
        for term in included:
            if term not in found and term not in excluded and text.edit_distance_at_most(term, word, distance):
                found[term] = 0.0
        ranked = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
        terms.append((word, [(score, term) for term, score in ranked]))
    if ctx.client.proto >= 3:
        return {b"results": {w.encode(): [{t.encode(): s} for s, t in sugg] for w, sugg in terms}}
    return [[b"TERM", w.encode(), [[_score(s), t.encode()] for s, t in sugg]] for w, sugg in terms]


def _score(value: float) -> bytes:
    from pion.vector.expressions import format_value

    return format_value(value).encode()


# -- FT.GET / FT.MGET -----------------------------------------------------------------------------


def _document(ctx: Ctx, key: bytes) -> Any:
    value = live_value(ctx, key)
    if value.__class__ is HashValue:
        out: list[Any] = []
        for f, v in value.fields.items():
            out += [bytes(f), bytes(v)]
        return out
    if value.__class__ is JsonValue:
        return [b"$", value.dumps().encode()]
    return None


@command("FT.GET", 3, "readonly", categories="@search @read @admin", group="search", since="1.0.0")
def ft_get(ctx: Ctx, argv: list[bytes]):
    """FT.GET index doc (deprecated: HGETALL)"""
    engine(ctx).get(ctx.db, _s(argv[1]))
    return _document(ctx, argv[2])


@command("FT.MGET", -3, "readonly", categories="@search @read @admin", group="search", since="1.0.0")
def ft_mget(ctx: Ctx, argv: list[bytes]):
    """FT.MGET index doc [doc ...] (deprecated)"""
    engine(ctx).get(ctx.db, _s(argv[1]))
    return [_document(ctx, key) for key in argv[2:]]


@command("FT.DEL", -3, "write", keys=(2, 2, 1), categories="@search @write @admin", group="search", since="1.0.0")
def ft_del(ctx: Ctx, argv: list[bytes]):
    """FT.DEL index doc [DD] (deprecated): deletes the document's key when the index holds it; 1 if
    deleted, else 0. Since RediSearch 2.0 the document is the key, and RediSearch 2.10 ignores the
    optional argument whatever it is (DD or not), so Pion does too."""
    if len(argv) > 4:
        raise ReplyError(errors.wrong_arity("ft.del"))
    index = engine(ctx).get(ctx.db, _s(argv[1]))
    key = argv[2]
    if key not in index.key_to_doc or not ctx.db.delete(key):
        return 0
    ctx.dirty()
    ctx.notify("g", "del", key)
    return 1


# -- FT.PROFILE -----------------------------------------------------------------------------------


@command("FT.PROFILE", -5, "readonly", categories="@search @read", group="search", since="2.2.0")
def ft_profile(ctx: Ctx, argv: list[bytes]):
    """FT.PROFILE index SEARCH|AGGREGATE [LIMITED] QUERY query [options]: the query's reply and its
    profile, in Redis 8's shape: RESP2 ``[reply, [Shards, [shard], Coordinator, []]]`` where the shard
    is RediSearch's list of pairs (``[Total profile time, t]``, ..., ``[Iterators profile, tree]``,
    ``[Result processors profile, stage, ...]``); RESP3 ``{Results: reply, Profile: {Shards: [shard
    map], Coordinator: {}}}``. The tree and the stages are ``vector.query_profile``'s record of the
    evaluation; with FT.CONFIG ``_PRINT_PROFILE_CLOCK false`` the times are left out."""
    kind = argv[2].upper()
    if kind not in (b"SEARCH", b"AGGREGATE"):
        raise ReplyError("No `SEARCH` or `AGGREGATE` provided")
    i = 3
    limited = argv[i].upper() == b"LIMITED"
    if limited:
        i += 1
    if i >= len(argv) or argv[i].upper() != b"QUERY":
        raise ReplyError("The QUERY keyword is expected")
    inner = [b"FT." + kind, argv[1], *argv[i + 1:]]
    started = time.perf_counter()
    profile = query_profile.Profiler()
    if kind == b"SEARCH":
        result = search_query.profiled_search(ctx, inner, profile)
    else:
        result = search_aggregate.profiled_aggregate(ctx, inner, profile)
    elapsed = (time.perf_counter() - started) * 1000.0
    resp3 = ctx.client.proto >= 3
    clock = engine(ctx).config.get("_PRINT_PROFILE_CLOCK", "true") == "true"
    warned = result.get(b"warning") if isinstance(result, dict) else None  # RESP3: a query cut short (RETURN)
    timed_out = bool(warned) or profile.timed_out
    tree = query_profile.iterator_reply(profile.root(), resp3, clock, limited)
    stages = [query_profile.stage_reply(stage, resp3, clock) for stage in profile.stages]
    times = [(b"Total profile time", elapsed), (b"Parsing time", profile.parse_ms),
             (b"Pipeline creation time", profile.pipeline_ms)]
    if resp3:
        shard: dict[bytes, Any] = dict(times) if clock else {}
        shard[b"Warning"] = TIMEOUT_TEXT.encode() if timed_out else b"None"
        shard[b"Iterators profile"] = [tree]
        shard[b"Result processors profile"] = stages
        return {b"Results": result, b"Profile": {b"Shards": [shard], b"Coordinator": {}}}
    pairs: list[Any] = [[key, value] if clock else [key] for key, value in times]
    pairs.append([b"Warning", TIMEOUT_TEXT.encode()] if timed_out else [b"Warning"])
    pairs.append([b"Iterators profile", tree])
    pairs.append([b"Result processors profile", *stages])
    return [result, [b"Shards", [pairs], b"Coordinator", []]]


# -- FT.DEBUG -------------------------------------------------------------------------------------


@command("FT.DEBUG", -2, "admin", categories="@search", group="search", since="1.0.0")
def ft_debug(ctx: Ctx, argv: list[bytes]):
    """FT.DEBUG TTL index (seconds a TEMPORARY index has left); other RediSearch debug commands are refused"""
    if argv[1].upper() != b"TTL" or len(argv) != 3:
        raise ReplyError(f"FT.DEBUG {_s(argv[1]).upper()} is not supported by Pion (only FT.DEBUG TTL)")
    index = engine(ctx).get(ctx.db, _s(argv[2]))
    ttl = index.definition.temporary
    if not ttl:
        raise ReplyError("Index is not temporary")
    return max(0, int(round(ttl - (time.monotonic() - index.touched))))
