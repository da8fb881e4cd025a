"""Blob arenas: put/view/ref_of, mapping after a restart, pack_blob tokens, compaction."""

from __future__ import annotations

import gc
import os

import pytest

from pion.storage.arena import ArenaError, ArenaStore, BlobRef, pack_blob, snapshot_scope, unpack_blob


def test_put_then_view_returns_the_same_bytes_without_copying(store):
    ref = store.put(b"abc" * 1000)
    view = store.view(ref)
    assert isinstance(view, memoryview) and view.readonly
    assert bytes(view) == b"abc" * 1000
    assert store.ref_of(view) == ref
    assert store.verify(ref)


def test_ref_of_ignores_slices_and_foreign_buffers(store):
    ref = store.put(b"x" * 100)
    view = store.view(ref)
    assert store.ref_of(view[1:]) is None
    assert store.ref_of(memoryview(b"x" * 100)) is None
    assert store.ref_of(b"x" * 100) is None


def test_blob_refs_pack_to_24_bytes():
    ref = BlobRef(7, 1 << 40, 123456789, 0xFFFFFFFF)
    assert len(ref.pack()) == 24 and BlobRef.unpack(ref.pack()) == ref


def test_a_blob_bigger_than_an_arena_gets_its_own(store):
    small = store.put(b"s" * 10)
    big = store.put(b"b" * (3 << 20))
    assert big.arena_id != small.arena_id
    assert bytes(store.view(big)[-3:]) == b"bbb"


def test_after_a_restart_blobs_are_mapped_and_new_puts_go_to_a_new_file(tmp_path):
    directory = str(tmp_path / "arenas")
    first = ArenaStore(directory, arena_size=1 << 20)
    ref = first.put(b"persisted" * 100)
    first.sync()
    first.close()
    second = ArenaStore(directory, arena_size=1 << 20)
    assert bytes(second.view(ref)) == b"persisted" * 100
    assert second.put(b"new").arena_id == ref.arena_id + 1
    with pytest.raises(ArenaError):
        second.view(BlobRef(99, 0, 10, 0))
    second.close()


def test_pack_blob_inlines_outside_a_snapshot_and_refs_inside(store):
    ref = store.put(b"k" * 500)
    view = store.view(ref)
    inline = pack_blob(view)
    assert inline[1:] == b"k" * 500 and unpack_blob(inline) == b"k" * 500
    with snapshot_scope(store) as live:
        token = pack_blob(view)
        assert len(token) == 25 and live == {ref}
        assert pack_blob(b"plain") == b"\x00plain"
    with snapshot_scope(store):
        loaded = unpack_blob(token)
    assert isinstance(loaded, memoryview) and bytes(loaded) == b"k" * 500


def test_reclaim_deletes_dead_arenas_and_punches_dead_ranges(tmp_path):
    store = ArenaStore(str(tmp_path / "a"), arena_size=1 << 20)
    dead_file = [store.put(os.urandom(200_000)) for _ in range(4)]
    keep = store.put(os.urandom(600_000))  # starts the second arena
    store.put(b"current")  # the arena being written is never reclaimed
    mixed = [store.put(os.urandom(100_000)) for _ in range(3)]
    store.sync()
    assert dead_file[0].arena_id != keep.arena_id
    released = store.reclaim({keep, mixed[1]}, keep_current=False)
    assert released > 0
    assert dead_file[0].arena_id not in store.arena_ids()
    assert store.verify(keep) and store.verify(mixed[1])
    store.close()


def test_reclaim_keeps_a_range_a_value_still_holds_a_view_of(store):
    ref = store.put(os.urandom(50_000))
    store.put(os.urandom(2 << 20))  # a new current arena
    held = store.view(ref)
    store.reclaim(set())
    assert store.verify(ref) and store.kept_held == 1
    del held
    gc.collect()
    store.reclaim(set())
    assert ref.arena_id not in store.arena_ids()


def test_a_writer_hands_the_journal_a_blob_as_its_view_whose_ref_the_store_knows(store):
    """The hand-off the journal relies on (no lookup by the caller's object identity): the view
    of a blob put is resolved to its ref; the original object, or a slice of the view, is not."""
    blob = b"y" * 10
    ref = store.put(blob)
    view = store.view(ref)
    assert store.ref_of(view) == ref
    assert store.ref_of(blob) is None and store.ref_of(memoryview(blob)) is None
    assert store.ref_of(view[1:]) is None
