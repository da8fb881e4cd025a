"""AI.SEMANTIC_CACHE SET/GET/EXPLAIN/DEL/FLUSH/STATS: the semantic cache (``pion.semantic.cache``).

Hit rule (stated once, in ``pion.semantic.cache``): a hit when the cosine similarity of the
query to an entry's prompt is >= the threshold (``THRESHOLD t`` or the server's
``semantic-cache-threshold``) and the verifier accepts the entry (``VERIFY off|lexical|model`` or the
server's ``semantic-cache-verify``; ``pion.semantic.verify``): the nearest entries above the threshold
are tried in order. ``WITHREASON`` says why the lookup hit or missed (which candidate was refused, in
which category). GET and EXPLAIN count ``semantic_hits``/``semantic_misses`` in
PION.STATS (the tenant's own ledger for a tenant). Entries are ordinary hashes of the client's
database (they count against its memory and quota, and are logged as HSET/PEXPIREAT/DEL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.semantic import cache, verify
from pion.semantic.owned import DimensionMismatch
from pion.server.args import parse_float, parse_nonneg_int
from pion.server.commands.ai.embed import embedder_of, live_value, parse_options, run_writes, text_of, with_vectors
from pion.server.commands.search.admin import engine as search_engine
from pion.server.context import Ctx
from pion.server.registry import command

_EMBEDS = "noscript no_multi"
_CATS = "@pion @slow"
_MAX_TTL_SECONDS = 10 * 365 * 86400


def _index(ctx: Ctx, dim: int):
    eng = search_engine(ctx)
    embedder = embedder_of(ctx)
    try:
        index, writes = cache.OWNED.ensure(eng, ctx.db, dim, embedder.name)
    except DimensionMismatch as exc:
        raise ReplyError(f"ERR {exc}") from None
    return index, writes


def _existing(ctx: Ctx):
    """The cache's index if this database has one (reads and deletes never create it)."""
    return cache.OWNED.current(search_engine(ctx), ctx.db)


def _threshold(ctx: Ctx, opts: dict[bytes, Any]) -> float:
    if b"THRESHOLD" not in opts:
        return ctx.server.settings.semantic_cache_threshold
    value = parse_float(opts[b"THRESHOLD"], "ERR THRESHOLD must be a number")
    if not -1.0 <= value <= 1.0:
        raise ReplyError("ERR THRESHOLD is a cosine similarity: it must be between -1 and 1")
    return value


@command("AI.SEMANTIC_CACHE|SET", -4, f"write denyoom {_EMBEDS}", categories=f"@write {_CATS}", group="pion",
         since="0.1.0")
def sc_set(ctx: Ctx, argv: list[bytes]):
    """AI.SEMANTIC_CACHE SET query response [TTL seconds] [WORKSPACE blob] [TAGS tag,tag...]: store the
    answer under the query's meaning (replacing an entry for the same query and tags)."""
    prompt = text_of(argv[2], "query")
    response = bytes(argv[3])
    opts = parse_options(argv, 4, {b"TTL": 1, b"WORKSPACE": 1, b"TAGS": 1})
    ttl = parse_nonneg_int(opts.get(b"TTL", b"0"), "ERR TTL must be a positive integer (seconds)")
    if ttl > _MAX_TTL_SECONDS or (b"TTL" in opts and ttl == 0):
        raise ReplyError("ERR TTL must be a positive integer (seconds)")
    tags = cache.parse_tags(opts[b"TAGS"]) if b"TAGS" in opts else []
    workspace = opts.get(b"WORKSPACE")

    def finish(ctx2: Ctx, vectors: np.ndarray):
        index, writes = _index(ctx2, vectors.shape[1])
        key = cache.entry_key(prompt, tags)
        writes += cache.set_writes(key, prompt, response, vectors[0], tags, workspace, ttl * 1000)
        run_writes(ctx2, writes)
        return OK

    return with_vectors(ctx, [prompt], finish)


def _verify_mode(ctx: Ctx, opts: dict[bytes, Any]) -> str:
    if b"VERIFY" not in opts:
        return ctx.server.settings.semantic_cache_verify
    mode = bytes(opts[b"VERIFY"]).decode("latin-1").lower()
    if mode not in verify.MODES:
        raise ReplyError("ERR VERIFY must be off, lexical or model")
    return mode


