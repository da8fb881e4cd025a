"""The snapshot file: records, overrides and tombstones, atomic commit, damage detection."""

from __future__ import annotations

import os

import pytest

from pion.storage.serialize import dump_value, load_value
from pion.storage.snapshot import (
    FILENAME,
    ExtensionRecord,
    KeyRecord,
    SnapshotEncoder,
    SnapshotError,
    SnapshotFile,
    SnapshotReader,
    Tombstone,
)


def write(directory, keys, base=7, extra=()):
    enc = SnapshotEncoder()
    file = SnapshotFile(str(directory))
    for db, key, expire, value in keys:
        file.write(enc.key(db, key, expire, dump_value(value)))
    for record in extra:
        file.write(record(enc))
    file.write(enc.end())
    file.commit(enc.header(base, 1234))
    return os.path.join(str(directory), FILENAME)


def read(path):
    reader = SnapshotReader(path)
    records = list(reader)
    return reader.info, records


def test_keys_round_trip_with_expiry_and_db(tmp_path):
    path = write(tmp_path, [(0, b"a", None, b"1"), (3, b"b", 99_000, b"2" * 1000)])
    info, records = read(path)
    assert info.base_segment == 7 and info.created_ms == 1234
    assert [(r.db, r.key, r.expire_ms, load_value(r.value)) for r in records] == [
        (0, b"a", None, b"1"), (3, b"b", 99_000, b"2" * 1000)]
    assert not os.path.exists(path + ".tmp")


def test_tombstones_and_extensions_are_read_in_order(tmp_path):
    path = write(tmp_path, [(0, b"a", None, b"1")], extra=[
        lambda enc: enc.tombstone(0, b"a"), lambda enc: enc.extension("kvcache", b"state")])
    _, records = read(path)
    assert isinstance(records[0], KeyRecord)
    assert records[1] == Tombstone(0, b"a")
    assert isinstance(records[2], ExtensionRecord) and records[2].name == "kvcache" and bytes(records[2].data) == b"state"


def test_an_empty_snapshot_is_valid(tmp_path):
    _, records = read(write(tmp_path, []))
    assert records == []


@pytest.mark.parametrize("where", ["header", "record", "end"])
def test_any_flipped_byte_is_detected(tmp_path, where):
    path = write(tmp_path, [(0, b"key%d" % i, None, b"v" * 50) for i in range(10)])
    data = bytearray(open(path, "rb").read())
    position = {"header": 10, "record": len(data) // 2, "end": len(data) - 3}[where]
    data[position] ^= 0x10
    open(path, "wb").write(data)
    with pytest.raises(SnapshotError):
        read(path)


def test_a_truncated_snapshot_is_refused(tmp_path):
    path = write(tmp_path, [(0, b"key", None, b"v")])
    data = open(path, "rb").read()
    for cut in (10, len(data) - 5):
        open(path, "wb").write(data[:cut])
        with pytest.raises(SnapshotError):
            read(path)


def test_an_aborted_write_leaves_the_old_snapshot(tmp_path):
    path = write(tmp_path, [(0, b"old", None, b"1")])
    file = SnapshotFile(str(tmp_path))
    file.write(b"partial")
    file.abort()
    _, records = read(path)
    assert [r.key for r in records] == [b"old"]
    assert not os.path.exists(path + ".tmp")
