"""Eviction by byte budget (``--kv-maxmemory``): whole prefixes, least recently used first,
leaves of a chain before their roots, pinned ones never.

The unit is a prefix namespace: its ``_pk`` and ``_pv`` sessions, its SSM state and its
registry entry go together (a raw ``V.*`` session that is not part of a pair is its own unit).
Using a prefix touches its ancestors too, so a parent is never older than its most recent child
and the reference's failure (the root of a conversation chain evicted first, breaking every
segment after it) cannot happen: a unit with live children is not a candidate.
"""

from __future__ import annotations

from collections.abc import Iterable

SIDES = (b"_pk", b"_pv")


def unit_of(sid: bytes) -> bytes:
    """The eviction unit (prefix namespace) a session belongs to."""
    return sid[:-3] if sid[-3:] in SIDES and len(sid) > 3 else sid


class Evictor:
    def __init__(self) -> None:
        self.clock = 0
        self.last_use: dict[bytes, int] = {}
        self.pinned: set[bytes] = set()
        self.evictions = 0

    def touch(self, lineage: Iterable[bytes]) -> None:
        """Mark a unit and its ancestors (``lineage``, the unit first) used now."""
        self.clock += 1
        for unit in lineage:
            self.last_use[unit] = self.clock

    def forget(self, unit: bytes) -> None:
        self.last_use.pop(unit, None)
        self.pinned.discard(unit)

    def victim(self, units: Iterable[bytes], protect: frozenset[bytes] = frozenset()) -> bytes | None:
        """The least recently used of ``units`` (the caller left out parents of live units) that is
        not pinned or protected."""
        best: bytes | None = None
        best_time = 0
        for unit in units:
            if unit in self.pinned or unit in protect:
                continue
            used = self.last_use.get(unit, 0)
            if best is None or used < best_time or (used == best_time and unit < best):
                best, best_time = unit, used
        return best
