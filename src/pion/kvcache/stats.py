"""The value receipt behind ``PION.STATS`` and INFO's ``# Pion`` section.

Per server (the reference's "worker"): prefix hits and misses, tokens and payload bytes served,
prefill time avoided (client-measured where the client sent ``PREFILL_MS``, otherwise estimated
at 555 µs a token, the reference's Llama-3.2-1B-4bit figure), plus the counters the semantic
cache, MoE and vector engines bump. ``reset`` zeroes everything but the start time.
"""

from __future__ import annotations

import time

#: estimated prefill cost of one token, in microseconds (reference: 2,022 tokens in 1,218 ms)
ESTIMATE_US_PER_TOKEN = 555

COUNTERS = (
    "kvprefix_hits", "kvprefix_misses", "kvprefix_hits_measured", "kvprefix_tokens_served",
    "kvprefix_bytes_served", "kvprefix_prefill_us_saved", "kvprefix_prefill_us_measured",
    "semantic_hits", "semantic_misses", "moe_hits", "moe_misses", "vector_queries",
)


def seconds_text(us: int) -> bytes:
    """Microseconds as seconds with three decimals, truncated (3,655,500 µs -> ``3.655``)."""
    ms = us // 1000
    return b"%d.%03d" % (ms // 1000, ms % 1000)


class Ledger:
    def __init__(self, worker_id: int = 0) -> None:
        self.worker_id = worker_id
        self.started = time.monotonic()
        self.counts = dict.fromkeys(COUNTERS, 0)

    def bump(self, name: str, amount: int = 1) -> None:
        self.counts[name] += amount

    def hit(self, tokens: int, prefill_us: int | None) -> None:
        """A prefix served: credit ``prefill_us`` when the client measured it, else an estimate."""
        counts = self.counts
        counts["kvprefix_hits"] += 1
        counts["kvprefix_tokens_served"] += tokens
        if prefill_us:
            counts["kvprefix_hits_measured"] += 1
            counts["kvprefix_prefill_us_measured"] += prefill_us
            counts["kvprefix_prefill_us_saved"] += prefill_us
        else:
            counts["kvprefix_prefill_us_saved"] += tokens * ESTIMATE_US_PER_TOKEN

    def miss(self) -> None:
        self.counts["kvprefix_misses"] += 1

    def reset(self) -> None:
        self.counts = dict.fromkeys(COUNTERS, 0)

    def fields(self, uptime: int) -> dict[bytes, int | bytes]:
        """The 16 PION.STATS fields in the reference's order."""
        c = self.counts
        names = (
            "kvprefix_hits", "kvprefix_misses", "kvprefix_hits_measured", "kvprefix_tokens_served",
            "kvprefix_bytes_served", "kvprefix_prefill_us_saved", "kvprefix_prefill_us_measured",
        )
        out: dict[bytes, int | bytes] = {b"worker_id": self.worker_id, b"uptime_in_seconds": uptime}
        out.update({name.encode(): c[name] for name in names})
        out[b"prefill_seconds_avoided"] = seconds_text(c["kvprefix_prefill_us_saved"])
        out[b"prefill_seconds_avoided_measured"] = seconds_text(c["kvprefix_prefill_us_measured"])
        for name in ("semantic_hits", "semantic_misses", "moe_hits", "moe_misses", "vector_queries"):
            out[name.encode()] = c[name]
        return out

    def info_fields(self, uptime: int) -> list[tuple[str, object]]:
        """INFO ``# Pion``: scope and worker, then the counters without the µs fields."""
        fields = self.fields(uptime)
        rows: list[tuple[str, object]] = [("stats_scope", "worker")]
        for key, value in fields.items():
            name = key.decode()
            if name.endswith("_us_saved") or name.endswith("_us_measured") or name == "uptime_in_seconds":
                continue
            rows.append((name, value.decode() if isinstance(value, bytes) else value))
        return rows
