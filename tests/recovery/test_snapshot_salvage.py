"""A damaged snapshot (issue #13, item 8): a flipped byte used to leave "move it away" (losing every
key in it) as the only way to start. Every record carries its own checksum; ``pion check-wal
--fix`` salvages every intact record into a new snapshot (the damaged file kept in a backup) and
the log after it replays on top; tenants' keys are in sections, so a damaged record costs one
section of one tenant, not every tenant's data."""

from __future__ import annotations

import os

import pytest
import redis

from pion.cli.main import main as pion_main
from pion.server.run import StartupError
from pion.storage.serialize import dump_value
from pion.storage.snapshot import FILENAME, KeyRecord, SnapshotEncoder, SnapshotFile, SnapshotReader, salvage
from tests.recovery.helpers import DirServer

ADMIN = "adm1n"


def offsets_of(path: str) -> list[tuple[int, str]]:
    """(offset, kind) of every record of a sound snapshot."""
    data = open(path, "rb").read()
    pos, out = 32, []
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "little")
        out.append((pos, chr(data[pos + 8])))
        pos += 8 + length
    return out


def flip(path: str, offset: int) -> None:
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x20
    open(path, "wb").write(data)


def test_the_salvage_reader_returns_every_intact_record_and_names_the_lost_key(tmp_path):
    enc, out = SnapshotEncoder(), SnapshotFile(str(tmp_path))
    for i in range(100):
        out.write(enc.key(0, b"key%03d" % i, None, dump_value(b"value %d" % i * 10)))
    out.write(enc.end())
    out.commit(enc.header(3, 1))
    path = str(tmp_path / FILENAME)
    victim = offsets_of(path)[40][0]
    flip(path, victim + 30)  # inside the value of key040
    with pytest.raises(Exception, match="checksum mismatch"):
        list(SnapshotReader(path))
    reader = SnapshotReader(path, salvage=True)
    keys = [r.key for r in reader if isinstance(r, KeyRecord)]
    assert keys == [b"key%03d" % i for i in range(100) if i != 40]
    assert reader.lost == ["db 0 key b'key040'"] and len(reader.problems) == 2  # the record, the end count
    report = salvage(str(tmp_path), str(tmp_path / "backup"))
    assert report.kept == 99 and os.path.exists(tmp_path / "backup" / FILENAME)
    assert sum(1 for _ in SnapshotReader(path)) == 99 and SnapshotReader(path).info.base_segment == 3


def test_a_damaged_length_field_resynchronises_on_the_next_record(tmp_path):
    enc, out = SnapshotEncoder(), SnapshotFile(str(tmp_path))
    for i in range(20):
        out.write(enc.key(1, b"k%d" % i, 5000 + i, dump_value(b"v" * 50)))
    out.write(enc.end())
    out.commit(enc.header(1, 1))
    path = str(tmp_path / FILENAME)
    flip(path, offsets_of(path)[5][0] + 2)  # the length of record 5
    keys = [r.key for r in SnapshotReader(path, salvage=True) if isinstance(r, KeyRecord)]
    assert keys == [b"k%d" % i for i in range(20) if i != 5]


def test_a_server_refuses_a_damaged_snapshot_and_check_wal_fix_salvages_it(tmp_path, capsys):
    node = DirServer(tmp_path / "d").start()
    r = node.client()
    for i in range(200):
        r.set(f"s{i:03d}", f"value-{i}")
    r.save()
    r.set("after-save", "in the log")
    node.stop()
    path = str(tmp_path / "d" / FILENAME)
    keys = [offset for offset, kind in offsets_of(path) if kind == "K"]
    flip(path, keys[77] + 25)
    with pytest.raises(StartupError, match="check-wal --fix"):
        node.start()
    assert pion_main(["check-wal", str(tmp_path / "d")]) == 1
    assert pion_main(["check-wal", "--fix", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "SALVAGED" in out and "lost: db 0 key b's077'" in out
    node.start()
    r = node.client()
    assert r.dbsize() == 200  # 199 from the snapshot, after-save from the log
    assert r.get("after-save") == b"in the log" and r.get("s076") == b"value-76"
    node.stop()


def test_a_damaged_record_costs_one_section_of_one_tenant(tmp_path):
    node = DirServer(tmp_path / "d", requirepass=ADMIN, tenants=("alice:apw", "bob:bpw")).start()
    alice = redis.Redis(port=node.port, username="alice", password="apw")
    bob = redis.Redis(port=node.port, username="bob", password="bpw")
    for start in range(0, 2500, 500):
        alice.mset({f"a{i}": "x" * 20 for i in range(start, start + 500)})
    bob.mset({f"b{i}": "y" for i in range(300)})
    redis.Redis(port=node.port, password=ADMIN).save()
    node.stop()
    path = str(tmp_path / "d" / FILENAME)
    sections = [offset for offset, kind in offsets_of(path) if kind == "E"]
    assert len(sections) >= 4  # alice's 2500 keys in three sections, bob's in one
    flip(path, sections[1] + 200)
    assert pion_main(["check-wal", "--fix", str(tmp_path / "d")]) == 0
    node.start()
    alice = redis.Redis(port=node.port, username="alice", password="apw")
    bob = redis.Redis(port=node.port, username="bob", password="bpw")
    assert 1500 <= alice.dbsize() < 2500 and bob.dbsize() == 300
    node.stop()
