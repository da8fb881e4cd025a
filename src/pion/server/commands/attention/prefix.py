"""``ATTEND.PREFIX.*`` (Stage 2): the server computes attention over a prefix it stores.

A Stage-2 prefix is a V-store namespace (``attend_store``): layer L's K rows in session
``<sid>_pk``, its V rows in ``<sid>_pv``, any codec, kept ready as *views* under
``attention-warm-bytes``. Views the budget dropped, and prefixes not loaded since the server
started, are **cold**: a query answers ``-COLDMISS`` until ``KV.PREFIX.WARM`` loads them, except
with ``FROM ns``, which loads (and decodes) the rows of namespace ``ns`` when needed. Large
kernels run in the worker pool, cut into token ranges merged by the online softmax.

This module: the query forms' parsing and running, LOOKUP, QUERY, QUERY_FUSED and INFO.
Options Pion adds after the reference's positional ones: ``FROM ns`` (attend over namespace
``ns``), ``SCALE s`` (softmax scale; default ``1/sqrt(D)``). The sparse forms are in
``attend_sparse``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from pion.attention.dense import grouped_map
from pion.attention.query import Query, Result, answer, combine, cost, pieces
from pion.attention.tier import PrefixView
from pion.protocol.errors import ReplyError
from pion.protocol.resp import Status
from pion.server.args import arg, check_ns, info_text, strict_int
from pion.server.commands.attention.store import (
    MAX_HEADS,
    Source,
    attention_engine,
    background,
    build_view,
    keep_warm,
    parse_heads_dim,
    parse_layer,
    read_source,
    source_current,
    tenant_of,
)
from pion.server.deferred import WORKERS, Deferred, can_defer
from pion.server.registry import command

COLDMISS = "COLDMISS session evicted to cold tier (call KV.PREFIX.WARM)"
#: queries reading fewer floats than this (16 MB, a few ms) run on the loop: a sparse decode step at 64K
#: reads ~2M; the thread hop costs ~0.6 ms
INLINE_MAX = 1 << 22


# -- argument parsing --------------------------------------------------------------------------


def floats(blob, count: int, error: str) -> np.ndarray:
    if len(blob) != 4 * count:
        raise ReplyError(error)
    return np.frombuffer(blob, dtype="<f4")


def query_rows(blob, heads: int, dim: int, decode_only: bool) -> np.ndarray:
    """``Q`` as ``[H, M, D]``: M from its length (exactly 1 for the decode-only forms)."""
    width = heads * dim * 4
    if decode_only:
        return floats(blob, heads * dim, f"ERR Q blob size mismatch (expected H*D*4 = {width})").reshape(heads, 1, dim)
    if not len(blob) or len(blob) % width:
        raise ReplyError(f"ERR Q blob size mismatch (expected a positive multiple of H*D*4 = {width})")
    return np.frombuffer(blob, dtype="<f4").reshape(heads, len(blob) // width, dim)


def parse_head_map(blob, q_heads: int, kv_heads: int) -> np.ndarray:
    """``head_map``: H_q bytes (query head -> kv head), or empty for the usual grouping."""
    raw = arg(blob)
    if not raw:
        return grouped_map(q_heads, kv_heads)
    if len(raw) != q_heads:
        raise ReplyError(f"ERR head_map must be H_q={q_heads} bytes (or empty)")
    head_map = np.frombuffer(raw, dtype=np.uint8).astype(np.intp)
    if head_map.max() >= kv_heads:
        raise ReplyError(f"ERR head_map values must be < H_kv={kv_heads}")
    return head_map


def check_gqa(q_heads: int, kv_heads: int) -> None:
    if q_heads % kv_heads:
        raise ReplyError("ERR H_q must be a multiple of H_kv (GQA)")


@dataclass(slots=True)
class Tail:
    """The optional arguments after the fixed ones: positional integers, then Pion's keywords."""

    window: int = 0
    selector: int = 0
    origin: bytes | None = None
    scale: float | None = None


def parse_tail(ctx, args: list, cmd: str, positional: tuple[str, ...] = ("fa_window",)) -> Tail:
    tail = Tail(window=ctx.server.settings.attention_fa_window)
    words = [arg(a) for a in args]
    pos = 0
    while pos < len(words) and pos < len(positional) and _is_int(words[pos]):
        value = int(words[pos])
        if positional[pos] == "fa_window":
            if value < -1:
                raise ReplyError("ERR invalid fa_window (-1 = server default, 0 = whole prefix, N > 0 = last N tokens)")
            tail.window = tail.window if value == -1 else value
        elif value not in (0, 1, 2, 3):
            raise ReplyError("ERR selector_id must be 0 (block-mean), 1 (Quest), 2 (Quest per head) or 3 (block-mean per head)")
        else:
            tail.selector = value
        pos += 1
    while pos < len(words):
        key = words[pos].upper()
        if key not in (b"FROM", b"SCALE") or pos + 1 >= len(words):
            spelled = " ".join(f"[{name}]" for name in positional)
            raise ReplyError(f"ERR {cmd}: unexpected argument '{words[pos].decode('utf-8', 'replace')}' "
                             f"(after the fixed ones: {spelled} [FROM ns] [SCALE s])")
        if key == b"FROM":
            tail.origin = check_ns(words[pos + 1])
        else:
            tail.scale = _positive_float(words[pos + 1])
        pos += 2
    return tail


