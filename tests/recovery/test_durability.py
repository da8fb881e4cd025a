"""The durability contract end to end on a real server: log, fsync policies, group commit,
arenas, snapshots, torn tails, corruption, MISCONF, LOADING, the lock."""

from __future__ import annotations

import os
import threading
import time

import pytest
import redis

from pion.cli.main import main as pion_main
from pion.server.run import StartupError
from pion.storage import wal
from tests.recovery.helpers import DirServer, full_dump, populate, wait_for
from tests.support.servers import ThreadServer, make_settings


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data")
    yield srv
    srv.stop()


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
def test_acknowledged_writes_survive_a_restart_under_every_fsync_policy(node, policy):
    node.start(appendfsync=policy)
    r = node.client()
    populate(r)
    before = full_dump(r)
    node.restart()
    assert full_dump(node.client()) == before


def test_a_torn_tail_is_cut_at_every_byte_and_the_rest_loads(tmp_path):
    srv = DirServer(tmp_path / "d").start()
    r = srv.client()
    r.set("first", "1")
    r.set("second", "2")
    r.set("last", "x" * 30)
    srv.stop()
    path = wal.list_segments(str(tmp_path / "d" / "wal"))[-1][1]
    data = open(path, "rb").read()
    offsets = [offset for offset, _ in wal.SegmentScan(path)]
    last = offsets[-1]
    for cut in range(last, len(data)):
        open(path, "wb").write(data[:cut])
        srv.start()
        r = srv.client()
        assert r.get("first") == b"1" and r.get("second") == b"2" and r.get("last") is None, cut
        report = srv.server.parts.persistence.recovery
        assert len(report.truncated) == (cut > last)
        srv.stop()
        assert os.path.getsize(wal.list_segments(str(tmp_path / "d" / "wal"))[0][1]) == last


def test_a_flipped_byte_in_the_middle_stops_the_start_and_check_wal_repairs(tmp_path, capsys):
    srv = DirServer(tmp_path / "d").start()
    r = srv.client()
    for i in range(10):
        r.set(f"k{i}", f"v{i}")
    srv.stop()
    path = wal.list_segments(str(tmp_path / "d" / "wal"))[-1][1]
    offsets = [offset for offset, _ in wal.SegmentScan(path)]
    data = bytearray(open(path, "rb").read())
    data[offsets[4] + 20] ^= 0x01
    open(path, "wb").write(data)
    with pytest.raises(StartupError) as excinfo:
        srv.start()
    message = str(excinfo.value)
    assert path in message and f"offset {offsets[4]}" in message and "pion check-wal --fix" in message
    assert pion_main(["check-wal", "--fix", str(tmp_path / "d")]) == 0
    srv.start()
    r = srv.client()
    assert [r.get(f"k{i}") for i in range(10)] == [b"v%d" % i for i in range(4)] + [None] * 6
    srv.stop()


def test_writes_answer_only_after_their_record_is_fsynced(node):
    node.start()
    journal = node.server.journal
    gate = threading.Event()
    original = wal.SegmentWriter.sync

    def slow_sync(self):
        gate.wait(10)
        original(self)

    r = node.client()
    r.set("warm", "1")
    wal.SegmentWriter.sync = slow_sync
    try:
        result: list = []
        thread = threading.Thread(target=lambda: result.append(node.client().set("k", "v")))
        thread.start()
        time.sleep(0.3)
        assert result == [] and journal.durable_seq < journal.seq
        gate.set()
        thread.join(10)
        assert result == [True]
    finally:
        wal.SegmentWriter.sync = original


def test_group_commit_uses_fewer_fsyncs_than_writes(node):
    node.start()
    journal = node.server.journal
    before = journal.fsyncs
    errors: list = []

    def client_loop() -> None:
        try:
            c = node.client()
            pipe = c.pipeline(transaction=False)
            for _ in range(50):
                pipe.incr("shared")
            pipe.execute()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client_loop) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert node.client().get("shared") == b"1000"
    assert journal.fsyncs - before < 1000 / 5


def test_a_failed_write_answers_misconf_and_refuses_writes_until_the_disk_recovers(node):
    node.start()
    r = node.client()
    r.set("before", "1")
    journal = node.server.journal
    journal.inject_failures.extend([OSError(28, "No space left on device")] * 2)
    with pytest.raises(redis.exceptions.ResponseError, match="MISCONF"):
        r.set("during", "1")
    assert r.info("persistence")["aof_last_write_status"] == "err"
    with pytest.raises(redis.exceptions.ResponseError, match="MISCONF"):
        r.set("refused", "1")
    assert r.get("before") == b"1"  # reads still work
    wait_for(lambda: journal.write_error() is None, 10)
    assert r.set("after", "1")
    assert r.info("persistence")["aof_last_write_status"] == "ok"
    live = full_dump(r, databases=1)
    node.restart()
    assert full_dump(node.client(), databases=1) == live  # the retried record made it to disk


