"""Vector-set reads (Redis 8): VSIM VEMB VLINKS VINFO VCARD VDIM VISMEMBER VGETATTR
VRANDMEMBER VRANGE.

VSIM's similarity is ``1 - distance / 2`` (1 = same direction, 0 = opposite). With WITHSCORES
and/or WITHATTRIBS, RESP3 answers a map (element -> score, attributes, or ``[score,
attributes]`` when both were asked) and RESP2 a flat array (element, score, attributes), as
Redis 8 does. A search over a large set runs in a worker thread (Redis threads VSIM too), so
other clients go on meanwhile; NOTHREAD, MULTI/EXEC and scripts run it inline. Small sets (up to
``vectorset.EXACT_SEARCH_MAX`` elements) are scanned exactly, which is faster than a graph walk here.
With the compiled kernel (``vset.kernel``) a walk without FILTER or TRUTH and with EF up to
``INLINE_EF`` runs inline too: it takes a fraction of a millisecond, less than the hand-off to a
worker thread and back (measured: 3x the single-client VSIM rate at 10,000 x 384, see
docs/vector-sets.md); a FILTER runs Python per candidate and stays in the worker.
"""

from __future__ import annotations

import numpy as np

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY, Status
from pion.protocol.streamed import STREAM_MIN, sampled
from pion.server.args import parse_float, parse_int
from pion.server.commands.vsets.args import double, get_set, parse_vector
from pion.server.context import Ctx
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command
from pion.storage.budget import UNLIMITED, Budget, timeout_ms
from pion.vector.vset import CompileError, VectorSet, compile_filter, kernel, vectorset

_KEYS = (1, 1, 1)
#: the largest EF an unfiltered compiled walk runs inline with (see the module docstring)
INLINE_EF = 400
_READ = "@read @slow"
_READ_FAST = "@read @fast"


class _Query:
    __slots__ = ("withscores", "withattribs", "count", "ef", "epsilon", "flt", "filter_ef", "truth", "nothread")

    def __init__(self) -> None:
        self.withscores = self.withattribs = self.truth = self.nothread = False
        self.count = 10
        self.ef = 0
        self.epsilon = 2.0
        self.flt = None
        self.filter_ef = 0


def _query_vector(vs: VectorSet, argv: list[bytes]) -> tuple[np.ndarray, int]:
    """The query as a unit vector in the set's space, and where the options start."""
    if argv[2].upper() == b"ELE":
        slot = vs.slot_of(argv[3])
        if slot is None:
            raise ReplyError("ERR element not found in set")
        return vs.unit(vs.embedding(slot), projected=True)[0], 4
    vec, _, consumed = parse_vector(argv, 2, False)
    projected = True
    if vs.proj is not None and vec.size != vs.dim:
        if vec.size != vs.proj_in:
            raise ReplyError(f"ERR Input dimension mismatch for projection - got {vec.size} "
                             f"but projection expects {vs.proj_in}")
        projected = False
    elif vec.size != vs.dim:
        raise ReplyError(f"ERR Vector dimension mismatch - got {vec.size} but set has {vs.dim}")
    return vs.unit(vec, projected=projected)[0], 2 + consumed


def _positive(raw: bytes, error: str, upper: int | None = None) -> int:
    value = parse_int(raw, error)
    if value <= 0 or (upper is not None and value > upper):
        raise ReplyError(error)
    return value


def _parse_query(argv: list[bytes], j: int) -> _Query:
    q = _Query()
    while j < len(argv):
        opt = argv[j].upper()
        has_arg = j + 1 < len(argv)
        if opt in (b"WITHSCORES", b"WITHATTRIBS", b"TRUTH", b"NOTHREAD"):
            setattr(q, opt.decode().lower(), True)
            j += 1
            continue
        if not has_arg or opt not in (b"COUNT", b"EPSILON", b"EF", b"FILTER-EF", b"FILTER"):
            raise ReplyError("ERR syntax error in VSIM command")
        raw = argv[j + 1]
        if opt == b"COUNT":
            q.count = _positive(raw, "ERR invalid COUNT")
        elif opt == b"EPSILON":
            q.epsilon = parse_float(raw, "ERR invalid EPSILON")
            if q.epsilon <= 0:
                raise ReplyError("ERR invalid EPSILON")
        elif opt == b"EF":
            q.ef = _positive(raw, "ERR invalid EF", 1_000_000)
        elif opt == b"FILTER-EF":
            q.filter_ef = _positive(raw, "ERR invalid FILTER-EF")
        else:
            try:
                q.flt = compile_filter(raw)
            except CompileError as exc:
                near = raw[exc.pos:] if exc.pos < len(raw) else raw
                raise ReplyError("ERR syntax error in FILTER expression near: "
                                 + near.decode("utf-8", "replace")) from None
        j += 2
    if q.filter_ef == 0:
        q.filter_ef = q.count * 100
    return q