def _is_int(word: bytes) -> bool:
    return word.isdigit() or (word[:1] == b"-" and word[1:].isdigit())


def _positive_float(word: bytes) -> float:
    try:
        value = float(word)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ReplyError("ERR SCALE must be a positive number")
    return value


# -- running a query ---------------------------------------------------------------------------


@dataclass(slots=True)
class Target:
    """What a query reads: a warm view, or the source to build one from."""

    key: tuple
    view: PrefixView | None
    source: Source | None

    @property
    def dim(self) -> int:
        if self.view is not None:
            return self.view.kv_heads * self.view.head_dim
        return self.source.dim


def resolve(ctx, cmd: str, sid: bytes, layer_id: int, origin: bytes | None) -> Target:
    """The view for ``(sid, layer)``; a cold one answers ``-COLDMISS`` unless ``FROM`` names its rows."""
    engine = attention_engine(ctx.server)
    sp = ctx.kv_space()
    key = (tenant_of(ctx), sid, layer_id)
    view = engine.tier.get(key)
    if view is not None and ((origin is not None and view.origin != origin) or not source_current(sp, view.source)):
        origin = origin or view.origin  # its rows changed: build it again from them
        engine.tier.drop(key)
        view = None
    if view is not None:
        return Target(key, view, None)
    if origin is None:
        if engine.tier.is_cold(key) or read_source(sp, sid, layer_id) is not None:
            engine.counts["coldmisses"] += 1
            raise ReplyError(COLDMISS)
        raise ReplyError(f"ERR {cmd} failed (session not found, or unsupported D)")
    source = read_source(sp, origin, layer_id)
    if source is None:
        raise ReplyError(f"ERR {cmd} failed (session not found, or unsupported D)")
    return Target(key, None, source)


def stored_kv_heads(target: Target, head_dim: int, cmd: str) -> int:
    if target.dim % head_dim:
        raise ReplyError(f"ERR {cmd} failed (the prefix rows are {target.dim} wide, not a multiple of D={head_dim})")
    return target.dim // head_dim


def execute(ctx, target: Target, query: Query, *, sparse: bool, fused: bool, want_lse: bool, bytes_in: int):
    """Run the query (in the worker pool when it is large, cut into parts) and answer its reply bytes."""
    kv_heads, head_dim = target.dim // query.q.shape[2], query.q.shape[2]
    view = target.view
    if view is not None and (view.kv_heads, view.head_dim) != (kv_heads, head_dim):
        target = Target(target.key, None, view.source)  # the rows split into other heads: build again
    finish = partial(conclude, target=target, sparse=sparse, fused=fused, want_lse=want_lse, bytes_in=bytes_in)
    if target.view is None:
        job = partial(build_and_answer, target.source, query, kv_heads, head_dim)
        if can_defer(ctx):
            return Deferred([partial(background, job)], lambda ctx, results: finish(ctx, *results[0]))
        return finish(ctx, *job())
    jobs = pieces(target.view, query, WORKERS)
    if can_defer(ctx) and cost(target.view, query) >= INLINE_MAX:
        return Deferred([partial(background, job) for job in jobs], lambda ctx, results: finish(ctx, target.view, combine(results)))
    return finish(ctx, target.view, combine([job() for job in jobs]))


def build_and_answer(source: Source, query: Query, kv_heads: int, head_dim: int) -> tuple[PrefixView, Result]:
    view = build_view(source, kv_heads, head_dim)
    return view, answer(view, query)


def conclude(ctx, view: PrefixView, result: Result, *, target: Target, sparse: bool, fused: bool, want_lse: bool,
             bytes_in: int) -> bytes:
    """On the loop: keep a view built for this query (if its rows did not change meanwhile), answer."""
    engine = attention_engine(ctx.server)
    if target.view is None and source_current(ctx.kv_space(), view.source):
        keep_warm(ctx, engine, target.key, view)
        engine.counts["views_built"] += 1
    if result.new_summary is not None:
        engine.tier.add_summary(target.key, view, result.new_summary, result.summary_start)
    reply = result.out.astype("<f4", copy=False).tobytes()
    if want_lse:
        reply += result.lse.astype("<f4", copy=False).tobytes()
    engine.record(result, sparse=sparse, fused=fused, bytes_in=bytes_in, bytes_out=len(reply))
    return reply


# -- LOOKUP, QUERY, QUERY_FUSED, INFO ------------------------------------------------------------


