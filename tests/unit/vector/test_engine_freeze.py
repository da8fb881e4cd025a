"""``SearchEngine.freeze``/``thaw``: while a query runs in slices (``pion.server.slices``) the
index it reads takes no indexing: changed keys stay queued and its background scan waits, then
both are applied after ``thaw``; other indexes are indexed meanwhile."""

from __future__ import annotations

from pion.storage.hash_value import HashValue
from pion.vector.engine import SearchEngine


class _Db:
    def __init__(self) -> None:
        self.id = 0
        self.data: dict[bytes, object] = {}


def _hash(fields: dict[bytes, bytes]) -> HashValue:
    return HashValue(dict(fields))


def _engine(db: _Db) -> tuple[SearchEngine, list]:
    eng = SearchEngine()
    queued: list = []
    eng.scheduler = queued.append  # run later, by hand
    eng.values = lambda d, key: d.data.get(key)
    eng.databases = lambda: [db]
    return eng, queued


def _run(queued: list) -> None:
    while queued:
        queued.pop(0)()


def test_frozen_index_takes_no_indexing_until_thawed():
    db = _Db()
    eng, queued = _engine(db)
    a = eng.create(db, [b"FT.CREATE", b"a", b"ON", b"HASH", b"PREFIX", b"1", b"a:", b"SCHEMA", b"n", b"NUMERIC"])
    b = eng.create(db, [b"FT.CREATE", b"b", b"ON", b"HASH", b"PREFIX", b"1", b"b:", b"SCHEMA", b"n", b"NUMERIC"])
    _run(queued)
    eng.freeze(a)
    for key in (b"a:1", b"b:1"):
        db.data[key] = _hash({b"n": b"1"})
        eng.key_changed(db, key)
    _run(queued)
    assert len(a) == 0 and len(b) == 1  # the frozen one waits, the other goes on
    eng.freeze(a)  # two queries read it
    eng.thaw(a)
    _run(queued)
    assert len(a) == 0
    eng.thaw(a)
    _run(queued)
    assert len(a) == 1 and not eng.frozen


def test_frozen_index_scan_waits():
    db = _Db()
    for i in range(10):
        db.data[f"a:{i}".encode()] = _hash({b"n": str(i).encode()})
    eng, queued = _engine(db)
    eng.scheduler = None  # create's scan would run at once: build it unfrozen first
    a = eng.create(db, [b"FT.CREATE", b"a", b"ON", b"HASH", b"PREFIX", b"1", b"a:", b"SCHEMA", b"n", b"NUMERIC"])
    assert len(a) == 10
    eng.scheduler = queued.append
    eng.freeze(a)
    eng.reindex(db, a)  # a rebuild starts while a query reads it
    _run(queued)
    assert eng.scanning(a)
    eng.thaw(a)
    _run(queued)
    assert not eng.scanning(a) and len(a) == 10
