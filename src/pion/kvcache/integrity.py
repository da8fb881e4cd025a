"""Damaged K/V rows are missing rows, never served.

Why: after a restart a layer's rows are views of mapped arena files, never read at start (that
is what makes restart time independent of the bytes cached). A flipped byte in an arena would
then be served by V.FETCH as a wrong cache. Each blob's ``BlobRef`` carries a crc32c: the server
checks it once per blob (in a background thread after start, or on first use if that comes
first), and before rows are fetched, exported or a prefix is answered as a HIT, the blobs under
them are checked here; the rows of a damaged one are dropped from the layer (counted and logged
by the arena store), so LOOKUP answers MISS and the client prefills again.

``blob_ok(base)`` is the arena store's check: True, False, or None for rows that are not an
arena view (live rows on the heap, which the server wrote itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pion.kvcache.layer import Layer
from pion.kvcache.vstore import Session, VStore, _stamps

BlobCheck = Callable[[object], "bool | None"]


def damaged_chunks(layer: Layer, blob_ok: BlobCheck) -> list:
    """The chunks of ``layer`` whose arena blob does not match its crc."""
    return [chunk for chunk in layer.chunks if chunk.base.__class__ is memoryview and blob_ok(chunk.base) is False]


def drop_damaged(store: VStore, session: Session, layers: Iterable[int], blob_ok: BlobCheck) -> int:
    """Drop the rows of every damaged blob in the given layers of ``session``; returns the rows
    dropped. The layer's high-water mark stays: the rows read as never stored."""
    dropped = 0
    for index in layers:
        layer = session.layer(index)
        if layer is None:
            continue
        for chunk in damaged_chunks(layer, blob_ok):
            before = layer.nbytes
            layer._cut(chunk.start, chunk.end)
            delta = layer.nbytes - before
            session.nbytes += delta
            store.nbytes += delta
            dropped += chunk.count
    if dropped:
        session.version = next(_stamps)  # exports of these rows are stale
    return dropped
