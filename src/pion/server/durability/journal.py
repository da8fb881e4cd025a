"""The hand-off between the dispatcher and persistence.

The dispatcher gives each top-level command's write effects to ``Journal.append`` as one
atomic record, and asks ``when_durable`` before releasing replies. This base class persists
nothing and is durable at once; ``pion.storage`` provides the write-ahead log behind it.
"""

from __future__ import annotations

from collections.abc import Callable


class Journal:
    """A journal that keeps nothing: every sequence number is durable the moment it is issued."""

    def __init__(self) -> None:
        self.seq = 0
        self.durable_seq = 0

    def append(self, effects: list[tuple[int, list[bytes]]]) -> int:
        """Record the effects of one command (``(db index, argv)`` each); returns its sequence."""
        self.seq += 1
        self.durable_seq = self.seq
        return self.seq

    def append_many(self, records: list[list[tuple[int, list[bytes]]]]) -> int:
        """Record several commands' effects, one record each, in order, through ``append`` (the
        fast lane hands a batch of writes over in one call; observers, replication and the log
        see each record as before); returns the last one's sequence (record ``i`` of ``n`` is
        ``last - n + 1 + i``)."""
        seq = self.seq
        for effects in records:
            seq = self.append(effects)
        return seq

    def when_durable(self, seq: int, callback: Callable[[], None]) -> None:
        callback()

    def note_reply(self, client: object, seq: int, index: int = -1) -> None:
        """The reply to the write logged as ``seq`` is the next one ``client`` gets (or the one
        at ``index`` of its output, when given): a journal that can fail remembers where, to
        answer -MISCONF instead if the write is not durable."""

    def write_error(self) -> str | None:
        """The reason writes are refused (a failed fsync), or None."""
        return None

    def last_write_ok(self) -> bool:
        """INFO ``aof_last_write_status``: did the last write to the disk (log or arena) succeed?"""
        return True

    def stage(self, argv: list) -> None:
        """Before a write command runs: make its large arguments durable-ready now (a journal
        that keeps blobs in arenas writes them here), so a failed disk write refuses the command
        (``DiskWriteError``) before it changed anything."""

    def note_disk_error(self, exc: OSError) -> None:
        """A blob arena write failed (the dispatcher answered -MISCONF)."""

    def close(self) -> None:
        pass
