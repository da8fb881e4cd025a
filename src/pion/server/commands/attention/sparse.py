"""The sparse ``ATTEND.PREFIX.*`` forms: token lists chosen by the caller, or by the server's selector.

``QUERY_SPARSE``: per head, the caller's token ids (M=1, no GQA, as the reference).
``QUERY_SPARSE_AUTO[_FUSED]``: the server picks ``K_top`` blocks of ``B`` tokens with block-mean
(selector 0) or Quest (selector 1), by the exact algorithm of ``pion.attention.select`` (shared
mask, ascending blocks, the tail kept), then attends them (and the causal suffix). Both
selectors run on every server: there is no Metal-only form here. Pion adds selectors 2 (Quest)
and 3 (block-mean) with a mask per query head instead of the shared one. Decode steps only (M=1).
"""

from __future__ import annotations

import numpy as np

from pion.attention.query import Query, Selector
from pion.kvcache.vstore import MAX_TOKENS
from pion.protocol.errors import ReplyError
from pion.server.args import arg, strict_int
from pion.server.commands.attention.prefix import (
    check_gqa,
    check_stored_heads,
    execute,
    parse_head_map,
    parse_tail,
    query_rows,
    resolve,
    suffix_rows,
)
from pion.server.commands.attention.store import MAX_HEADS, parse_heads_dim, parse_layer
from pion.server.registry import command

MAX_BLOCK = 65536
AUTO_TAIL = ("fa_window", "selector_id")


def parse_indices(blob, counts_blob, heads: int, k_max: int, n_tokens: int) -> list[np.ndarray]:
    if len(blob) != heads * k_max * 4:
        raise ReplyError(f"ERR indices blob size mismatch (expected H*K_sparse_max*4 = {heads * k_max * 4})")
    if len(counts_blob) != heads * 4:
        raise ReplyError(f"ERR counts blob size mismatch (expected H*4 = {heads * 4})")
    table = np.frombuffer(blob, dtype="<i4").reshape(heads, k_max)
    counts = np.frombuffer(counts_blob, dtype="<u4")
    if counts.max(initial=0) > k_max:
        raise ReplyError("ERR counts must be <= K_sparse_max")
    picked = [table[h, :counts[h]].astype(np.intp) for h in range(heads)]
    if any(len(ids) and (ids.min() < 0 or ids.max() >= n_tokens) for ids in picked):
        raise ReplyError(f"ERR QUERY_SPARSE index out of range (the prefix holds {n_tokens} tokens)")
    return picked


@command("ATTEND.PREFIX.QUERY_SPARSE", -9, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def attend_prefix_query_sparse(ctx, argv):
    """ATTEND.PREFIX.QUERY_SPARSE sid layer H D K_sparse_max Q indices counts [fa_window] [FROM ns] [SCALE s]: out.

    Decode step (M=1); head h attends its first counts[h] token ids of row h of indices
    (int32 H*K_sparse_max; counts u32 H). Ids before the fa_window are left out. Reply H*D fp32.
    """
    cmd = "ATTEND.PREFIX.QUERY_SPARSE"
    sid, layer_id = arg(argv[1]), parse_layer(argv[2])
    heads, dim = parse_heads_dim(argv[3], argv[4])
    k_max = strict_int(argv[5], 1, MAX_TOKENS, "ERR K_sparse_max must be > 0")
    q = query_rows(argv[6], heads, dim, decode_only=True)
    tail = parse_tail(ctx, argv[9:], cmd)
    target = resolve(ctx, cmd, sid, layer_id, tail.origin)
    check_stored_heads(target, heads, dim, cmd)
    n_tokens = target.view.n_tokens if target.view is not None else target.source.n_tokens
    indices = parse_indices(argv[7], argv[8], heads, k_max, n_tokens)
    query = Query(q, np.arange(heads), tail.scale or dim ** -0.5, tail.window, indices=indices)
    return execute(ctx, target, query, sparse=True, fused=False, want_lse=False, bytes_in=len(argv[6]) + len(argv[7]))


def parse_selector(argv, at: int) -> tuple[int, int, int]:
    """``B K_top H_kv`` at ``argv[at:at+3]``."""
    block = strict_int(argv[at], 1, MAX_BLOCK, f"ERR invalid B (block size 1..{MAX_BLOCK})")
    k_top = strict_int(argv[at + 1], 1, MAX_TOKENS, "ERR K_top must be > 0")
    kv_heads = strict_int(argv[at + 2], 1, MAX_HEADS, "ERR invalid H_kv (1..256)")
    return block, k_top, kv_heads


@command("ATTEND.PREFIX.QUERY_SPARSE_AUTO", -10, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def attend_prefix_query_sparse_auto(ctx, argv):
    """ATTEND.PREFIX.QUERY_SPARSE_AUTO sid layer H_q D B K_top H_kv Q head_map [fa_window] [selector_id] [FROM ns] [SCALE s]: out.

    Decode step (M=1): the server picks K_top blocks of B tokens (selector 0 block-mean, 1 Quest;
    2 and 3 the same per query head) and always the tail; a prefix of at most B*K_top tokens is attended densely. Reply H_q*D fp32.
    """
    cmd = "ATTEND.PREFIX.QUERY_SPARSE_AUTO"
    return sparse_auto(ctx, argv, cmd, fused=False)


@command("ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", -13, "readonly zero_copy", categories="@read @pion", group="pion",
         since="0.1.0")
def attend_prefix_query_sparse_auto_fused(ctx, argv):
    """ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED sid layer H_q D B K_top H_kv S_suf Q K_suf V_suf head_map [fa_window] [selector_id] [FROM ns] [SCALE s]: out.

    The sparse prefix of QUERY_SPARSE_AUTO merged with the dense causal suffix in one softmax;
    with S_suf=0 it equals QUERY_SPARSE_AUTO. Reply H_q*D fp32.
    """
    cmd = "ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED"
    return sparse_auto(ctx, argv, cmd, fused=True)


def sparse_auto(ctx, argv, cmd: str, fused: bool):
    """Both AUTO forms: the fused one has ``S_suf`` after ``H_kv`` and ``K_suf V_suf`` after ``Q``."""
    sid, layer_id = arg(argv[1]), parse_layer(argv[2])
    q_heads, dim = parse_heads_dim(argv[3], argv[4])
    block, k_top, kv_heads = parse_selector(argv, 5)
    check_gqa(q_heads, kv_heads)
    suffix = strict_int(argv[8], 0, 1 << 24, "ERR invalid S_suf") if fused else 0
    pos = 9 if fused else 8  # Q
    q = query_rows(argv[pos], q_heads, dim, decode_only=True)
    pos += 1
    k_suf = v_suf = None
    if fused:
        k_suf, v_suf = suffix_rows(argv[pos], argv[pos + 1], kv_heads, suffix, dim)
        pos += 2
    head_map = parse_head_map(argv[pos], q_heads, kv_heads)
    tail = parse_tail(ctx, argv[pos + 1:], cmd, AUTO_TAIL)
    target = resolve(ctx, cmd, sid, layer_id, tail.origin)
    check_stored_heads(target, kv_heads, dim, cmd)
    query = Query(q, head_map, tail.scale or dim ** -0.5, tail.window, selector=Selector(block, k_top, tail.selector),
                  k_suffix=k_suf, v_suffix=v_suf)
    bytes_in = q.nbytes + (0 if k_suf is None else k_suf.nbytes + v_suf.nbytes)
    return execute(ctx, target, query, sparse=True, fused=fused, want_lse=False, bytes_in=bytes_in)
