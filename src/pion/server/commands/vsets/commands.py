"""Vector-set writes (Redis 8): VADD VREM VSETATTR.

Replies and error texts are vset.c's; VADD answers a boolean (RESP3 ``#t``/``#f``) as Redis
does. Every change is logged as the command itself, updates too (Redis 8 does not propagate a
VADD that only updated an element; a restart here must keep the new vector). The graph's
random levels make replay rebuild an equivalent graph, not the same links.

``VADD ... CAS`` collects the new node's neighbour candidates in a worker thread (the slow,
read-only part) and links it on the loop, as Redis does; if the key was replaced, or the
element appeared meanwhile, it answers 1 and changes nothing (the other write won). When
nodes were removed meanwhile the candidates are collected again on the loop. On the pure-Python
graph code a plain VADD of a new element into a set of more than ``EXACT_BUILD_MAX`` elements
does the same, since collecting its candidates takes milliseconds there, except that a change
meanwhile makes it simply run again on the loop; with the compiled kernel (``vset.kernel``) a
plain VADD runs inline, as Redis's does: its candidates take a fraction of a millisecond, less
than handing them to a worker thread and back.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.commands.vsets.args import get_set, parse_vector
from pion.server.context import Ctx
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command
from pion.vector.vset import VectorSet, build, kernel, quant
from pion.vector.vset.graph import DEFAULT_M, MAX_M, MIN_M, Graph
from pion.vector.vset.vectorset import DEFAULT_BUILD_EF

_KEYS = (1, 1, 1)


class _Options:
    __slots__ = ("cas", "ef", "m", "attr", "quant")

    def __init__(self) -> None:
        self.cas = False
        self.ef = DEFAULT_BUILD_EF
        self.m = DEFAULT_M
        self.attr: bytes | None = None
        self.quant = quant.Q8


def _options(argv: list[bytes], start: int) -> _Options:
    opts = _Options()
    j = start
    while j < len(argv):
        opt = argv[j].upper()
        has_arg = j + 1 < len(argv)
        if opt == b"CAS":
            opts.cas = True
        elif opt == b"EF" and has_arg:
            opts.ef = parse_int(argv[j + 1], "ERR invalid EF")
            if not 0 < opts.ef <= 1_000_000:
                raise ReplyError("ERR invalid EF")
            j += 1
        elif opt == b"M" and has_arg:
            opts.m = parse_int(argv[j + 1], "ERR invalid M")
            if not MIN_M <= opts.m <= MAX_M:
                raise ReplyError("ERR invalid M")
            j += 1
        elif opt == b"SETATTR" and has_arg:
            opts.attr = argv[j + 1]
            j += 1
        elif opt in quant.QUANT_OPTIONS:
            opts.quant = quant.QUANT_OPTIONS[opt]
        else:
            raise ReplyError("ERR invalid option after element")
        j += 1
    return opts


def _check_compatible(vs: VectorSet, opts: _Options, dim: int, reduce_dim: int) -> None:
    """An existing set must be asked for its own encoding, M, dimension and projection."""
    if vs.quant != opts.quant:
        raise ReplyError("ERR asked quantization mismatch with existing vector set")
    if vs.graph.m != opts.m:
        raise ReplyError("ERR asked M value mismatch with existing vector set")
    if (vs.proj is None and vs.dim != dim) or (vs.proj is not None and vs.dim != reduce_dim):
        raise ReplyError(f"ERR Vector dimension mismatch - got {dim} but set has {vs.dim}")
    if reduce_dim and vs.proj is None:
        raise ReplyError("ERR cannot add projection to existing set without projection")
    if vs.proj is not None and dim != vs.proj_in:
        raise ReplyError(f"ERR Input dimension mismatch for projection - got {dim} but projection expects {vs.proj_in}")


@command("VADD", -5, "write denyoom", keys=_KEYS, categories="@write @slow", group="vector_set", since="8.0.0")
def vadd(ctx: Ctx, argv: list[bytes]):
    """VADD key [REDUCE dim] FP32 vector | VALUES num value [value ...] element [CAS] [NOQUANT | Q8 | BIN] [EF build-exploration-factor] [SETATTR attributes] [M numlinks]"""
    vec, reduce_dim, consumed = parse_vector(argv, 2, True)
    if len(argv) - 2 - consumed < 1:
        raise ReplyError(errors.wrong_arity("vadd"))
    name = argv[2 + consumed]
    opts = _options(argv, 3 + consumed)
    key = argv[1]
    vs = get_set(ctx, key)
    if vs is None:
        vs = VectorSet(reduce_dim or vec.size, opts.quant, opts.m, proj_in=vec.size if reduce_dim else 0)
        vs.add(name, vec, opts.attr, opts.ef)
        ctx.db.set(key, vs)
        ctx.dirty()
        return True
    _check_compatible(vs, opts, vec.size, reduce_dim)
    slow = len(vs) > build.EXACT_BUILD_MAX and not kernel.compiled()
    if (opts.cas or slow) and name not in vs.index and can_defer(ctx):
        return _vadd_deferred(vs, key, name, vec, opts, argv)
    added = vs.add(name, vec, opts.attr, opts.ef)
    ctx.db.signal(key)
    ctx.dirty()
    return added


def _vadd_deferred(vs: VectorSet, key: bytes, name: bytes, vec, opts: _Options, argv: list[bytes]) -> Deferred:
    """Collect the candidates in a worker, link on the loop. Without CAS, a change meanwhile
    (the key replaced, the element added by someone else) makes the command run again inline,
    so it behaves exactly as if it had run at once; with CAS it is Redis's check-and-set."""
    g = vs.graph
    epoch = g.epoch
    level = Graph.random_level()

    def collect() -> list:
        unit, _ = vs.unit(vec)
        row, rng = g.encode(unit)
        return build.candidates(g, g.probe(row, rng), level, opts.ef)

    def finish(ctx: Ctx, results: list) -> bool:
        if ctx.db.peek(key) is not vs or name in vs.index:
            if not opts.cas:
                return vadd(ctx, argv)  # inline now: run_deferred's depth keeps it from deferring
            return True  # CAS: the key or the element changed meanwhile; that write came "after"
        found = results[0] if g.epoch == epoch else None
        vs.add(name, vec, opts.attr, opts.ef, found=found, level=level)
        ctx.db.signal(key)
        ctx.dirty()
        return True

    return Deferred([collect], finish)


@command("VREM", 3, "write", keys=_KEYS, categories="@write @slow", group="vector_set", since="8.0.0")
def vrem(ctx: Ctx, argv: list[bytes]):
    """VREM key element"""
    key = argv[1]
    vs = get_set(ctx, key)
    if vs is None or not vs.remove(argv[2]):
        return False
    if len(vs) == 0:
        ctx.db.delete(key)
    else:
        ctx.db.signal(key)
    ctx.dirty()
    return True


@command("VSETATTR", 4, "write fast", keys=_KEYS, categories="@write @fast", group="vector_set", since="8.0.0")
def vsetattr(ctx: Ctx, argv: list[bytes]):
    """VSETATTR key element json"""
    key = argv[1]
    vs = get_set(ctx, key)
    if vs is None or not vs.set_attr(argv[2], argv[3]):
        return False
    ctx.db.signal(key)
    ctx.dirty()
    return True