def _model_embedder(ctx: Ctx):
    """VERIFY model asks the server's embedding model; the hash provider is no model (its vectors are
    bags of words), so it is refused with the reason rather than run as if it were."""
    embedder = embedder_of(ctx)
    if embedder.spec.kind in ("hash", "none"):
        raise ReplyError(f"ERR VERIFY model needs a semantic embedding model (embed-provider minilm, "
                         f"sentence-transformers:PATH or openai); this server's is {embedder.name}")
    return embedder


@dataclass
class _Decision:
    """The lookup's outcome: the hit (or None) and why, for WITHREASON."""

    entry: cache.CacheEntry | None
    reason: str


def _decide(query: str, found: list[cache.CacheEntry], threshold: float, mode: str,
            words: dict[str, np.ndarray] | None = None) -> _Decision:
    """The first candidate above the threshold that the verifier accepts is the hit."""
    if not found:
        return _Decision(None, "miss: the cache has no entry (with these tags)")
    above = [entry for entry in found if cache.is_hit(entry.similarity, threshold)]
    if not above:
        nearest = found[0]
        return _Decision(None, f"miss: the nearest entry {nearest.prompt!r} scored {nearest.similarity:.4f} "
                               f"< threshold {threshold:g}")
    refused = []
    for entry in above:
        if mode == "model":
            verdict = verify.model_check(query, entry.prompt, words or {})
        else:
            verdict = verify.lexical(query, entry.prompt) if mode == "lexical" else verify.ACCEPT
        if verdict.ok:
            how = "verify off" if mode == "off" else f"verified ({mode})"
            tail = f"; refused first: {'; '.join(refused)}" if refused else ""
            return _Decision(entry, f"hit: {how}, similarity {entry.similarity:.4f}{tail}")
        refused.append(f"{entry.prompt!r} ({entry.similarity:.4f}) {verdict.text()}")
    return _Decision(None, f"miss: refused {'; '.join(refused)}")


def _lookup(ctx: Ctx, argv: list[bytes], flags: dict[bytes, int], reply):
    query = text_of(argv[2], "query")
    opts = parse_options(argv, 3, flags)
    threshold = _threshold(ctx, opts)
    mode = _verify_mode(ctx, opts)
    tags = cache.parse_tags(opts[b"FILTER"]) if b"FILTER" in opts else []
    if mode == "model":
        _model_embedder(ctx)  # refused at once, before any embedding, when there is no model to ask

    def done(ctx2: Ctx, decision: _Decision):
        ctx2.kv_ledger().bump("semantic_hits" if decision.entry is not None else "semantic_misses")
        return reply(decision, opts)

    def finish(ctx2: Ctx, vectors: np.ndarray):
        index = _existing(ctx2)
        found: list[cache.CacheEntry] = []
        if index is not None:
            if cache.OWNED.width(index) != vectors.shape[1]:
                _index(ctx2, vectors.shape[1])  # raises the mismatch error
            found = cache.candidates(index, vectors[0], tags, lambda key: live_value(ctx2, key))
        if mode != "model":
            return done(ctx2, _decide(query, found, threshold, mode))
        # model mode: the words to ask the model about (those of the candidates whose only
        # disagreement is a word substitution), embedded off the loop in a second stage
        words = sorted({w for entry in found if cache.is_hit(entry.similarity, threshold)
                        for w in verify.words_to_embed(query, entry.prompt)})
        if not words:
            return done(ctx2, _decide(query, found, threshold, mode))
        return with_vectors(ctx2, words, lambda ctx3, rows: done(
            ctx3, _decide(query, found, threshold, mode, dict(zip(words, rows, strict=True)))))

    return with_vectors(ctx, [query], finish)


def _get_reply(decision: _Decision, opts: dict[bytes, Any]):
    entry = decision.entry
    if b"WITHREASON" in opts:
        out: list[Any] = [None if entry is None else entry.response]
        if b"WITHSCORE" in opts:
            out.append(None if entry is None else round(entry.similarity, 6))
        if b"WITHWORKSPACE" in opts:
            out.append(None if entry is None else entry.workspace)
        out.append(decision.reason.encode())
        return out
    if entry is None:
        return None
    if not (b"WITHSCORE" in opts or b"WITHWORKSPACE" in opts):
        return entry.response
    out = [entry.response]
    if b"WITHSCORE" in opts:
        out.append(round(entry.similarity, 6))
    if b"WITHWORKSPACE" in opts:
        out.append(entry.workspace)
    return out


def _explain_reply(decision: _Decision, opts: dict[bytes, Any]):
    workspace = None if decision.entry is None else decision.entry.workspace
    if b"WITHREASON" in opts:
        return [workspace, decision.reason.encode()]
    return workspace


