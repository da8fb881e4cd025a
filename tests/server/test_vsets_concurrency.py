"""Vector-set searches in worker threads while the loop keeps writing: VSIM on a large set runs
off the loop (same answers as NOTHREAD), VADD CAS collects candidates off the loop, and
concurrent VADD/VREM/VSETATTR/DEL never break a search or the graph."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis
from tests.unit.vector.conftest import check_graph, clustered

from pion.server import deferred
from pion.server.commands.vsets import read as vsets_read
from pion.vector.vset import build, kernel, vectorset


@pytest.fixture
def graph_server(make_server, monkeypatch):
    """A server whose vector sets use the graph even when small, and that counts deferred work."""
    monkeypatch.setattr(build, "EXACT_BUILD_MAX", 64)
    monkeypatch.setattr(build, "EXACT_BUILD_WORK", 0)
    monkeypatch.setattr(vectorset, "EXACT_SEARCH_MAX", 50)
    started: list = []
    original = deferred.start
    monkeypatch.setattr(deferred, "start", lambda *a: (started.append(a[2].argv[:1]), original(*a))[1])
    srv = make_server()
    srv.deferred_started = started
    return srv


def load(r: redis.Redis, key: str, data: np.ndarray, attrs: bool = False) -> None:
    pipe = r.pipeline(transaction=False)
    for i, vec in enumerate(data):
        extra = ["SETATTR", f'{{"i": {i}}}'] if attrs else []
        pipe.execute_command("VADD", key, "FP32", vec.astype("<f4").tobytes(), f"e{i}", *extra)
    pipe.execute()


def the_set(srv, key: bytes):
    return srv.call(lambda: srv.server.dbs[0].data[key])


@pytest.mark.parametrize("compiled", [False, True])
def test_a_large_vsim_runs_in_a_worker_and_answers_as_nothread(graph_server, monkeypatch, compiled):
    """On the pure path every walk runs in a worker; with the compiled kernel a plain walk with
    EF up to INLINE_EF runs inline (quicker than the hand-off), a FILTER or a larger EF in one."""
    if compiled and not kernel.available():
        pytest.skip("the compiled vector-set kernel is not built")
    monkeypatch.setattr(kernel, "impl", kernel._compiled if compiled else None)
    r = redis.Redis(port=graph_server.port, protocol=3)
    data = clustered(300, 16, seed=11)
    load(r, "big", data, attrs=True)
    for q in clustered(10, 16, seed=12):
        args = ["VSIM", "big", "FP32", q.astype("<f4").tobytes(), "WITHSCORES", "COUNT", 7]
        threaded = r.execute_command(*args)
        assert threaded == r.execute_command(*args, "NOTHREAD")
        assert r.execute_command(*args, "EF", vsets_read.INLINE_EF + 1) == r.execute_command(
            *args, "EF", vsets_read.INLINE_EF + 1, "NOTHREAD")
        filtered = r.execute_command(*args, "FILTER", ".i % 2 == 0")
        assert filtered and all(int(name[1:]) % 2 == 0 for name in filtered)  # RESP3: a map
    assert graph_server.deferred_started.count([b"VSIM"]) == (20 if compiled else 30)
    with r.pipeline(transaction=True) as pipe:  # inside MULTI the search runs inline
        before = len(graph_server.deferred_started)
        pipe.execute_command("VSIM", "big", "ELE", "e1")
        assert pipe.execute()[0][0] == b"e1"
        assert len(graph_server.deferred_started) == before


def test_vadd_cas_collects_candidates_in_a_worker(graph_server):
    r = redis.Redis(port=graph_server.port)
    data = clustered(200, 8, seed=13)
    load(r, "c", data[:100])
    for i, vec in enumerate(data[100:]):
        assert r.execute_command("VADD", "c", "FP32", vec.astype("<f4").tobytes(), f"n{i}", "CAS") == 1
    assert graph_server.deferred_started.count([b"VADD"]) >= 100
    assert r.execute_command("VCARD", "c") == 200
    check_graph(the_set(graph_server, b"c").graph)
    # CAS on an element that exists is a plain update, as in Redis
    assert r.execute_command("VADD", "c", "VALUES", 8, *[1] * 8, "n0", "CAS") == 0


def test_searches_and_writes_at_once_never_fail(graph_server):
    data = clustered(400, 12, seed=14)
    r = redis.Redis(port=graph_server.port)
    load(r, "s", data[:250], attrs=True)
    errors: list = []
    stop = threading.Event()
    known = {f"e{i}".encode() for i in range(400)}

    def searcher(seed: int) -> None:
        client = redis.Redis(port=graph_server.port, socket_timeout=30)
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                q = rng.normal(size=12).astype("<f4").tobytes()
                got = client.execute_command("VSIM", "s", "FP32", q, "COUNT", 10, "FILTER", ".i >= 0")
                if not set(got) <= known:
                    errors.append(("unknown names", got))
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                errors.append(exc)
        except Exception as exc:  # noqa: BLE001 - the test reports whatever broke
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(seed,), daemon=True) for seed in range(2)]
    for t in threads:
        t.start()
    try:
        rng = np.random.default_rng(15)
        for step in range(300):
            i = int(rng.integers(0, 400))
            op = step % 4
            if op == 0:
                r.execute_command("VADD", "s", "FP32", data[i].astype("<f4").tobytes(), f"e{i}", "CAS",
                                  "SETATTR", f'{{"i": {i}}}')
            elif op == 1:
                r.execute_command("VREM", "s", f"e{i}")
            elif op == 2:
                r.execute_command("VSETATTR", "s", f"e{i}", f'{{"i": {step}}}')
            else:
                r.execute_command("VADD", "s", "FP32", data[i].astype("<f4").tobytes(), f"e{i}")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    check_graph(the_set(graph_server, b"s").graph)
    assert r.ping()


def test_a_plain_vadd_defers_only_on_the_pure_path(graph_server, monkeypatch):
    """Collecting candidates takes milliseconds in pure Python (a worker does it) and a fraction
    of one in the compiled kernel (inline, as Redis's VADD)."""
    r = redis.Redis(port=graph_server.port)
    load(r, "p", clustered(100, 8, seed=17))
    for compiled in ([False, True] if kernel.available() else [False]):
        monkeypatch.setattr(kernel, "impl", kernel._compiled if compiled else None)
        before = graph_server.deferred_started.count([b"VADD"])
        for i in range(10):
            r.execute_command("VADD", "p", "VALUES", 8, *np.random.default_rng(i).normal(size=8).tolist(), f"x{compiled}{i}")
        assert graph_server.deferred_started.count([b"VADD"]) - before == (0 if compiled else 10)
    check_graph(the_set(graph_server, b"p").graph)


@pytest.mark.parametrize("cas", [False, True])
def test_a_write_landing_while_candidates_are_collected(graph_server, monkeypatch, cas):
    """Another client adds the same element meanwhile: a plain VADD (deferred on the pure path)
    then runs again inline (an update, answering 0, its vector wins); VADD CAS answers 1 and
    leaves the other write."""
    if not cas:
        monkeypatch.setattr(kernel, "impl", None)
    r = redis.Redis(port=graph_server.port, protocol=2)
    load(r, "w", clustered(100, 4, seed=16))
    entered, release = threading.Event(), threading.Event()
    original = build.candidates

    def slow(*args):
        if threading.current_thread().name.startswith("pion-work"):
            entered.set()
            release.wait(10)
        return original(*args)

    monkeypatch.setattr(build, "candidates", slow)
    box: list = []
    mine = [1.0, 0.0, 0.0, 0.0]
    t = threading.Thread(target=lambda: box.append(
        r.execute_command("VADD", "w", "VALUES", 4, *mine, "x", *(["CAS"] if cas else []))))
    t.start()
    assert entered.wait(10)
    other = redis.Redis(port=graph_server.port, protocol=2)
    with other.pipeline(transaction=True) as pipe:  # inside MULTI it runs inline, at once
        pipe.execute_command("VADD", "w", "VALUES", 4, 0, 1, 0, 0, "x")
        assert pipe.execute() == [1]
    release.set()
    t.join(10)
    emb = [float(v) for v in other.execute_command("VEMB", "w", "x")]
    if cas:
        assert box == [1] and emb == pytest.approx([0, 1, 0, 0], abs=1e-2)
    else:
        assert box == [0] and emb == pytest.approx(mine, abs=1e-2)
    check_graph(the_set(graph_server, b"w").graph)
