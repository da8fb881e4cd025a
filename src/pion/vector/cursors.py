"""FT.AGGREGATE ... WITHCURSOR: the rows a cursor still holds, read with FT.CURSOR READ.

A cursor keeps the finished pipeline's remaining rows (the pipeline runs to completion first,
so a cursor never sees later writes half-way) and is dropped when read to the end, deleted, its
index dropped, or idle longer than its MAXIDLE (RediSearch's default 300 s).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any


def max_idle(config: dict[str, str], asked: int) -> int:
    """A cursor's MAXIDLE, at most FT.CONFIG CURSOR_MAX_IDLE: RediSearch accepts a larger one without
    an error and keeps the cursor no longer than the configured maximum."""
    try:
        return min(asked, int(config.get("CURSOR_MAX_IDLE", "300000")))
    except ValueError:
        return asked


@dataclass
class Cursor:
    cid: int
    index: Any
    rows: list
    count: int
    max_idle_ms: int
    touched: float
    total: int


class CursorStore:
    def __init__(self) -> None:
        self.cursors: dict[int, Cursor] = {}

    def open(self, index: Any, rows: list, count: int, max_idle_ms: int, total: int) -> Cursor:
        self.expire()
        cid = random.getrandbits(40) + 1
        while cid in self.cursors:
            cid = random.getrandbits(40) + 1
        cursor = Cursor(cid, index, rows, count, max_idle_ms, time.monotonic(), total)
        self.cursors[cid] = cursor
        return cursor

    def take(self, cursor: Cursor, count: int | None = None) -> tuple[list, int]:
        """The next chunk and the id to read on with (0 when this chunk was the last)."""
        n = count or cursor.count
        chunk, cursor.rows = cursor.rows[:n], cursor.rows[n:]
        cursor.touched = time.monotonic()
        if not cursor.rows:
            self.cursors.pop(cursor.cid, None)
            return chunk, 0
        return chunk, cursor.cid

    def get(self, cid: int, index: Any) -> Cursor | None:
        self.expire()
        cursor = self.cursors.get(cid)
        if cursor is None or cursor.index is not index:
            return None
        return cursor

    def delete(self, cid: int, index: Any) -> bool:
        cursor = self.get(cid, index)
        if cursor is None:
            return False
        del self.cursors[cid]
        return True

    def drop_index(self, index: Any) -> None:
        for cid in [c.cid for c in self.cursors.values() if c.index is index]:
            del self.cursors[cid]

    def expire(self) -> None:
        now = time.monotonic()
        for cid in [c.cid for c in self.cursors.values() if (now - c.touched) * 1000 > c.max_idle_ms]:
            del self.cursors[cid]

    def count(self, index: Any | None) -> int:
        return sum(1 for c in self.cursors.values() if index is None or c.index is index)
