"""The compiled vector-set kernel against the pure-Python reference: the same distance bits, the
same graph from the same random levels (inserts, deletions, link repair), the same VSIM answers,
and a stored form either path writes and the other loads and extends."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pion.storage.serialize import dump_value, load_value
from pion.vector.vset import VectorSet, build, compile_filter, kernel, quant
from pion.vector.vset.graph import Graph
from tests.unit.vector.conftest import check_graph, clustered

pytestmark = pytest.mark.skipif(not kernel.available(), reason="the compiled vector-set kernel is not built")

QUANTS = [quant.Q8, quant.F32, quant.BIN]


@pytest.fixture(autouse=True)
def _restore_path():
    before = kernel.impl
    yield
    kernel.impl = before


def _encoded(n: int, dim: int, qt: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    data = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    data[3] = 0  # a zero vector: distance 1 to everything under Q8
    data[4] = data[5]  # a duplicate: equal distances, ties broken by slot
    rows, ranges = zip(*[quant.encode(quant.normalize(x)[0], qt) for x in data], strict=True)
    return np.ascontiguousarray(np.stack(rows)), np.array(ranges, dtype=np.float32)


@pytest.mark.parametrize("qt", QUANTS)
@pytest.mark.parametrize("dim", [1, 7, 8, 9, 63, 64, 65, 384, 1040, 1041])
def test_kernel_distances_equal_the_reference_bit_for_bit(qt, dim):
    rows, ranges = _encoded(64, dim, qt, seed=dim)
    slots = np.arange(64)[::-1].copy()
    for j in (0, 3, 4, 17):
        probe = quant.probe(rows[j], float(ranges[j]), qt)
        want = quant.distances(rows[slots], ranges[slots], probe, qt, dim)
        got = kernel._compiled.distances(rows, ranges, probe, qt, dim, slots)
        assert got.dtype == np.float32
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_q8_distance_is_redis_formula_on_the_integer_dot():
    rows, ranges = _encoded(8, 300, quant.Q8, seed=5)
    dot = int(rows[1].astype(np.int64) @ rows[2].astype(np.int64))
    scale = (np.float32(ranges[2]) / np.float32(127)) * (np.float32(ranges[1]) / np.float32(127))
    want = np.float32(1) - np.float32(dot) * scale
    got = quant.distances(rows[2:3], ranges[2:3], quant.probe(rows[1], float(ranges[1]), quant.Q8), quant.Q8, 300)
    assert got[0] == want


@pytest.mark.parametrize("n", [1, 50, 1500])
def test_f32_reference_sums_each_lane_in_order_then_the_fixed_tree(n):
    """The numpy reference really adds each lane in order (the kernel's loop), for one row, a
    walk's few and an exact scan's many (which numpy would sum otherwise if it could)."""
    rng = np.random.default_rng(2)
    dim = 203
    rows = (rng.normal(size=(n, dim)) * 10.0 ** rng.integers(-6, 6, (n, dim))).astype(np.float32)  # order-sensitive
    q = rng.normal(size=dim).astype(np.float32)
    got = quant.distances(rows, np.ones(n, np.float32), q, quant.F32, dim)
    for i in range(0, n, max(1, n // 40)):
        lanes = [0.0] * quant.LANES
        for j in range(dim):
            lanes[j % quant.LANES] += float(rows[i, j]) * float(q[j])
        total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
        assert got[i] == np.float32(1) - np.float32(total), i
    assert np.array_equal(got, kernel._compiled.distances(rows, np.ones(n, np.float32), q, quant.F32, dim, np.arange(n)))


@pytest.mark.parametrize("qt", QUANTS)
def test_pairwise_entries_equal_distances(qt):
    rows, ranges = _encoded(12, 70, qt, seed=9)
    matrix = quant.pairwise(rows, ranges, rows, ranges, qt, 70)
    for i in range(12):
        col = quant.distances(rows, ranges, quant.probe(rows[i], float(ranges[i]), qt), qt, 70)
        assert matrix[:, i].view(np.uint32).tolist() == col.view(np.uint32).tolist()


def _build(compiled: bool, data: np.ndarray, qt: int, m: int, seed: int, removals: int = 0,
           start: VectorSet | None = None, first: int = 0) -> VectorSet:
    """Insert ``data[first:]`` (element i at the i-th level drawn from ``seed``), then remove every
    7th element up to ``removals`` times and re-insert half of them with new vectors: the
    deletion repairs and the full-node rules run."""
    kernel.use(compiled)
    random.seed(seed)
    levels = [Graph.random_level() for _ in range(len(data))]
    vs = start if start is not None else VectorSet(data.shape[1], qt, m)
    for i in range(first, len(data)):
        vs.add(b"e%d" % i, data[i], b'{"c": %d}' % (i % 10), level=levels[i])
    random.seed(seed + 1)
    for i in list(range(0, len(data), 7))[:removals]:
        vs.remove(b"e%d" % i)
    for i in list(range(0, len(data), 7))[: removals // 2]:
        vs.add(b"e%d" % i, data[i] * 1.5 + 0.1, None)
    return vs


def _same_graph(a: VectorSet, b: VectorSet) -> None:
    ga, gb = a.graph, b.graph
    for field in ("rows", "ranges", "norms", "levels", "uids", "links0", "n0"):
        assert np.array_equal(getattr(ga, field), getattr(gb, field)), field
    assert sorted(ga.upper) == sorted(gb.upper)
    for slot, layers in ga.upper.items():
        assert np.array_equal(layers, gb.upper[slot]), slot
    assert (ga.entry, ga.max_level, ga.count, ga.hw, ga.free, ga.last_id) == (
        gb.entry, gb.max_level, gb.count, gb.hw, gb.free, gb.last_id)
    assert a.names == b.names and a.index == b.index


def _answers(vs: VectorSet, queries: np.ndarray, compiled: bool) -> list:
    """VSIM's candidates as (distance, node uid): a loaded set has its slots renumbered densely
    (in order, so ties still fall the same way)."""
    kernel.use(compiled)
    flt = compile_filter(b".c < 3")
    out = []
    for q in queries:
        unit, _ = vs.unit(q)
        for args in ((10, 60, None, 0, False), (10, 30, flt, 0, False), (5, 0, flt, 40, False), (10, 0, None, 0, True)):
            out.append([(d, uid) for d, _, uid in vs.search(unit, *args)])
    return out


@pytest.mark.parametrize("qt", QUANTS)
@pytest.mark.parametrize("m", [4, 16])
def test_both_paths_build_the_same_graph_and_answer_alike(graph_paths, qt, m):
    data = clustered(500, 24, seed=qt + m)
    data[10] = data[11]  # duplicates: ties broken by slot in both paths
    pure = _build(False, data, qt, m, seed=7, removals=40)
    compiled = _build(True, data, qt, m, seed=7, removals=40)
    _same_graph(pure, compiled)
    check_graph(compiled.graph)
    queries = clustered(12, 24, seed=99)
    answers = _answers(pure, queries, compiled=False)
    assert answers == _answers(compiled, queries, compiled=True)
    assert any(answers)


@pytest.mark.parametrize("qt", QUANTS)
def test_small_exploration_factors_make_every_walk_rule_count(graph_paths, qt):
    """With a small build EF the walks stop early, so any difference in when a walk cuts its
    results, or in which candidates it expands, shows in the links."""
    data = clustered(1200, 16, seed=21)
    built = []
    for compiled in (False, True):
        kernel.use(compiled)
        random.seed(1)
        vs = VectorSet(16, qt, 8)
        for i, x in enumerate(data):
            vs.add(b"e%d" % i, x, None, ef=8 if i % 2 else 20)
        built.append(vs)
    _same_graph(*built)
    queries = clustered(20, 16, seed=22)
    for ef in (1, 3, 12):
        want = []
        for compiled, vs in zip((False, True), built, strict=True):
            kernel.use(compiled)
            want.append([vs.search(vs.unit(q)[0], min(ef, 10), ef, None, 0, False) for q in queries])
        assert want[0] == want[1]


@pytest.mark.parametrize("qt", [quant.Q8, quant.BIN])
def test_both_paths_agree_with_exact_scan_candidates_too(qt):
    """Small sets collect insertion candidates with an exact scan (the kernel's distances)."""
    data = clustered(300, 16, seed=4)
    _same_graph(_build(False, data, qt, 16, seed=3), _build(True, data, qt, 16, seed=3))


def test_a_set_built_half_by_each_path_equals_one_built_by_the_reference(graph_paths):
    data = clustered(400, 20, seed=11)
    pure = _build(False, data, quant.Q8, 8, seed=5)
    half = _build(True, data[:200], quant.Q8, 8, seed=5)
    mixed = _build(False, data, quant.Q8, 8, seed=5, start=half, first=200)
    _same_graph(pure, mixed)


@pytest.mark.parametrize("qt", QUANTS)
def test_stored_form_round_trips_between_the_paths(graph_paths, qt):
    data = clustered(400, 32, seed=qt)
    pure = _build(False, data, qt, 8, seed=2, removals=20)
    compiled = _build(True, data, qt, 8, seed=2, removals=20)
    assert dump_value(pure) == dump_value(compiled)  # the same bytes on disk
    queries = clustered(8, 32, seed=5)
    kernel.use(True)
    loaded_by_compiled = load_value(dump_value(pure))
    kernel.use(False)
    loaded_by_pure = load_value(dump_value(compiled))
    want = _answers(pure, queries, compiled=False)
    assert _answers(loaded_by_compiled, queries, compiled=True) == want
    assert _answers(loaded_by_pure, queries, compiled=False) == want
    # and each loaded copy grows the same way on the other path
    more = clustered(60, 32, seed=6)
    for vs, path in ((loaded_by_compiled, False), (loaded_by_pure, True)):
        kernel.use(path)
        random.seed(42)
        for i, x in enumerate(more):
            vs.add(b"new%d" % i, x, None)
        check_graph(vs.graph)
    _same_graph(loaded_by_compiled, loaded_by_pure)


def test_a_walk_skips_links_outside_its_snapshot():
    """A reader keeps the arrays it started with; a link past them (the graph grew) is skipped,
    never read out of bounds."""
    data = clustered(80, 8, seed=1)
    kernel.use(True)
    vs = VectorSet(8, quant.Q8, 4)
    for i, x in enumerate(data):
        vs.add(b"e%d" % i, x, None)
    g = vs.graph
    g.links0[0, : g.n0[0]] = g.cap + 5  # what a torn read could show
    g.n0[1] = g.m0 + 7
    probe = g.probe(*quant.encode(vs.unit(data[0])[0], quant.Q8))
    assert all(0 <= s < g.cap for _, s, _ in g.search(probe, 20))
    with pytest.raises(IndexError):
        kernel._compiled.distances(g.rows, g.ranges, probe, quant.Q8, 8, np.array([g.cap]))


def test_switch_reports_the_path():
    kernel.use(False)
    assert not kernel.compiled() and "pure-Python" in kernel.describe()
    kernel.use(True)
    assert kernel.compiled() and "compiled" in kernel.describe()
    assert build.kernel is kernel


@pytest.mark.parametrize("dim", [1, 31, 32, 33, 96, 384, 385, 1040])
def test_the_vnni_q8_dot_gives_the_plain_loop_s_integer_for_any_bytes(dim):
    """The AVX-VNNI dot (where the CPU has it) against the plain loop on raw bytes, -128 and 127
    included (stored Q8 rows never hold -128, a loaded one might): the same distance bits."""
    k = kernel._compiled
    rng = np.random.default_rng(dim)
    rows = rng.integers(-128, 128, size=(40, dim)).astype(np.int8)
    rows[0], rows[1], rows[2] = -128, 127, 0
    ranges = rng.random(40).astype(np.float32)
    slots = np.arange(40, dtype=np.int32)
    for j in (0, 1, 5):
        probe = np.empty(dim + 1, dtype=np.float32)
        probe[:-1], probe[-1] = rows[j], np.float32(0.37)
        want = quant.distances(rows, ranges, probe, quant.Q8, dim).view(np.uint32).tolist()
        had = k.simd() == "avxvnni"
        try:
            k.use_simd(False)
            plain = k.distances(rows, ranges, probe, quant.Q8, dim, slots).view(np.uint32).tolist()
            k.use_simd(True)
            fast = k.distances(rows, ranges, probe, quant.Q8, dim, slots).view(np.uint32).tolist()
        finally:
            k.use_simd(had)
        assert plain == want and fast == want


def test_the_compiled_q8_encoding_equals_the_reference_bit_for_bit():
    """encode_q8 (one C pass) against quant.encode: scales from 1e-30 to 1e30, zeros, halves."""
    k = kernel._compiled
    rng = np.random.default_rng(8)
    cases = [np.zeros(5, np.float32), np.array([0.5, -0.5, 1.5 / 127, -2.5 / 127, 1.0], np.float32)]
    for dim in (1, 2, 7, 64, 384, 1000):
        for t in range(40):
            v = (rng.normal(size=dim) * 10.0 ** rng.uniform(-30, 30)).astype(np.float32)
            if t % 5 == 0:
                v[: dim // 2] = 0
            if t % 7 == 0:
                v[:] = v[0]
            with np.errstate(over="ignore"):  # 1e30 squared: normalize takes its float64 path
                cases.append(quant.normalize(v)[0] if t % 3 else v)
    for unit in cases:
        want_row, want_rng = quant.encode(unit, quant.Q8)
        got_row, got_rng = k.encode_q8(np.ascontiguousarray(unit))
        assert got_row.dtype == np.int8 and got_row.tobytes() == want_row.tobytes()
        assert type(got_rng) is float and got_rng == want_rng


@pytest.mark.parametrize("qt", QUANTS)
def test_a_walk_cut_to_count_and_clamped_is_the_same_on_both_paths(graph_paths, qt):
    """Graph.search's limit (VSIM's COUNT) and clamped distances: the first ``limit`` of the full
    walk's results, each distance as quant.clamp reports it, identical on both paths."""
    data = clustered(900, 20, seed=31)
    vs = _build(True, data, qt, 8, seed=5)
    g = vs.graph
    for q in clustered(15, 20, seed=32):
        unit, _ = vs.unit(q)
        probe = g.probe(*g.encode(unit))
        per_path = []
        for compiled in (False, True):
            kernel.use(compiled)
            full = g.search(probe, 40)
            cut = g.search(probe, 40, None, 0, 7, True)
            assert cut == [(quant.clamp(d), s, uid) for d, s, uid in full[:7]]
            per_path.append((full, cut))
        assert per_path[0] == per_path[1]


@pytest.mark.parametrize("qt", QUANTS)
def test_packed_candidates_read_as_the_walk_s_lists(graph_paths, qt):
    """An insertion's candidates kept in C (``Found``) hold what layer_candidates lists, level by
    level, and the pure-Python linking takes them alike."""
    k = kernel._compiled
    data = clustered(700, 16, seed=41)
    vs = _build(True, data, qt, 8, seed=3)
    g = vs.graph
    for q in clustered(10, 16, seed=42):
        probe = g.probe(*g.encode(vs.unit(q)[0]))
        for level in (0, 1, 3):
            want = g.layer_candidates(probe, level, 30)
            got = k.packed_candidates(g, probe, level, 30)
            assert len(got) == len(want) and [got[lc] for lc in range(len(got))] == want
            with pytest.raises(IndexError):
                got[len(got)]
