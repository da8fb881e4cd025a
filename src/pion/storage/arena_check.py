"""Checking mapped arena blobs against their crc32c, once each (``ArenaStore`` inherits this).

Why apart: after a restart arena blobs are mapped, never read, so a flipped byte would be served
as it is. ``blob_ok`` reads a blob once and remembers the answer; ``start_verifier`` reads every
blob mapped at start in a background thread (crc32c releases the GIL), so damage is known, and
the pages are cached, before a client asks. The K/V engine turns a damaged blob into missing rows
(``pion.kvcache.integrity``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import crc32c

from pion.storage.blobref import ArenaError, BlobRef

#: damaged blobs logged one line each; past this only counted
_LOGGED_BAD = 100

log = logging.getLogger("pion.arena")


class BlobChecks:
    """The crc checks of an ``ArenaStore`` (uses its ``_index``, ``_arenas``, ``_lock``, ``view``)."""

    _checked: dict[tuple[int, int], bool]
    _index: dict[tuple[int, int], tuple[int, int]]
    _arenas: dict[int, Any]
    _lock: threading.Lock
    _closed: bool
    _verifier: threading.Thread | None
    bad_blobs: int

    def view(self, ref: BlobRef) -> memoryview:  # pragma: no cover - ArenaStore's
        raise NotImplementedError

    def ref_of(self, obj: Any) -> BlobRef | None:  # pragma: no cover - ArenaStore's
        raise NotImplementedError

    def blob_ok(self, obj: Any) -> bool | None:
        """Do the bytes of the blob ``obj`` (a ``view()``, or a ref) still match its crc? Each
        blob is read once (then the answer is kept; the verifier thread may have read it already);
        a damaged one is counted and logged. None: ``obj`` is not an arena blob."""
        ref = obj if obj.__class__ is BlobRef else self.ref_of(obj)
        if ref is None:
            return None
        key = (ref.arena_id, ref.offset)
        known = self._checked.get(key)
        if known is None:
            try:
                known = crc32c.crc32c(self.view(ref)) == ref.crc
            except ArenaError:
                known = False
            self._note(key, ref, known)
        return known

    def _note(self, key: tuple[int, int], ref: BlobRef, ok: bool) -> None:
        if key in self._checked:
            return
        self._checked[key] = ok
        if not ok:
            self.bad_blobs += 1
            if self.bad_blobs <= _LOGGED_BAD:
                log.warning("arena blob %d:%d+%d does not match its checksum: its contents are treated as "
                            "missing (%d damaged so far)", ref.arena_id, ref.offset, ref.length, self.bad_blobs)

    @property
    def verified_blobs(self) -> int:
        return len(self._checked)

    def start_verifier(self) -> None:
        """Read every blob mapped at start (snapshot, log replay) once in a background thread and
        check its crc, so damage is known (and the pages are cached) before a client asks; a blob
        asked for first is checked then (``blob_ok``)."""
        if self._verifier is None and any(key not in self._checked for key in self._index):
            self._verifier = threading.Thread(target=self._verify_all, name="pion-arena-verify", daemon=True)
            self._verifier.start()

    def _verify_all(self) -> None:
        for key, (length, crc) in list(self._index.items()):
            if self._closed:
                return
            if key in self._checked:
                continue
            with self._lock:
                arena = self._arenas.get(key[0])
                if arena is None or arena.map is None or arena.dropped or key[1] + length > arena.capacity:
                    continue
                view = memoryview(arena.map)[key[1] : key[1] + length]
            try:
                ok = crc32c.crc32c(view) == crc
            finally:
                view.release()
            self._note(key, BlobRef(key[0], key[1], length, crc), ok)

