"""Latency monitoring as Redis 7 keeps it: event samples and per-command histograms.

Events (LATENCY LATEST / HISTORY / RESET / GRAPH / DOCTOR): while ``latency-monitor-threshold``
is set, a command that took at least that many milliseconds adds a sample to its event
(``command``, or ``fast-command`` for commands flagged fast), as does an active-expire pass
(``expire-cycle``). Each event keeps its last 160 samples, one per second at most (the highest
of that second), and its all-time maximum.

Histograms (LATENCY HISTOGRAM, INFO latencystats): while ``latency-tracking`` is on, every
finished command records its duration. Buckets are log-linear over nanoseconds (16 per power of
two, about 6% wide), the precision the percentiles INFO prints need; LATENCY HISTOGRAM replies
the cumulative counts at powers of two from 1024 ns, as Redis's iterator does.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pion.server.app import Server

SAMPLES_PER_EVENT = 160
#: Redis's CMD_HISTOGRAM_MAX_VALUE: longer calls count as one second
MAX_NS = 1_000_000_000
_SLOTS = 64 * 16


class Histogram:
    __slots__ = ("counts", "total", "sum_ns")

    def __init__(self) -> None:
        self.counts = [0] * _SLOTS
        self.total = 0
        #: nanoseconds of every call, unclamped (a Prometheus histogram's ``_sum``)
        self.sum_ns = 0

    def record(self, ns: int) -> None:
        self.sum_ns += ns
        ns = min(max(ns, 1), MAX_NS)
        bits = ns.bit_length()
        self.counts[(bits << 4) | ((ns >> (bits - 5)) & 15) if bits > 4 else ns] += 1
        self.total += 1

    def percentile(self, pct: float) -> int:
        """Nanoseconds at ``pct`` (hdr_value_at_percentile: the top of the bucket reaching it)."""
        wanted = max(int(pct / 100 * self.total + 0.5), 1)
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if count and seen >= wanted:
                return _bucket_top(index)
        return 0

    def at_most(self, bounds_ns: list[int]) -> list[int]:
        """Calls that took at most each of the ascending ``bounds_ns`` (a bucket counts at its top),
        then every call: Prometheus's cumulative ``le`` buckets, ``+Inf`` last."""
        out, seen, index = [], 0, 0
        counts = list(self.counts)  # one copy: another thread (the WAL writer) may be recording
        for bound in bounds_ns:
            while index < _SLOTS and _bucket_top(index) <= bound:
                seen += counts[index]
                index += 1
            out.append(seen)
        out.append(seen + sum(counts[index:]))
        return out

    def cumulative(self) -> dict[int, int]:
        """Microseconds -> calls that took at most that long, at 1024 ns * 2^k, until all counted."""
        out: dict[int, int] = {}
        seen, index, previous = 0, 0, 0
        bound = 1024
        while seen < self.total and bound <= 2 * MAX_NS:
            while index < _SLOTS and _bucket_top(index) < bound:
                seen += self.counts[index]
                index += 1
            if seen > previous:
                out[bound // 1000] = seen
                previous = seen
            bound *= 2
        return out


def _bucket_top(index: int) -> int:
    if index < 80:  # 0..15 hold exact values; 16..79 are never used (see Histogram.record)
        return min(index, 15)
    bits, sub = index >> 4, index & 15
    return ((17 + sub) << (bits - 5)) - 1


class LatencyMonitor:
    """``server.latency``: the event samples and the command histograms."""

    def __init__(self) -> None:
        #: event -> [samples deque of [unix time, ms], all-time max ms]
        self.events: dict[str, list[Any]] = {}
        self.histograms: dict[str, Histogram] = {}

    def add_sample(self, event: str, ms: int) -> None:
        series = self.events.get(event)
        if series is None:
            series = self.events[event] = [deque(maxlen=SAMPLES_PER_EVENT), 0]
        samples = series[0]
        series[1] = max(series[1], ms)
        now = int(time.time())
        if samples and samples[-1][0] == now:
            samples[-1][1] = max(samples[-1][1], ms)
        else:
            samples.append([now, ms])

    def record_command(self, name: str, ns: int) -> None:
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = self.histograms[name] = Histogram()
        histogram.record(ns)

    def latest(self) -> list[list[Any]]:
        return [[name.encode(), samples[-1][0], samples[-1][1], peak]
                for name, (samples, peak) in self.events.items() if samples]

    def history(self, event: str) -> list[list[int]]:
        series = self.events.get(event)
        return [list(sample) for sample in series[0]] if series is not None else []

    def reset(self, events: list[str]) -> int:
        if not events:
            count = len(self.events)
            self.events.clear()
            return count
        return sum(self.events.pop(name, None) is not None for name in events)

    def histogram_reply(self, names: list[str] | None) -> dict[bytes, dict[bytes, Any]]:
        chosen = self.histograms if names is None else {n: self.histograms[n] for n in names if n in self.histograms}
        return {name.encode(): {b"calls": h.total, b"histogram_usec": h.cumulative()}
                for name, h in chosen.items() if h.total}


def percentile_label(pct: float) -> str:
    return ("%f" % pct).rstrip("0").rstrip(".")


def latencystats_section(server: Server) -> dict[str, Any]:
    """INFO latencystats: ``latency_percentiles_usec_<cmd>:p50=...,p99=...`` per command."""
    wanted = server.settings.latency_tracking_info_percentiles
    out = {}
    for name, histogram in server.latency.histograms.items():
        if histogram.total:
            out[f"latency_percentiles_usec_{name.lower()}"] = ",".join(
                f"p{percentile_label(p)}={histogram.percentile(p) / 1000:.3f}" for p in wanted)
    return out


def doctor_report(monitor: LatencyMonitor, threshold_ms: int) -> str:
    """A plain report of what was sampled (Redis's doctor adds advice per event kind)."""
    if not threshold_ms:
        return ("I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Pion instance. "
                "You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it.")
    if not monitor.events:
        return "Dave, no latency spike was observed during the lifetime of this Pion instance, not in the " \
               "slightest bit. I honestly think you ought to sleep tonight."
    lines = ["Dave, I have observed latency spikes in this Pion instance. You don't mind talking about it, "
             "do you Dave?", ""]
    for number, (name, (samples, peak)) in enumerate(monitor.events.items(), 1):
        values = [ms for _, ms in samples]
        average = sum(values) // len(values) if values else 0
        lines.append(f"{number}. {name}: {len(values)} latency spikes (average {average}ms, "
                     f"mean deviation {_deviation(values, average)}ms, period {_period(samples)} sec). "
                     f"Worst all time event {peak}ms.")
    return "\n".join(lines) + "\n"


def _deviation(values: list[int], average: int) -> int:
    return sum(abs(v - average) for v in values) // len(values) if values else 0


def _period(samples: Any) -> int:
    if len(samples) < 2:
        return 0
    return (samples[-1][0] - samples[0][0]) // (len(samples) - 1)


def install_latency(server: Server) -> LatencyMonitor:
    """The server's monitor, with the INFO latencystats section and the CONFIG RESETSTAT hook."""
    monitor = LatencyMonitor()
    sections = server.info_sections
    items = list(sections.items())
    at = next((i + 1 for i, (name, _) in enumerate(items) if name == "errorstats"), len(items))
    items.insert(at, ("latencystats", latencystats_section))
    sections.clear()
    sections.update(items)
    server.resetstat_hooks.append(lambda srv: monitor.histograms.clear())
    return monitor