@command("AI.SEMANTIC_CACHE|GET", -3, f"readonly {_EMBEDS}", categories=f"@read {_CATS}", group="pion", since="0.1.0")
def sc_get(ctx: Ctx, argv: list[bytes]):
    """AI.SEMANTIC_CACHE GET query [THRESHOLD sim] [VERIFY off|lexical|model] [WITHSCORE] [WITHWORKSPACE]
    [WITHREASON] [FILTER tag,tag...]: the cached response (nil on a miss); with WITHSCORE/WITHWORKSPACE
    an array [response, similarity, workspace]; WITHREASON appends why (always an array then, nil
    fields on a miss)."""
    flags = {b"THRESHOLD": 1, b"VERIFY": 1, b"WITHSCORE": 0, b"WITHWORKSPACE": 0, b"WITHREASON": 0, b"FILTER": 1}
    return _lookup(ctx, argv, flags, _get_reply)


@command("AI.SEMANTIC_CACHE|EXPLAIN", -3, f"readonly {_EMBEDS}", categories=f"@read {_CATS}", group="pion",
         since="0.1.0")
def sc_explain(ctx: Ctx, argv: list[bytes]):
    """AI.SEMANTIC_CACHE EXPLAIN query [THRESHOLD sim] [VERIFY off|lexical|model] [WITHREASON] [FILTER tag,tag...]:
    the workspace blob stored with the entry the query hits (nil on a miss or when it has none);
    WITHREASON: [workspace, why]."""
    return _lookup(ctx, argv, {b"THRESHOLD": 1, b"VERIFY": 1, b"WITHREASON": 0, b"FILTER": 1}, _explain_reply)


@command("AI.SEMANTIC_CACHE|DEL", -3, "write", categories=f"@write {_CATS}", group="pion", since="0.1.0")
def sc_del(ctx: Ctx, argv: list[bytes]):
    """AI.SEMANTIC_CACHE DEL query [TAGS tag,tag...]: delete the entries stored for exactly this query
    (with TAGS: only the one with those tags); the number deleted."""
    prompt = text_of(argv[2], "query")
    opts = parse_options(argv, 3, {b"TAGS": 1})
    index = _existing(ctx)
    if index is None:
        return 0
    if b"TAGS" in opts:
        key = cache.entry_key(prompt, cache.parse_tags(opts[b"TAGS"]))
        keys = [key] if live_value(ctx, key) is not None else []
    else:
        keys = cache.keys_with_prompt(index, prompt, lambda key: live_value(ctx, key))
    if keys:
        run_writes(ctx, [[b"DEL", *keys]])
    return len(keys)


@command("AI.SEMANTIC_CACHE|FLUSH", 2, "write", categories=f"@write {_CATS}", group="pion", since="0.1.0")
def sc_flush(ctx: Ctx, argv: list[bytes]):
    """AI.SEMANTIC_CACHE FLUSH: delete every entry of this database's cache; the number deleted."""
    index = _existing(ctx)
    keys = list(index.docs.values()) if index is not None else []
    if keys:
        run_writes(ctx, [[b"DEL", *keys]])
    return len(keys)


@command("AI.SEMANTIC_CACHE|STATS", 2, "readonly fast", categories=f"@read {_CATS}", group="pion", since="0.1.0")
def sc_stats(ctx: Ctx, argv: list[bytes]):
    """AI.SEMANTIC_CACHE STATS: entries, the default threshold and its rule, the vectors' width and
    model, and the hit/miss counters (the server's, or the tenant's)."""
    index = _existing(ctx)
    counts = ctx.kv_ledger().counts
    embedder = ctx.server.parts.embedding
    meta = live_value(ctx, cache.OWNED.meta_key)
    fields = getattr(meta, "fields", {}) or {}
    return {
        b"entries": len(index.docs) if index is not None else 0,
        b"threshold": repr(ctx.server.settings.semantic_cache_threshold).encode(),
        b"rule": b"hit when cosine similarity >= threshold and the verifier accepts the entry",
        b"verify": ctx.server.settings.semantic_cache_verify.encode(),
        b"dim": cache.OWNED.width(index) if index is not None else 0,
        b"model": bytes(fields.get(b"model", embedder.name.encode() if embedder else b"")),
        b"semantic_hits": counts["semantic_hits"],
        b"semantic_misses": counts["semantic_misses"],
    }
