"""Blobs written off the loop: reserve (loop), write_at (any thread, in parts), commit (loop)."""

from __future__ import annotations

import threading

import pytest

from pion.storage.arena import ArenaError, ArenaStore


def test_a_blob_written_in_parts_by_threads_is_the_blob_put_would_store(store):
    data = bytes(range(256)) * 1000
    room = store.reserve(len(data))
    parts = [threading.Thread(target=store.write_at, args=(room, data[at:at + 64_000], at))
             for at in range(0, len(data), 64_000)]
    for part in parts:
        part.start()
    for part in parts:
        part.join()
    ref = store.commit(room, data)
    assert bytes(store.view(ref)) == data and store.verify(ref)
    assert store.ref_of(store.view(ref)) == ref  # the journal references its view, as after put()
    assert store.put(data).crc == ref.crc


def test_compaction_keeps_a_reservation_being_written(store):
    store.put(b"o" * 1000)
    room = store.reserve(2000)
    store.write_at(room, b"r" * 1000)
    later = store.reserve(1_048_000)  # does not fit: a new arena; the reservation's is no longer current
    assert later.arena_id != room.arena_id
    store.reclaim([])  # nothing live: only the reservation keeps its arena
    store.write_at(room, b"s" * 1000, 1000)
    ref = store.commit(room, b"r" * 1000 + b"s" * 1000)
    assert bytes(store.view(ref)) == b"r" * 1000 + b"s" * 1000


def test_a_cancelled_reservation_cannot_be_written_or_committed(store):
    room = store.reserve(100)
    store.cancel(room)
    with pytest.raises(ArenaError):
        store.write_at(room, b"x" * 100)
    with pytest.raises(ArenaError):
        store.commit(room, b"x" * 100)
    with pytest.raises(ArenaError):
        store.write_at(store.reserve(10), b"x" * 11)  # past its room


def test_no_write_lands_after_close(tmp_path):
    store = ArenaStore(str(tmp_path / "arenas"), arena_size=1 << 20)
    room = store.reserve(10)
    store.close()
    with pytest.raises(ArenaError):
        store.write_at(room, b"x" * 10)
