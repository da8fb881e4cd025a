"""The vector-set engine: encodings as Redis's, graph invariants under inserts and deletes,
recall against an exact scan, compaction, CAS commits and the stored form; each test runs on the
pure-Python graph code and on the compiled kernel (``vset_path``)."""

from __future__ import annotations

import numpy as np
import pytest

from pion.storage.serialize import PayloadError, dump_value, load_value
from pion.vector.vset import VectorSet, build, compile_filter, persist, quant
from tests.unit.vector.conftest import check_graph, clustered

pytestmark = pytest.mark.usefixtures("vset_path")  # every test on both paths: pure Python and compiled


def test_q8_maps_the_largest_component_to_127_and_rounds_halves_away_from_zero():
    unit = np.array([0.5, -0.25, 1.0 / 254.0 * 1.0, -1.0], dtype=np.float32)
    row, rng = quant.encode(unit, quant.Q8)
    assert rng == 1.0 and row.tolist() == [64, -32, 1, -127]  # 63.5 -> 64, 0.5 -> 1 (not 0)
    assert quant.decode(row, rng, 2.0, quant.Q8, 4).tolist() == pytest.approx([128 / 127, -64 / 127, 2 / 127, -2])


def test_bin_keeps_signs_in_little_endian_words_and_decodes_to_plus_minus_one():
    unit, _ = quant.normalize(np.array([1, 4.32, 0.0, 0.05, -2.9] + [1.0] * 64, dtype=np.float32))
    row, _ = quant.encode(unit, quant.BIN)
    assert row.dtype == np.dtype("<u8") and row.size == 2
    assert row.view(np.uint8)[0] == 0b1011 | (0b111 << 5)
    assert quant.decode(row, 1.0, 9.0, quant.BIN, 69)[:5].tolist() == [1, 1, -1, 1, -1]


def test_a_zero_vector_keeps_norm_one_and_sits_at_distance_one():
    unit, norm = quant.normalize(np.zeros(4, dtype=np.float32))
    assert norm == 1.0 and not unit.any()
    row, rng = quant.encode(unit, quant.Q8)
    other, orng = quant.encode(quant.normalize(np.ones(4, dtype=np.float32))[0], quant.Q8)
    assert quant.distances(other[None, :], np.array([orng], np.float32), quant.probe(row, rng, quant.Q8),
                           quant.Q8, 4).tolist() == [1.0]


@pytest.mark.parametrize("qt", [quant.F32, quant.Q8])
def test_distance_is_one_minus_cosine(qt):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 24)).astype(np.float32)
    ua, _ = quant.normalize(a)
    ub, _ = quant.normalize(b)
    ra, rga = quant.encode(ua, qt)
    rb, rgb = quant.encode(ub, qt)
    d = quant.distances(rb[None, :], np.array([rgb], np.float32), quant.probe(ra, rga, qt), qt, 24)[0]
    cos = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert d == pytest.approx(1 - cos, abs=1e-6 if qt == quant.F32 else 2e-2)


def test_projection_is_redis_hadamard_pattern():
    m = quant.projection_matrix(4, 3) * 2.0  # scale 1/sqrt(4)
    assert m.tolist() == [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1]]


@pytest.mark.parametrize("qt", [quant.Q8, quant.F32, quant.BIN])
def test_graph_recall_against_an_exact_scan(graph_paths, qt):
    data = clustered(700, 24, seed=qt)
    vs = VectorSet(24, qt)
    for i, x in enumerate(data):
        vs.add(b"e%d" % i, x, None)
    check_graph(vs.graph)
    queries = clustered(40, 24, seed=99)
    recall = []
    for q in queries:
        unit, _ = vs.unit(q)
        got = {s for _, s, _ in vs.search(unit, 10, 100, None, 0, truth=False)}
        truth = {s for _, s, _ in vs.search(unit, 10, 100, None, 0, truth=True)}
        recall.append(len(got & truth) / 10)
    assert np.mean(recall) >= (0.9 if qt != quant.BIN else 0.7), np.mean(recall)


def test_deletions_keep_links_bidirectional_and_search_working(graph_paths):
    data = clustered(500, 16, seed=3)
    vs = VectorSet(16)
    for i, x in enumerate(data):
        vs.add(b"e%d" % i, x, None)
    rng = np.random.default_rng(4)
    gone = set(rng.choice(500, 300, replace=False).tolist())
    for i in sorted(gone):
        assert vs.remove(b"e%d" % i)
        if i % 50 == 0:
            check_graph(vs.graph)
    check_graph(vs.graph)
    assert len(vs) == 200 and vs.graph.cap <= 512
    unit, _ = vs.unit(data[next(i for i in range(500) if i not in gone)])
    names = [vs.names[s] for _, s, _ in vs.search(unit, 5, 100, None, 0, truth=False)]
    assert all(int(name[1:]) not in gone for name in names) and len(names) == 5


