"""The charts' memory: a ring buffer of the prefix counters, sampled by the server's cron.

Every ``interval`` seconds the cron records, per K/V space (the server's own and each
tenant's), the cumulative hits, misses and microseconds of prefill saved, as the metrics
endpoint reads them (``pion.server.dashboard.readers.kv_counters``). The page draws the hit rate
of each interval and the prefill time saved from these; ``CAPACITY`` samples at the default
interval are the last hour. Counters that went down (CONFIG RESETSTAT) start a new run: the
reader gives the intervals across a reset as zero, never a negative rate.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

#: seconds between samples, and how many are kept (an hour at 2 s)
INTERVAL = 2.0
CAPACITY = 1800

Counters = dict[str, tuple[int, int, int]]  # space -> (hits, misses, prefill µs saved)


class History:
    def __init__(self, read: Callable[[], Counters], interval: float = INTERVAL, capacity: int = CAPACITY) -> None:
        self.read = read
        self.interval = interval
        self.samples: deque[tuple[float, Counters]] = deque(maxlen=capacity)
        self._last: float | None = None

    def tick(self, now: float | None = None) -> bool:
        """Called from the cron: take a sample when one is due; True when one was taken."""
        mono = time.monotonic()
        if self._last is not None and mono - self._last < self.interval:
            return False
        self._last = mono
        self.samples.append((time.time() if now is None else now, self.read()))
        return True

    def series(self, visible: Callable[[str], bool]) -> list[dict[str, float | None]]:
        """Per interval, over the spaces ``visible`` accepts: the end time, hits, misses, hit
        rate (None without lookups) and seconds of prefill saved in it, and the cumulative
        seconds saved since the first sample."""
        points: list[dict[str, float | None]] = []
        previous: tuple[int, int, int] | None = None
        saved_total = 0.0
        for when, counters in self.samples:
            hits = misses = saved_us = 0
            for space, (h, m, s) in counters.items():
                if visible(space):
                    hits, misses, saved_us = hits + h, misses + m, saved_us + s
            if previous is not None:
                dh, dm, ds = hits - previous[0], misses - previous[1], saved_us - previous[2]
                if dh < 0 or dm < 0 or ds < 0:  # a reset: this interval counts from zero
                    dh, dm, ds = max(hits, 0), max(misses, 0), max(saved_us, 0)
                saved_total += ds / 1e6
                lookups = dh + dm
                points.append({"t": round(when, 3), "hits": dh, "misses": dm,
                               "hit_rate": (dh / lookups) if lookups else None,
                               "saved_s": ds / 1e6, "saved_total_s": round(saved_total, 6)})
            previous = (hits, misses, saved_us)
        return points
