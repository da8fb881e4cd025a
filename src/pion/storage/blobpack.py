"""Blob tokens in snapshots: ``pack_blob`` / ``unpack_blob`` inside a ``snapshot_scope``.

Why: a value whose bytes are a view of an arena mapping (K/V rows put through ``ArenaStore``)
should be written to a snapshot as its 24-byte ref, not copied in, and loaded back as a view of
the same mapping; any other buffer is written inline. The engines' serializers call
``pack_blob`` / ``unpack_blob`` without knowing which case applies: the store they resolve refs
against, and the set that collects every ref the snapshot keeps alive (compaction spares those
ranges), come from the enclosing ``snapshot_scope``, a context variable, so the engine API does
not have to pass the store through every serializer.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pion.storage.blobref import ArenaError, BlobRef

if TYPE_CHECKING:
    from pion.storage.arena import ArenaStore


class _Scope:
    __slots__ = ("store", "live")

    def __init__(self, store: ArenaStore) -> None:
        self.store = store
        self.live: set[BlobRef] = set()


_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("pion_arena_scope", default=None)
_TOKEN_INLINE = b"\x00"
_TOKEN_REF = b"\x01"


@contextlib.contextmanager
def snapshot_scope(store: ArenaStore, live: set[BlobRef] | None = None) -> Iterator[set[BlobRef]]:
    """Within this block ``pack_blob`` turns arena views into refs and records them in ``live``."""
    scope = _Scope(store)
    if live is not None:
        scope.live = live
    token = _scope.set(scope)
    try:
        yield scope.live
    finally:
        _scope.reset(token)


def pack_blob(buf: bytes | bytearray | memoryview) -> bytes:
    """A token for a buffer: a 25-byte ref inside a snapshot for arena views, else the bytes."""
    scope = _scope.get()
    if scope is not None:
        ref = scope.store.ref_of(buf)
        if ref is not None:
            scope.live.add(ref)
            return _TOKEN_REF + ref.pack()
    return _TOKEN_INLINE + bytes(buf)


def unpack_blob(token: bytes | memoryview) -> bytes | memoryview:
    """The buffer a ``pack_blob`` token stands for (a mapped view for refs)."""
    kind = bytes(token[:1])
    if kind == _TOKEN_INLINE:
        return bytes(token[1:])
    if kind != _TOKEN_REF:
        raise ValueError("not a blob token")
    ref = BlobRef.unpack(token[1:])
    scope = _scope.get()
    if scope is None:
        raise ArenaError("an arena ref outside a snapshot load")
    scope.live.add(ref)
    return scope.store.view(ref)
