"""A query's time budget, checked cooperatively by the loops that evaluate it.

Why: a search, an aggregation pipeline, a vector-set filter or a JSONPath descent runs on the
event loop; one that takes seconds stops every other client for seconds. RediSearch bounds a
query by ``TIMEOUT`` milliseconds (``FT.CONFIG SET TIMEOUT``, 500 by default, 0 for none) and
answers ``Timeout limit was reached`` past it, or under ``ON_TIMEOUT RETURN`` the results it has
so far. The loops here call ``tick()`` once per item; every ``EVERY`` items it reads the clock
(one ``perf_counter`` per few hundred items costs nothing next to the items' own work) and raises
``QueryTimeout`` past the deadline. The evaluator that catches it decides between the error and
the partial result.

The same clock read is where a query gives the event loop back: the server installs a pause
hook (``set_pause``; ``pion.server.slices``) that every budget made afterwards calls at each
check. Inside a query the server runs in slices it hands the loop to other clients for a turn
once the slice's ~10 ms are spent; anywhere else it returns at once. The deadline is wall
time, as RediSearch's: the turns given to other clients count (they also bound how long a
write that conflicts with the query waits for it).

A leaf of ``pion.storage``: the engines (storage's JSONPath, ``pion.vector``) import it, it
imports nothing of Pion but the error type.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

from pion.protocol.errors import ReplyError

#: RediSearch's text for a query past its TIMEOUT (an error under FAIL, a warning under RETURN)
TIMEOUT_TEXT = "Timeout limit was reached"
#: items between two reads of the clock
EVERY = 256


class QueryTimeout(ReplyError):
    """The budget ran out: RediSearch's ``Timeout limit was reached`` (no ``ERR`` prefix, as
    RediSearch replies it)."""

    def __init__(self, message: str = TIMEOUT_TEXT) -> None:
        super().__init__(message)


#: the server's pause hook (``set_pause``), taken by every budget made after it was set
_pause: Callable[[], bool] | None = None


def set_pause(hook: Callable[[], bool] | None) -> None:
    """Install the hook a budget's check calls to let the event loop run (None: none)."""
    global _pause
    _pause = hook


class Budget:
    """A deadline ``ms`` milliseconds from now (``ms <= 0``: none)."""

    __slots__ = ("deadline", "count", "expired", "ms", "pause")

    def __init__(self, ms: float = 0) -> None:
        self.ms = ms
        self.deadline = perf_counter() + ms / 1000.0 if ms and ms > 0 else 0.0
        self.count = 0
        #: set once a check found the deadline passed (RETURN: the reply's warning)
        self.expired = False
        #: called at each check: may hand the loop to other clients for a turn (see above)
        self.pause = _pause

    @property
    def limited(self) -> bool:
        return self.deadline > 0.0

    def tick(self, items: int = 1) -> None:
        """Count ``items`` of work; every ``EVERY`` of them, ``check``."""
        if self.deadline or self.pause is not None:
            self.count += items
            if self.count >= EVERY:
                self.count = 0
                self.check()

    def breathe(self, items: int = 1) -> None:
        """Count ``items`` of work that must not end the query (it is checked after): every
        ``EVERY`` of them only the pause hook runs, never the deadline."""
        if self.pause is not None:
            self.count += items
            if self.count >= EVERY:
                self.count = 0
                self.pause()

    def check(self) -> None:
        """Raise ``QueryTimeout`` if the deadline has passed; else maybe pause for a loop turn
        (and check again after it: the turn counts)."""
        if self.deadline and perf_counter() > self.deadline:
            self.expired = True
            raise QueryTimeout()
        if self.pause is not None and self.pause() and self.deadline and perf_counter() > self.deadline:
            self.expired = True
            raise QueryTimeout()

    def left(self) -> float:
        """Seconds left (infinite without a deadline)."""
        return self.deadline - perf_counter() if self.deadline else float("inf")


#: RediSearch's default TIMEOUT in milliseconds
DEFAULT_MS = 500


def timeout_ms(config: dict[str, str] | None) -> int:
    """FT.CONFIG's TIMEOUT (``config``: the search engine's table; None without search: the
    default). The one query budget of a server: searches, JSON reads and VSIM FILTER use it."""
    if config is None:
        return DEFAULT_MS
    try:
        return int(config.get("TIMEOUT", DEFAULT_MS))
    except ValueError:
        return DEFAULT_MS


#: no deadline at all (replay, MULTI-less internal callers): ``tick`` returns at once
UNLIMITED = Budget(0)
UNLIMITED.pause = None
