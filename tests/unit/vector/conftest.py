"""Small clustered data sets and a graph-consistency check for the vector-set engine tests."""

from __future__ import annotations

import numpy as np
import pytest

from pion.vector.vset import build, kernel, vectorset
from pion.vector.vset.graph import Graph


def clustered(n: int, dim: int, seed: int = 0, clusters: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, dim))
    return (centers[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, dim))).astype(np.float32)


@pytest.fixture(params=["pure", "compiled"])
def vset_path(request):
    """Run a test on the pure-Python graph code and on the compiled kernel (skipped where it is
    not built: ``setup.py build_ext --inplace`` or an install with Cython and a C compiler)."""
    if request.param == "compiled" and not kernel.available():
        pytest.skip("the compiled vector-set kernel is not built")
    before = kernel.impl
    kernel.use(request.param == "compiled")
    yield request.param
    kernel.impl = before


@pytest.fixture
def graph_paths(monkeypatch):
    """Make even small sets use the graph (walk-based insertion and search), not exact scans."""
    monkeypatch.setattr(build, "EXACT_BUILD_MAX", 64)
    monkeypatch.setattr(build, "EXACT_BUILD_WORK", 0)
    monkeypatch.setattr(vectorset, "EXACT_SEARCH_MAX", 0)


def check_graph(g: Graph) -> None:
    """Every link is bidirectional, within bounds, between live nodes living on that level."""
    live = set(g.live_slots().tolist())
    assert len(live) == g.count
    if not live:
        assert g.entry == -1
        return
    assert g.entry in live and g.levels[g.entry] == g.max_level == g.levels[list(live)].max()
    for slot in live:
        for level in range(int(g.levels[slot]) + 1):
            links = g.links(slot, level)
            assert len(links) == len(set(links)) <= (g.m0 if level == 0 else g.m)
            for other in links:
                assert other != slot and other in live and g.levels[other] >= level
                assert slot in g.links(other, level), (slot, other, level)
    assert (g.n0[np.array(sorted(live))] > 0).all() or g.count == 1