def test_removing_most_elements_compacts_the_arrays_and_keeps_names(graph_paths):
    vs = VectorSet(8)
    data = clustered(400, 8, seed=5)
    for i, x in enumerate(data):
        vs.add(b"e%d" % i, x, b'{"i": %d}' % i if i % 2 else None)
    for i in range(350):
        vs.remove(b"e%d" % i)
    check_graph(vs.graph)
    assert vs.graph.cap < 256 and len(vs) == 50
    for i in range(350, 400):
        slot = vs.slot_of(b"e%d" % i)
        assert vs.names[slot] == b"e%d" % i
        assert vs.attrs[slot] == (b'{"i": %d}' % i if i % 2 else None)
        unit, _ = vs.unit(data[i])
        assert vs.search(unit, 1, 50, None, 0, truth=False)[0][1] == slot


def test_filtered_search_explores_at_most_the_effort_asked(graph_paths):
    vs = VectorSet(8)
    data = clustered(600, 8, seed=6)
    for i, x in enumerate(data):
        vs.add(b"e%d" % i, x, b'{"rare": %d}' % (i % 97 == 0))
    flt = compile_filter(b".rare")
    unit, _ = vs.unit(data[0])
    wide = vs.search(unit, 7, 0, flt, 0, truth=False)  # no bound: all 7 rare ones are found
    assert len(wide) == 7
    narrow = vs.search(unit, 7, 0, flt, 20, truth=False)
    assert len(narrow) < 7
    exact = vs.search(unit, 7, 0, flt, 0, truth=True)
    assert {s for _, s, _ in exact} == {s for _, s, _ in wide}


def test_a_cas_commit_skips_candidates_that_died_meanwhile(graph_paths):
    vs = VectorSet(8)
    data = clustered(200, 8, seed=7)
    for i, x in enumerate(data[:199]):
        vs.add(b"e%d" % i, x, None)
    g = vs.graph
    unit, _ = vs.unit(data[199])
    row, rng = quant.encode(unit, g.quant)
    level = 0
    found = build.candidates(g, g.probe(row, rng), level, 50)
    for _, slot in found[0][:5]:
        vs.remove(vs.names[slot])
    vs.add(b"new", data[199], None, found=found, level=level)
    check_graph(g)


def test_the_stored_form_round_trips_the_whole_graph():
    vs = VectorSet(6, quant.Q8, 8, proj_in=10)
    for i, x in enumerate(clustered(120, 10, seed=8)):
        vs.add(b"e%d" % i, x, b'{"i": %d}' % i if i % 3 else None)
    vs.remove(b"e5")
    back = load_value(dump_value(vs))
    assert isinstance(back, VectorSet)
    g, h = vs.graph, back.graph
    live = g.live_slots()
    assert sorted(back.index) == sorted(vs.index) and back.numattribs == vs.numattribs
    assert (h.rows[: h.count] == g.rows[live]).all() and h.max_level == g.max_level
    for name, slot in vs.index.items():
        other = back.index[name]
        assert back.attrs[other] == vs.attrs[slot]
        for level in range(int(g.levels[slot]) + 1):
            assert sorted(back.names[s] for s in h.links(other, level)) == sorted(vs.names[s] for s in g.links(slot, level))
    assert back.proj_in == 10 and np.array_equal(back.proj, vs.proj)
    check_graph(h)


def test_an_inconsistent_payload_is_refused_not_loaded():
    vs = VectorSet(4)
    for i, x in enumerate(clustered(30, 4, seed=9)):
        vs.add(b"e%d" % i, x, None)
    tree = persist.unpack_tree(persist.dump(vs))
    links = np.frombuffer(tree[b"links0"], dtype="<i4").copy()
    links[0] = 10_000
    bad = {**tree, b"links0": links.tobytes()}
    with pytest.raises(PayloadError):
        persist.load(persist.pack_tree(bad))
    with pytest.raises(PayloadError):
        persist.load(persist.pack_tree({**tree, b"names": [b"a"] * 30}))
    with pytest.raises(PayloadError):
        persist.load(persist.pack_tree({**tree, b"dim": 0}))
    with pytest.raises(PayloadError):
        persist.load(persist.dump(vs)[:-7])