@command("ATTEND.PREFIX.LOOKUP", 3, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def attend_prefix_lookup(ctx, argv):
    """ATTEND.PREFIX.LOOKUP sid layer: +HIT (warm), +COLD (stored, not warm: KV.PREFIX.WARM), +MISS."""
    sid, layer_id = arg(argv[1]), parse_layer(argv[2])
    engine = attention_engine(ctx.server)
    sp = ctx.kv_space()
    key = (tenant_of(ctx), sid, layer_id)
    view = engine.tier.entries.get(key)
    if view is not None and source_current(sp, view.source):
        return Status("HIT")
    if view is not None:  # its rows changed: a query builds it again, if they are still there
        return Status("COLD" if stored(sp, view.origin, layer_id) else "MISS")
    if engine.tier.is_cold(key) or stored(sp, sid, layer_id):
        return Status("COLD")
    return Status("MISS")


def stored(sp, ns: bytes, layer_id: int) -> bool:
    """Can a query read this layer of ``ns`` (rows stored, both sides, no gap)?"""
    try:
        return read_source(sp, ns, layer_id) is not None
    except ReplyError:
        return False


@command("ATTEND.PREFIX.QUERY", -7, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def attend_prefix_query(ctx, argv):
    """ATTEND.PREFIX.QUERY sid layer H D top_k Q [fa_window] [FROM ns] [SCALE s]: out (M=1), out + LSE (M>1).

    H query heads over the prefix's kv heads (H a multiple of them: grouped GQA). top_k < N on a
    decode step (M=1) attends the top_k highest-scoring tokens of each head; otherwise dense.
    """
    sid, layer_id = arg(argv[1]), parse_layer(argv[2])
    heads, dim = parse_heads_dim(argv[3], argv[4])
    top_k = strict_int(argv[5], 1, 1 << 62, "ERR top_k must be > 0")
    q = query_rows(argv[6], heads, dim, decode_only=False)
    tail = parse_tail(ctx, argv[7:], "ATTEND.PREFIX.QUERY")
    target = resolve(ctx, "ATTEND.PREFIX.QUERY", sid, layer_id, tail.origin)
    kv_heads = stored_kv_heads(target, dim, "ATTEND.PREFIX.QUERY")
    check_gqa(heads, kv_heads)
    query = Query(q, grouped_map(heads, kv_heads), tail.scale or dim ** -0.5, tail.window, top_k=top_k)
    return execute(ctx, target, query, sparse=False, fused=False, want_lse=q.shape[1] > 1, bytes_in=len(argv[6]))


def suffix_rows(k_blob, v_blob, kv_heads: int, suffix: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    error = f"ERR K_suf/V_suf blob size mismatch (expected H_kv*S_suf*D*4 = {kv_heads * suffix * dim * 4} each)"
    shape = (kv_heads, suffix, dim)
    return (floats(k_blob, kv_heads * suffix * dim, error).reshape(shape),
            floats(v_blob, kv_heads * suffix * dim, error).reshape(shape))


def check_stored_heads(target: Target, kv_heads: int, dim: int, cmd: str) -> None:
    if target.dim != kv_heads * dim:
        raise ReplyError(f"ERR {cmd} failed (the prefix rows are {target.dim} wide, the query says H_kv*D = {kv_heads * dim})")


@command("ATTEND.PREFIX.QUERY_FUSED", -11, "readonly zero_copy", categories="@read @pion", group="pion", since="0.1.0")
def attend_prefix_query_fused(ctx, argv):
    """ATTEND.PREFIX.QUERY_FUSED sid layer H_q D S_suf H_kv Q K_suf V_suf head_map [fa_window] [FROM ns] [SCALE s]: out.

    One softmax over the prefix (all of it, or its last fa_window tokens) and the causal suffix:
    query row m sees suffix positions <= S_suf - M + m. Reply H_q*M*D fp32, no LSE.
    """
    cmd = "ATTEND.PREFIX.QUERY_FUSED"
    sid, layer_id = arg(argv[1]), parse_layer(argv[2])
    q_heads, dim = parse_heads_dim(argv[3], argv[4])
    suffix = strict_int(argv[5], 0, 1 << 24, "ERR invalid S_suf")
    kv_heads = strict_int(argv[6], 1, MAX_HEADS, "ERR invalid H_kv (1..256)")
    check_gqa(q_heads, kv_heads)
    q = query_rows(argv[7], q_heads, dim, decode_only=False)
    k_suf, v_suf = suffix_rows(argv[8], argv[9], kv_heads, suffix, dim)
    head_map = parse_head_map(argv[10], q_heads, kv_heads)
    tail = parse_tail(ctx, argv[11:], cmd)
    target = resolve(ctx, cmd, sid, layer_id, tail.origin)
    check_stored_heads(target, kv_heads, dim, cmd)
    query = Query(q, head_map, tail.scale or dim ** -0.5, tail.window, k_suffix=k_suf, v_suffix=v_suf)
    bytes_in = len(argv[7]) + len(argv[8]) + len(argv[9])
    return execute(ctx, target, query, sparse=False, fused=True, want_lse=False, bytes_in=bytes_in)


@command("ATTEND.PREFIX.INFO", 1, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def attend_prefix_info(ctx, argv):
    """ATTEND.PREFIX.INFO: key:value lines about the warm tier and the queries served (Pion's)."""
    return info_text(attention_engine(ctx.server).info())
