"""FT.SEARCH KNN's fast path (``pion.vector.knn_fast``): the plan cache and its invalidation, the
hybrid policies against the exact answer, and KNN in the worker pool under concurrent writes (the
read lock it holds there, a key that expires meanwhile).

The general path is reached with ``INORDER`` (the fast path does not take it, and it changes
nothing for a TAG/NUMERIC filter), so each answer is compared with the general evaluator's."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pion.server.commands.search import query as search_query
from pion.vector import vectors

DIM = 16


def _create(r, algo="HNSW", dim=DIM, extra=()):
    args = ["TYPE", "FLOAT32", "DIM", str(dim), "DISTANCE_METRIC", "L2", *extra]
    r.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "d:", "SCHEMA", "t", "TAG", "n", "NUMERIC",
                      "v", "VECTOR", algo, str(len(args)), *args)


def _load(r, data: np.ndarray) -> None:
    pipe = r.pipeline(transaction=False)
    for i, row in enumerate(data):
        pipe.hset(f"d:{i}", mapping={"t": f"t{i % 10},c{i % 100}", "n": i % 100, "v": row.tobytes()})
    pipe.execute()


def _built(r) -> None:
    deadline = time.time() + 30
    while int(r.info("search").get("search_hnsw_backlog", 0) or 0) or int(r.ft("idx").info()["indexing"]):
        assert time.time() < deadline, "the graph did not finish"
        time.sleep(0.05)


def _knn(r, q: np.ndarray, flt: str = "*", k: int = 10, attrs: str = "", extra=()) -> list:
    return r.execute_command("FT.SEARCH", "idx", f"{flt}=>[KNN {k} @v $B{attrs}]", "NOCONTENT", "LIMIT", "0",
                             str(k), "PARAMS", "2", "B", q.tobytes(), "DIALECT", "2", *extra)


def _ids(reply) -> list[int]:
    return [int(key.split(b":")[1]) for key in reply[1:]]


def _exact(data: np.ndarray, q: np.ndarray, keep: np.ndarray, k: int) -> list[int]:
    ids = np.nonzero(keep)[0]
    dists = ((data[ids] - q) ** 2).sum(axis=1)
    order = np.lexsort((ids, dists))[:k]
    return ids[order].tolist()


def _engine_index(server):
    engine = server.server.parts.search
    return next(i for (_, name), i in engine.indexes.items() if name == "idx")


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((2000, DIM)).astype(np.float32), rng.standard_normal((12, DIM)).astype(np.float32)


FILTERS = [
    ("*", lambda i: np.ones_like(i, dtype=bool)),
    ("@t:{t3}", lambda i: i % 10 == 3),
    ("@t:{c37}", lambda i: i % 100 == 37),
    ("@t:{c37 | c38}", lambda i: (i % 100 == 37) | (i % 100 == 38)),
    ("@n:[30 39]", lambda i: (i % 100 >= 30) & (i % 100 <= 39)),
    ("@n:[(30 39]", lambda i: (i % 100 > 30) & (i % 100 <= 39)),
    ("(@t:{t3} @n:[0 50])", lambda i: (i % 10 == 3) & (i % 100 <= 50)),
]


@pytest.mark.parametrize("algo", ["HNSW", "FLAT"])
def test_fast_path_answers_what_the_general_path_and_the_exact_scan_answer(server, r, r3, data, algo):
    rows, queries = data
    _create(r, algo, extra=("EF_RUNTIME", "400") if algo == "HNSW" else ())
    _load(r, rows)
    _built(r)
    ids = np.arange(len(rows))
    for flt, keep in FILTERS:
        for q in queries[:4]:
            fast = _knn(r, q, flt)
            general = _knn(r, q, flt, extra=("INORDER",))
            assert fast == general, flt
            assert _ids(fast) == _exact(rows, q, keep(ids), 10), flt
            # RESP3 and RETURN of the distance take the same path
            fast3 = _knn(r3, q, flt)
            general3 = _knn(r3, q, flt, extra=("INORDER",))
            assert fast3 == general3
            assert [x[b"id"] for x in fast3[b"results"]] == fast[1:] and fast3[b"total_results"] == fast[0]
            got = r.execute_command("FT.SEARCH", "idx", f"{flt}=>[KNN 5 @v $B AS dist]", "RETURN", "1", "dist",
                                    "PARAMS", "2", "B", q.tobytes(), "DIALECT", "2")
            again = r.execute_command("FT.SEARCH", "idx", f"{flt}=>[KNN 5 @v $B AS dist]", "RETURN", "1", "dist",
                                      "PARAMS", "2", "B", q.tobytes(), "DIALECT", "2", "INORDER")
            assert got == again
            dists = [float(fields[1]) for fields in got[2::2]]
            assert dists == sorted(dists) and len(dists) == 5
    assert _engine_index(server).knn_plans  # the plans were cached


@pytest.mark.parametrize("attrs", ["", " HYBRID_POLICY ADHOC_BF", " HYBRID_POLICY BATCHES",
                                   " HYBRID_POLICY BATCHES BATCH_SIZE 7"])
def test_hybrid_policies_return_the_exact_ids(server, r, data, attrs):
    rows, queries = data
    _create(r, "HNSW", extra=("EF_RUNTIME", "400"))
    _load(r, rows)
    _built(r)
    ids = np.arange(len(rows))
    for flt, keep in FILTERS[1:]:
        for q in queries:
            assert _ids(_knn(r, q, flt, attrs=attrs)) == _exact(rows, q, keep(ids), 10), (flt, attrs)


def test_hybrid_attributes_keep_their_errors(r, data):
    rows, queries = data
    _create(r, "HNSW")
    _load(r, rows[:50])
    with pytest.raises(Exception, match="hybrid query attributes were sent for a non-hybrid query"):
        _knn(r, queries[0], "*", attrs=" HYBRID_POLICY BATCHES")
    with pytest.raises(Exception, match="'batch size' is irrelevant for the selected policy"):
        _knn(r, queries[0], "@t:{t1}", attrs=" HYBRID_POLICY ADHOC_BF BATCH_SIZE 4")


def test_policy_choice_follows_the_cost():
    from pion.vector.schema import VectorParams

    params = VectorParams(algorithm="HNSW", data_type="FLOAT32", dim=8, metric="L2", m=16, ef_runtime=10)
    field = vectors.VectorField(params)
    try:
        for doc in range(1, 20_001):
            field.doc_slots[doc] = doc  # only the count matters to the choice
        field.count = 20_000
        assert field.choose_policy(10, None, None, None) == "BATCHES"
        assert field.choose_policy(10, 200, None, None) == "ADHOC_BF"  # 1%: an exact scan of 200 rows
        assert field.choose_policy(10, 10_000, None, None) == "BATCHES"  # 50%: the graph
        assert field.choose_policy(10, 200, None, "BATCHES") == "BATCHES"  # the query's own policy wins
        assert field.choose_policy(10, 10_000, None, "ADHOC_BF") == "ADHOC_BF"
    finally:
        field.close()
    flat = vectors.VectorField(VectorParams(algorithm="FLAT", data_type="FLOAT32", dim=8, metric="L2"))
    assert flat.choose_policy(10, 10_000, None, "BATCHES") == "ADHOC_BF"  # no graph to page


def test_plan_cache_reuses_plans_and_is_invalidated(server, r, data):
    rows, queries = data
    _create(r, "FLAT")
    _load(r, rows[:300])
    index = _engine_index(server)
    first = _knn(r, queries[0], "@t:{t3}")
    assert len(index.knn_plans) == 1
    second = _knn(r, queries[1], "@t:{t3}")  # another vector: the same plan
    assert len(index.knn_plans) == 1 and first != second
    ids = np.arange(300)
    assert _ids(second) == _exact(rows[:300], queries[1], ids % 10 == 3, 10)
    # a non-vector parameter is part of the key: K 3 and K 5 are two plans
    for k in (3, 5):
        reply = r.execute_command("FT.SEARCH", "idx", "*=>[KNN $K @v $B]", "NOCONTENT", "PARAMS", "4", "K", str(k),
                                  "B", queries[0].tobytes(), "DIALECT", "2")
        assert reply[0] == k
    assert len(index.knn_plans) == 3
    # FT.ALTER: the plans go; a filter on the new field is planned against the new schema
    r.execute_command("FT.ALTER", "idx", "SCHEMA", "ADD", "u", "TAG")
    assert index.knn_plans == {}
    r.hset("d:7", "u", "only")
    reply = _knn(r, queries[0], "@u:{only}")
    assert reply == [1, b"d:7"]
    # DROPINDEX + CREATE of the same name with another DIM: the old plan must not answer
    r.execute_command("FT.DROPINDEX", "idx")
    assert index.knn_plans == {}
    _create(r, "FLAT", dim=8)
    with pytest.raises(Exception, match="does not match index's expected size"):
        _knn(r, queries[0], "@t:{t3}")
    r.hset("d:9000", mapping={"t": "t3", "n": 1, "v": np.ones(8, dtype=np.float32).tobytes()})
    assert _knn(r, np.ones(8, dtype=np.float32), "@t:{t3}") == [1, b"d:9000"]


def test_plan_cache_sees_writes_between_queries(r, data):
    rows, queries = data
    _create(r, "FLAT")
    _load(r, rows[:100])
    q = queries[0]
    best = _ids(_knn(r, q, "@t:{t3}", k=1))[0]
    r.delete(f"d:{best}")
    after = _ids(_knn(r, q, "@t:{t3}", k=1))[0]
    assert after != best
    r.hset("d:5000", mapping={"t": "t3", "n": 0, "v": q.tobytes()})  # the query itself: nearest
    assert _knn(r, q, "@t:{t3}", k=1) == [1, b"d:5000"]
    r.hset("d:5000", "t", "t4")  # retagged: no longer in the filter
    assert _knn(r, q, "@t:{t3}", k=1) != [1, b"d:5000"]
    r.pexpire(f"d:{after}", 1)
    time.sleep(0.01)
    assert f"d:{after}".encode() not in _knn(r, q, "@t:{t3}", k=3)  # expired: never answered


def test_deferred_knn_keeps_pipeline_order(monkeypatch, r, data):
    monkeypatch.setattr(search_query, "DEFER_MIN_SECONDS", 0.0)  # every KNN goes to the worker pool
    rows, queries = data
    _create(r, "HNSW")
    _load(r, rows[:500])
    _built(r)
    q = queries[0]
    pipe = r.pipeline(transaction=False)
    pipe.hset("d:x", mapping={"t": "t1", "n": 1, "v": q.tobytes()})
    pipe.execute_command("FT.SEARCH", "idx", "*=>[KNN 1 @v $B]", "NOCONTENT", "PARAMS", "2", "B", q.tobytes(),
                         "DIALECT", "2")
    pipe.delete("d:x")
    pipe.execute_command("FT.SEARCH", "idx", "*=>[KNN 1 @v $B]", "NOCONTENT", "PARAMS", "2", "B", q.tobytes(),
                         "DIALECT", "2")
    pipe.ping()
    out = pipe.execute()
    assert out[1] == [1, b"d:x"] and out[2] == 1 and out[3][1] != b"d:x" and out[4] is True


def test_deferred_knn_under_concurrent_writes_never_answers_a_deleted_key(monkeypatch, server, data):
    import redis

    monkeypatch.setattr(search_query, "DEFER_MIN_SECONDS", 0.0)
    rows, queries = data
    setup = redis.Redis(port=server.port, protocol=2)
    _create(setup, "HNSW")
    _load(setup, rows)
    _built(setup)
    deleted_at: dict[bytes, float] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        w = redis.Redis(port=server.port, protocol=2)
        rng = np.random.default_rng(1)
        try:
            for i in rng.permutation(len(rows))[:600].tolist():
                if stop.is_set():
                    break
                key = f"d:{i}".encode()
                w.delete(key)
                deleted_at[key] = time.perf_counter()  # acknowledged: gone for every later query
                w.hset(f"n:{i}", "x", 1)  # unrelated writes in between
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    reader = redis.Redis(port=server.port, protocol=2)
    seen = 0
    try:
        while thread.is_alive() or seen < 50:
            q = queries[seen % len(queries)]
            sent = time.perf_counter()
            gone = {key for key, at in list(deleted_at.items()) if at < sent}
            reply = reader.execute_command("FT.SEARCH", "idx", "@t:{t3}=>[KNN 10 @v $B AS d]", "RETURN", "1", "d",
                                           "PARAMS", "2", "B", q.tobytes(), "DIALECT", "2")
            keys = reply[1::2]
            assert not gone & set(keys), "a key deleted before the query was answered"
            dists = [float(f[1]) for f in reply[2::2]]
            assert dists == sorted(dists) and len(set(keys)) == len(keys) == 10
            seen += 1
    finally:
        stop.set()
        thread.join(30)
        reader.close()
        setup.close()
    assert not errors


def _gate_jobs(monkeypatch):
    """Hold every fast-path KNN job in the worker pool until ``go`` is set (``entered``: one is there)."""
    from pion.vector import knn_fast

    entered, go = threading.Event(), threading.Event()
    real = knn_fast.job

    def job(*args, **kwargs):
        inner = real(*args, **kwargs)

        def gated():
            entered.set()
            go.wait(10)
            return inner()
        gated.expected_s = 1.0  # type: ignore[attr-defined]
        return gated

    monkeypatch.setattr(knn_fast, "job", job)
    return entered, go


def _async(fn, *args):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("reply", fn(*args)))
    thread.start()
    return thread, out


def test_fast_knn_in_the_pool_holds_the_read_lock(monkeypatch, server, data):
    """While a fast-path KNN is in the worker pool, a write to a key its index covers is parked
    (the query answers the state it started on, k results); an unrelated write goes on."""
    import redis

    rows, queries = data
    setup = redis.Redis(port=server.port, protocol=2)
    _create(setup, "FLAT")  # exact: the answer is known
    _load(setup, rows)
    q = queries[0]
    nearest = _exact(rows, q, np.ones(len(rows), dtype=bool), 11)
    expected = nearest[:10]
    entered, go = _gate_jobs(monkeypatch)
    reader, writer, other = (redis.Redis(port=server.port, protocol=2) for _ in range(3))
    try:
        query, answered = _async(_knn, reader, q)
        assert entered.wait(10)
        delete, deleted = _async(writer.delete, f"d:{expected[0]}")
        assert other.set("elsewhere", 1) is True  # not covered by the index: not held
        time.sleep(0.2)
        assert delete.is_alive() and "reply" not in deleted  # parked behind the query
        go.set()
        query.join(10)
        delete.join(10)
        assert _ids(answered["reply"]) == expected  # the state the query started on
        assert deleted["reply"] == 1
        assert _ids(_knn(setup, q)) == nearest[1:]  # then the write ran
    finally:
        go.set()
        for c in (setup, reader, writer, other):
            c.close()


def test_fast_knn_answers_k_live_keys_when_one_expires_meanwhile(monkeypatch, server, data):
    """A result key that expires while its KNN is in the pool (the index is frozen, so it still
    lists the document) is left out and the search made again: k live keys come back."""
    import redis

    rows, queries = data
    setup = redis.Redis(port=server.port, protocol=2)
    _create(setup, "FLAT")  # exact: the answer is known
    _load(setup, rows)
    q = queries[1]
    expected = _exact(rows, q, np.ones(len(rows), dtype=bool), 11)
    setup.pexpire(f"d:{expected[0]}", 300)
    entered, go = _gate_jobs(monkeypatch)
    reader = redis.Redis(port=server.port, protocol=2)
    try:
        query, answered = _async(_knn, reader, q)
        assert entered.wait(10)
        time.sleep(0.5)  # the key expires while the search is in the pool
        go.set()
        query.join(10)
        assert _ids(answered["reply"]) == expected[1:]
        assert answered["reply"][0] == 10
    finally:
        go.set()
        reader.close()
        setup.close()


def test_general_knn_answers_k_live_keys_when_one_expires_meanwhile(monkeypatch, server, data):
    """The general path (INORDER: not the fast path's shape) the same way: a result key that
    expires while its filtered KNN is in the pool is left out and the search made again over the
    same prefilter, so K rows come back under a total of K (before: K-1 rows, total K)."""
    import redis

    from pion.vector import search

    monkeypatch.setattr(search_query, "DEFER_MIN_VECTORS", 0)  # the FLAT KNN goes to the pool
    entered, go = threading.Event(), threading.Event()
    real = search._knn_job

    def gated_job(*args, **kwargs):
        inner = real(*args, **kwargs)

        def gated():
            entered.set()
            go.wait(10)
            return inner()
        return gated

    monkeypatch.setattr(search, "_knn_job", gated_job)
    rows, queries = data
    setup = redis.Redis(port=server.port, protocol=2)
    _create(setup, "FLAT")  # exact: the answer is known
    _load(setup, rows)
    q = queries[2]
    expected = _exact(rows, q, np.arange(len(rows)) % 10 == 3, 11)
    setup.pexpire(f"d:{expected[0]}", 300)
    reader = redis.Redis(port=server.port, protocol=2)
    try:
        query, answered = _async(_knn, reader, q, "@t:{t3}", 10, "", ("INORDER",))
        assert entered.wait(10)
        time.sleep(0.5)  # the key expires while the search is in the pool
        go.set()
        query.join(10)
        assert _ids(answered["reply"]) == expected[1:]
        assert answered["reply"][0] == 10
    finally:
        go.set()
        reader.close()
        setup.close()
