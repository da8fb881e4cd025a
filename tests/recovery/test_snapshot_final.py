"""The background save's consistent point when keys are slow to encode (issue #28): it is taken
in slices, the loop runs between them, and the file is still exactly the keyspace at the cut.

Keys named ``doc:*``/``pad:*`` are made slow to encode (1 ms each, on the loop) by wrapping
``SaveJob._encode_key``; what is asserted is behaviour (which loop iteration encoded what, what
the file holds), not how long anything took."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pion.server.durability import bgsave
from pion.server.durability.bgsave import SaveJob
from pion.server.durability.persistence import Persistence
from pion.storage.serialize import dump_value, load_value
from pion.storage.snapshot import FILENAME, KeyRecord, SnapshotReader, Tombstone
from tests.recovery.helpers import DirServer, full_dump, wait_for

SLOW_SECONDS = 0.001
SLOW = (b"doc:", b"pad:")


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data")
    yield srv
    srv.stop()


class Recorder:
    """What the loop did, in order: ``tick`` (the loop ran other callbacks: one per iteration,
    consecutive ones collapsed), ``doc`` (a doc:* key encoded), ``dump done``, ``cut``; and the
    keyspace of database 0 as the cut saw it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[str] = []
        self.at_cut: list[dict] = []
        self.rounds: list[int] = []  # SaveJob.final_rounds at the cut
        self.ticking = False
        encode, dump_db, cut_log = SaveJob._encode_key, SaveJob._dump_db, Persistence.cut_log
        recorder = self

        def slow_encode(self, enc, db, key):
            if key.startswith(SLOW):
                import time

                time.sleep(SLOW_SECONDS)  # the loop thread is busy this long, as with a large value
                if key.startswith(b"doc:"):
                    recorder.events.append("doc")
            return encode(self, enc, db, key)

        async def dump_and_note(self, *args):
            await dump_db(self, *args)
            recorder.events.append("dump done")

        def cut_and_capture(self):
            db = self.server.dbs[0]
            recorder.at_cut.append({key: (dump_value(value), db.expires.get(key)) for key, value in db.data.items()})
            recorder.events.append("cut")
            recorder.rounds.append(self.job.final_rounds)
            return cut_log(self)

        monkeypatch.setattr(SaveJob, "_encode_key", slow_encode)
        monkeypatch.setattr(SaveJob, "_dump_db", dump_and_note)
        monkeypatch.setattr(Persistence, "cut_log", cut_and_capture)

    def start_ticking(self, node: DirServer) -> None:
        def start() -> None:
            loop = asyncio.get_running_loop()
            self.ticking = True

            def tick() -> None:
                if not self.events or self.events[-1] != "tick":
                    self.events.append("tick")
                if self.ticking:
                    loop.call_soon(tick)

            loop.call_soon(tick)

        node.call(start)

    def stop_ticking(self, node: DirServer) -> None:
        node.call(setattr, self, "ticking", False)

    def after(self, marker: str) -> list[str]:
        return self.events[self.events.index(marker) + 1:]


def snapshot_image(path) -> dict:
    """Database 0 as the snapshot file holds it (later records override earlier ones)."""
    image: dict = {}
    reader = SnapshotReader(str(path))
    for record in reader:
        if record.__class__ is KeyRecord and record.db == 0:
            image[bytes(record.key)] = (bytes(record.value), record.expire_ms)
        elif record.__class__ is Tombstone and record.db == 0:
            image.pop(bytes(record.key), None)
    reader.close()
    return image


def test_the_consistent_point_is_sliced_when_the_changed_keys_are_slow_to_encode(node, monkeypatch):
    recorder = Recorder(monkeypatch)
    node.start()
    r = node.client()
    pipe = r.pipeline(transaction=False)
    for i in range(100):
        pipe.set(f"doc:{i}", "d" * 2000)
    for i in range(150):  # encoded after the docs: the rewrite below lands during the dump
        pipe.set(f"pad:{i}", "p")
    pipe.execute()
    recorder.start_ticking(node)
    assert r.bgsave()
    for i in range(100):  # every doc changes during the save: all of them are written again
        pipe.set(f"doc:{i}", f"new {i}")
    pipe.execute()
    wait_for(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 60)
    recorder.stop_ticking(node)
    assert r.info("persistence")["rdb_last_bgsave_status"] == "ok"

    between = recorder.after("dump done")
    between = between[:between.index("cut")]
    assert between.count("doc") >= 50  # the changed docs were left for after the dump
    assert between.count("tick") >= 2  # ... and written in slices, the loop running between them
    last_iteration = between[len(between) - between[::-1].index("tick"):]
    # the cut's own iteration wrote only what fits its budget (at >= 1 ms a doc), not all of them
    assert last_iteration.count("doc") <= 2 * bgsave.FINAL_SECONDS / SLOW_SECONDS + 1

    # the file is exactly the keyspace at the cut, which had every rewrite (made before it)
    image = snapshot_image(node.datadir / FILENAME)
    assert image == recorder.at_cut[0]
    assert all(load_value(image[f"doc:{i}".encode()][0]) == f"new {i}".encode() for i in range(100))
    live = full_dump(r, databases=1)
    node.restart()
    assert full_dump(node.client(), databases=1) == live


def test_a_sliced_consistent_point_under_concurrent_writes_is_exactly_the_cut(node, monkeypatch):
    recorder = Recorder(monkeypatch)
    node.start()
    r = node.client()
    pipe = r.pipeline(transaction=False)
    for i in range(150):
        pipe.set(f"doc:{i}", "d" * 500)
    for i in range(2000):
        pipe.set(f"k{i}", "x" * 20)
    pipe.execute()
    stop = threading.Event()
    counts = [0]

    def writer() -> None:
        w = node.client()
        i = 0
        while not stop.is_set():
            p = w.pipeline(transaction=False)
            p.incr("ctr")
            p.set(f"seq:{i}", i)
            for j in range(30):
                p.set(f"doc:{(30 * i + j) % 150}", f"v{i}")
            p.delete(f"k{i}")
            p.hset("hh", f"f{i % 20}", i)
            p.execute()
            i += 1
            counts[0] = i

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: counts[0] > 5)
        recorder.start_ticking(node)
        assert r.bgsave()
        wait_for(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 60)
        recorder.stop_ticking(node)
        after_save = counts[0]
        wait_for(lambda: counts[0] > after_save + 5)  # writes after the cut too: in the log only
    finally:
        stop.set()
        thread.join()
    assert r.info("persistence")["rdb_last_bgsave_status"] == "ok"
    at_cut = recorder.at_cut[0]
    image = snapshot_image(node.datadir / FILENAME)
    # point in time: every write before the cut is in the file, none after it
    assert image == at_cut
    assert recorder.rounds[0] >= 2  # the changed docs were written in slices, the last at the cut
    # the writer's writes are sequential: the file holds a prefix of them, then the log the rest
    seqs = sorted(int(key[4:]) for key in image if key.startswith(b"seq:"))
    ctr = int(load_value(image[b"ctr"][0]))
    assert seqs == list(range(len(seqs))) and ctr in (len(seqs), len(seqs) + 1)
    assert ctr < int(r.get("ctr"))
    live = full_dump(r, databases=1)
    node.restart()
    assert full_dump(node.client(), databases=1) == live