def test_large_values_go_to_an_arena_and_the_log_stays_small(node):
    node.start(blob_threshold=64 * 1024)
    r = node.client()
    big = os.urandom(300_000)
    r.set("big", big)
    r.set("small", "s")
    log_bytes = sum(os.path.getsize(p) for _, p in wal.list_segments(str(node.datadir / "wal")))
    assert log_bytes < 2000
    assert os.listdir(node.datadir / "arenas")
    node.restart()
    assert node.client().get("big") == big


def test_restart_maps_zero_copy_blobs_instead_of_reading_them(node):
    node.start(blob_threshold=64 * 1024)
    server = node.server
    persistence = server.parts.persistence
    ref = node.call(server.parts.arenas.put, b"z" * 100_000)
    from pion.server.durability.persistence_hooks import Replayer

    replayer = Replayer(persistence)
    view = replayer._blob(ref, zero_copy=True)
    copy = replayer._blob(ref, zero_copy=False)
    assert isinstance(view, memoryview) and server.parts.arenas.ref_of(view) == ref
    assert isinstance(copy, bytes) and copy == b"z" * 100_000


def test_nothing_expires_while_the_log_is_replayed(node):
    node.start()
    r = node.client()
    r.set("k", "v")
    r.pexpire("k", 400)
    r.persist("k")
    r.set("gone", "v")
    r.pexpire("gone", 300)
    time.sleep(0.5)
    node.restart()
    r = node.client()
    assert r.get("k") == b"v" and r.ttl("k") == -1
    assert r.get("gone") is None


def test_segments_rotate_by_size_and_all_are_replayed(node):
    node.start(wal_segment_size=4096)
    r = node.client()
    for i in range(400):
        r.set(f"key{i}", "v" * 30)
    assert len(wal.list_segments(str(node.datadir / "wal"))) > 3
    live = full_dump(r, databases=1)
    node.restart()
    assert full_dump(node.client(), databases=1) == live


def test_loading_refuses_commands_while_the_log_is_replayed(node, monkeypatch):
    node.start()
    node.client().set("k", "v")
    node.stop()
    from pion.server.durability import persistence_hooks
    from pion.server.net.client import Client

    seen: list = []
    original = persistence_hooks.Replayer.apply

    def spy(self, db, args):
        server = self.server
        probe = Client(999, server)
        probe.ctx = server.replay_client.ctx.__class__(probe, server)
        seen.append((server.loading, server.dispatcher.execute(probe, [b"GET", b"k"])))
        return original(self, db, args)

    monkeypatch.setattr(persistence_hooks.Replayer, "apply", spy)
    node.start()
    assert seen and seen[0][0] is True and "LOADING" in seen[0][1].message
    assert node.client().info("persistence")["loading"] == 0


def test_a_second_server_on_the_same_directory_refuses_to_start(node):
    node.start()
    with pytest.raises(StartupError, match="in use by another Pion server"):
        ThreadServer(make_settings(node.datadir)).start()


def test_the_status_file_is_rewritten_every_second(node):
    node.start()
    node.client().set("k", "v")
    path = node.datadir / "pion.status"
    wait_for(lambda: "keys=1" in path.read_text(), 5)
    fields = dict(line.split("=", 1) for line in path.read_text().splitlines())
    assert fields["state"] == "running" and fields["appendfsync"] == "always"
    first = int(fields["heartbeat_unix_s"])
    wait_for(lambda: int(dict(line.split("=", 1) for line in path.read_text().splitlines())["heartbeat_unix_s"]) > first, 5)
    node.stop()
    assert "state=stopped" in path.read_text()


def test_config_set_dir_is_refused_while_running(node):
    node.start()
    r = node.client()
    with pytest.raises(redis.exceptions.ResponseError, match="protected config|locked by this running server"):
        r.config_set("dir", "/tmp")
    assert r.config_get("dir")["dir"] == str(node.datadir)


def test_set_px_then_persist_survives_restart_after_the_ttl(tmp_path):
    """SET ... PX is logged as an absolute PXAT; replay after that time has passed must not drop
    the key, because the PERSIST that follows in the log keeps it (nothing expires while loading)."""
    import time as _time

    import redis as _redis

    from tests.support.servers import ProcessServer

    srv = ProcessServer(tmp_path / "data").start()
    try:
        client = _redis.Redis(port=srv.port)
        client.set("k", "v", px=300)
        assert client.persist("k") is True
        _time.sleep(0.5)
        srv.kill9()
        srv.start()
        assert _redis.Redis(port=srv.port).get("k") == b"v"
    finally:
        srv.stop()
