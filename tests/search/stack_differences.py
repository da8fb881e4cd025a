"""Where Pion answers differently from Redis Stack (RediSearch 2.10.5, RedisJSON 2.8.3) on purpose.

Each entry names the case of ``stack_diff.py``, the command it applies to (its first arguments), the
protocols, and why. ``test_stack_diff.py`` skips a listed difference with its reason and fails on an
unlisted one, and fails too when a listed one no longer differs (the list stays true).
docs/compat-differences.md is this list for people.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Difference:
    case: str
    prefix: tuple[str, ...]  # the command's first arguments, compared case-insensitively
    protocols: tuple[int, ...]
    reason: str


DIFFERENCES: list[Difference] = [
]


def _text(x: object) -> str:
    return x.decode("latin-1") if isinstance(x, bytes) else str(x)


def listed(case: str, args: tuple, protocol: int) -> str | None:
    """The reason a difference of this step is intentional, or None."""
    words = [_text(a).upper() for a in args]
    for diff in DIFFERENCES:
        if diff.case == case and protocol in diff.protocols and \
                [p.upper() for p in diff.prefix] == words[: len(diff.prefix)]:
            return diff.reason
    return None