def filter_budget(ctx: Ctx) -> Budget:
    """A FILTER's time budget: the query TIMEOUT of FT.CONFIG (500 ms by default, 0: none), the
    server's one budget for a client's query. Redis evaluates FILTER in C and has none; here an
    expression over many elements could hold the loop, so past it VSIM answers
    ``Timeout limit was reached``."""
    search = ctx.server.parts.search
    return Budget(timeout_ms(search.config if search is not None else None))


@command("VSIM", -4, "readonly", keys=_KEYS, categories=_READ, group="vector_set", since="8.0.0")
def vsim(ctx: Ctx, argv: list[bytes]):
    """VSIM key (ELE | FP32 | VALUES num) (vector | element) [WITHSCORES] [WITHATTRIBS] [COUNT num] [EPSILON delta] [EF search-exploration-factor] [FILTER expression] [FILTER-EF max-filtering-effort] [TRUTH] [NOTHREAD]"""
    key = argv[1]
    vs = get_set(ctx, key)
    if vs is None:
        return []
    unit, start = _query_vector(vs, argv)
    q = _parse_query(argv, start)

    budget = filter_budget(ctx) if q.flt is not None else UNLIMITED

    def search() -> list:
        return vs.search(unit, q.count, q.ef, q.flt, q.filter_ef, q.truth, budget)

    quick = kernel.compiled() and q.flt is None and not q.truth and max(q.ef or 0, q.count) <= INLINE_EF
    if q.nothread or quick or len(vs) <= vectorset.EXACT_SEARCH_MAX or not can_defer(ctx):
        return _reply(ctx, vs, q, search(), fresh=q.flt is None)
    return Deferred([search], lambda ctx, results: _reply(ctx, vs, q, results[0]))


def _reply(ctx: Ctx, vs: VectorSet, q: _Query, matches: list, fresh: bool = False):
    """``fresh``: the search ran inline just now without a FILTER (whose expression could hand
    the loop over between slices), so its matches need no re-check."""
    found = vs.resolve(matches, fresh)
    epsilon = np.float32(q.epsilon)
    if epsilon < 1.0:  # distances are clamped to [0, 2]: from 1 on EPSILON cuts nothing
        for i, (_, d, _) in enumerate(found):
            if np.float32(d) / np.float32(2.0) > epsilon:
                found = found[:i]
                break
    if not q.withscores and not q.withattribs:  # the plain reply: no score is formatted
        return [name for name, _, _ in found]
    rows = [(name, double(1.0 - float(d) / 2.0), attr) for name, d, attr in found]
    if q.withscores and q.withattribs:
        if ctx.client.proto == 3:
            return {name: [score, attr] for name, score, attr in rows}
        return [item for row in rows for item in row]
    if q.withscores:
        return {name: score for name, score, _ in rows}
    if q.withattribs:
        return {name: attr for name, _, attr in rows}
    return [name for name, _, _ in rows]


@command("VEMB", -3, "readonly fast", keys=_KEYS, categories=_READ_FAST, group="vector_set", since="8.0.0")
def vemb(ctx: Ctx, argv: list[bytes]):
    """VEMB key element [RAW]"""
    raw = False
    for opt in argv[3:]:
        if opt.lower() != b"raw":
            raise ReplyError("ERR invalid option")
        raw = True
    vs = get_set(ctx, argv[1])
    slot = vs.slot_of(argv[2]) if vs is not None else None
    if slot is None:
        return None
    if raw:
        name, blob, norm, rng = vs.raw(slot)
        reply = [Status(name), blob, double(norm)]
        return reply + [double(rng)] if rng is not None else reply
    return [double(x) for x in vs.embedding(slot).tolist()]


@command("VLINKS", -3, "readonly fast", keys=_KEYS, categories=_READ_FAST, group="vector_set", since="8.0.0")
def vlinks(ctx: Ctx, argv: list[bytes]):
    """VLINKS key element [WITHSCORES]"""
    if len(argv) > 4 or (len(argv) == 4 and argv[3].upper() != b"WITHSCORES"):
        raise ReplyError(errors.wrong_arity("vlinks"))
    vs = get_set(ctx, argv[1])
    slot = vs.slot_of(argv[2]) if vs is not None else None
    if slot is None:
        return None
    levels = vs.links(slot)
    if len(argv) == 4:
        return [{name: double(float(np.float32(1.0 - d / 2.0))) for name, d in level} for level in levels]
    return [[name for name, _ in level] for level in levels]


@command("VINFO", 2, "readonly fast", keys=_KEYS, categories=_READ_FAST, group="vector_set", since="8.0.0")
def vinfo(ctx: Ctx, argv: list[bytes]):
    """VINFO key"""
    vs = get_set(ctx, argv[1])
    if vs is None:
        return NULL_ARRAY
    info = vs.info()
    return {Status(k): (Status(v) if isinstance(v, str) else v) for k, v in info.items()}


@command("VCARD", 2, "readonly fast", keys=_KEYS, categories=_READ_FAST, group="vector_set", since="8.0.0")
def vcard(ctx: Ctx, argv: list[bytes]):
    """VCARD key"""
    vs = get_set(ctx, argv[1])
    return 0 if vs is None else len(vs)


@command("VDIM", 2, "readonly fast", keys=_KEYS, categories=_READ_FAST, group="vector_set", since="8.0.0")
def vdim(ctx: Ctx, argv: list[bytes]):
    """VDIM key"""
    vs = get_set(ctx, argv[1])
    if vs is None:
        raise ReplyError("ERR key does not exist")
    return vs.dim


@command("VISMEMBER", 3, "readonly", keys=_KEYS, categories=_READ_FAST, group="vector_set", since="8.2.0")
def vismember(ctx: Ctx, argv: list[bytes]):
    """VISMEMBER key element"""
    vs = get_set(ctx, argv[1])
    return vs is not None and argv[2] in vs.index


@command("VGETATTR", 3, "readonly fast", keys=_KEYS, categories=_READ_FAST, group="vector_set", since="8.0.0")
def vgetattr(ctx: Ctx, argv: list[bytes]):
    """VGETATTR key element"""
    vs = get_set(ctx, argv[1])
    slot = vs.slot_of(argv[2]) if vs is not None else None
    return None if slot is None else vs.attrs[slot]


@command("VRANDMEMBER", -2, "readonly", keys=_KEYS, categories=_READ, group="vector_set", since="8.0.0")
def vrandmember(ctx: Ctx, argv: list[bytes]):
    """VRANDMEMBER key [count]"""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity("vrandmember"))
    count = None
    if len(argv) == 3:
        count = parse_int(argv[2], "ERR COUNT value is not an integer")
        if count == 0:
            return []
    vs = get_set(ctx, argv[1])
    if vs is None or len(vs) == 0:
        return None if count is None else []
    if count is None:
        return vs.random_member()
    if -count >= STREAM_MIN and can_defer(ctx):  # a large reply: made in pieces (pion.protocol.streamed)
        return sampled(vs.live_names(), -count)
    return vs.random_members(count)


def _range_bound(raw: bytes, which: str) -> tuple[bytes | None, bool, str]:
    """``[elem`` / ``(elem`` / ``-`` / ``+``: (element, inclusive, special)."""
    if raw in (b"-", b"+"):
        return None, True, raw.decode()
    if len(raw) > 1 and raw[:1] in (b"[", b"("):
        return raw[1:], raw[:1] == b"[", ""
    raise ReplyError(f"ERR invalid {which} range format")


@command("VRANGE", -4, "readonly", keys=_KEYS, categories=_READ, group="vector_set", since="8.4.0")
def vrange(ctx: Ctx, argv: list[bytes]):
    """VRANGE key start end [count]"""
    if len(argv) > 5:
        raise ReplyError(errors.wrong_arity("vrange"))
    count = -1
    if len(argv) == 5:
        count = parse_int(argv[4], "ERR invalid COUNT value")
    start, start_incl, start_special = _range_bound(argv[2], "start")
    end, end_incl, end_special = _range_bound(argv[3], "end")
    if start_special == "+" or end_special == "-":
        raise ReplyError("ERR '-' can only be used as first argument, '+' only as second")
    vs = get_set(ctx, argv[1])
    if vs is None:
        return []
    return vs.lex_range(start, start_incl, end, end_incl, count)
