"""The sorted-set type: a dict member -> score and a SortedList of (score, member).

The SortedList keeps Redis's order (score, then member bytes) so ranks, rank ranges and score
ranges cost O(log n). Scores are floats; NaN never gets in (the commands refuse it). Lexical
ranges follow Redis's walk over the listpack when scores differ, because Redis leaves that case
unspecified and its small-set answer is what clients see. OBJECT ENCODING follows Redis's
rule: listpack until ``zset-max-listpack-entries``/``-value`` is passed, then skiplist for good.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

from pion.storage.encodings import register_encoding, threshold
from pion.storage.keyspace import register_type
from pion.storage.memory import register_sizer
from pion.storage.serialize import PayloadError, pack_tree, register_codec, unpack_tree
from pion.storage.set_value import ScanIndex

INF = math.inf

#: the ``-`` and ``+`` lexical bounds (both exclusive in Redis)
MINUS = object()
PLUS = object()


class ScoreRange:
    """A parsed ``min max`` score interval; ``(`` makes an end exclusive."""

    __slots__ = ("low", "low_ex", "high", "high_ex")

    def __init__(self, low: float, low_ex: bool, high: float, high_ex: bool) -> None:
        self.low, self.low_ex, self.high, self.high_ex = low, low_ex, high, high_ex

    def empty(self) -> bool:
        return self.low > self.high or (self.low == self.high and (self.low_ex or self.high_ex))

    def above_low(self, score: float) -> bool:
        return score > self.low if self.low_ex else score >= self.low

    def below_high(self, score: float) -> bool:
        return score < self.high if self.high_ex else score <= self.high


class LexRange:
    """A parsed ``[a (b - +`` member interval."""

    __slots__ = ("low", "low_ex", "high", "high_ex")

    def __init__(self, low: object, low_ex: bool, high: object, high_ex: bool) -> None:
        self.low, self.low_ex, self.high, self.high_ex = low, low_ex, high, high_ex

    def empty(self) -> bool:
        cmp = _lex_cmp(self.low, self.high)
        return cmp > 0 or (cmp == 0 and (self.low_ex or self.high_ex))

    def above_low(self, member: bytes) -> bool:
        cmp = _lex_cmp(member, self.low)
        return cmp > 0 if self.low_ex else cmp >= 0

    def below_high(self, member: bytes) -> bool:
        cmp = _lex_cmp(member, self.high)
        return cmp < 0 if self.high_ex else cmp <= 0


def _lex_cmp(a: object, b: object) -> int:
    """Redis's sdscmplex: ``-`` sorts before every string, ``+`` after."""
    if a is b:
        return 0
    if a is MINUS or b is PLUS:
        return -1
    if a is PLUS or b is MINUS:
        return 1
    return (a > b) - (a < b)  # type: ignore[operator]


class ZSetValue:
    """A Redis sorted set. ``order`` holds (score, member) pairs; ``scores`` member -> score."""

    __slots__ = ("scores", "order", "skiplist", "scan_index")

    def __init__(self) -> None:
        self.scores: dict[bytes, float] = {}
        self.order = SortedList()
        self.skiplist = False
        #: ZSCAN's hash-ordered view of the members, dropped on any change
        self.scan_index: ScanIndex | None = None

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[bytes, float]], limits: tuple[int, int]) -> ZSetValue:
        """A new set (store commands), encoded as Redis encodes a freshly built result."""
        zset = cls()
        zset.scores = dict(pairs)
        zset.scan_index = None
        zset.note_growth(limits, zset.scores)
        if not zset.skiplist and any(score == 0.0 for score in zset.scores.values()):
            zset.scores = {member: (0.0 if score == 0.0 else score) for member, score in zset.scores.items()}
        zset.order = SortedList((score, member) for member, score in zset.scores.items())
        return zset

    def __len__(self) -> int:
        return len(self.scores)

    def dup(self) -> ZSetValue:
        """COPY: an independent set sharing only the immutable members and scores."""
        copy = ZSetValue()
        copy.scores = dict(self.scores)
        copy.order = self.order.copy()
        copy.skiplist = self.skiplist
        return copy

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        return iter(self.order)

    def __contains__(self, member: bytes) -> bool:
        return member in self.scores

    def score(self, member: bytes) -> float | None:
        return self.scores.get(member)

    # -- writes ------------------------------------------------------------------------

    def set_score(self, member: bytes, score: float, limits: tuple[int, int] | None = None) -> bool:
        """Insert or move ``member``; True if it is new. With ``limits``, a new member that
        would overflow the listpack converts the set first, as zsetAdd does."""
        old = self.scores.get(member)
        if old is not None:
            if old == score:  # 0 and -0 are the same score to Redis too
                return False
            self.order.remove((old, member))
        elif limits is not None and not self.skiplist:
            if len(self.scores) + 1 > limits[0] or len(member) > limits[1]:
                self.skiplist = True
        if score == 0.0 and not self.skiplist:
            score = 0.0  # a listpack stores -0 as the integer 0
        self.scores[member] = score
        self.order.add((score, member))
        if old is None:
            self.scan_index = None
        return old is None

    def remove(self, member: bytes) -> bool:
        score = self.scores.pop(member, None)
        if score is None:
            return False
        self.order.remove((score, member))
        self.scan_index = None
        return True

    def remove_span(self, start: int, stop: int) -> int:
        """Delete the pairs at ranks [start, stop)."""
        if stop <= start:
            return 0
        for _, member in self.order.islice(start, stop):
            del self.scores[member]
        del self.order[start:stop]
        self.scan_index = None
        return stop - start

    def pop(self, count: int, highest: bool) -> list[tuple[bytes, float]]:
        """ZPOPMIN/ZPOPMAX: (member, score) pairs, best first."""
        count = min(count, len(self.order))
        if highest:
            taken = list(self.order.islice(len(self.order) - count, reverse=True))
            del self.order[len(self.order) - count :]
        else:
            taken = list(self.order.islice(0, count))
            del self.order[:count]
        for _, member in taken:
            del self.scores[member]
        self.scan_index = None
        return [(member, score) for score, member in taken]

    def note_growth(self, limits: tuple[int, int], members: Iterable[bytes]) -> None:
        """Convert to skiplist (for good) once the size or a member length passes the limits."""
        if self.skiplist:
            return
        entries, value_len = limits
        if len(self.scores) > entries or any(len(member) > value_len for member in members):
            self.skiplist = True

    # -- reads -------------------------------------------------------------------------

    def rank(self, member: bytes, reverse: bool = False) -> int | None:
        score = self.scores.get(member)
        if score is None:
            return None
        rank = self.order.bisect_left((score, member))
        return len(self.order) - 1 - rank if reverse else rank

    def score_span(self, spec: ScoreRange) -> tuple[int, int]:
        """Ranks [start, stop) of the pairs whose scores are inside ``spec``."""
        order = self.order
        if spec.empty() or not order:
            return 0, 0
        if spec.low_ex:
            start = len(order) if spec.low == INF else order.bisect_left((math.nextafter(spec.low, INF),))
        else:
            start = order.bisect_left((spec.low,))
        if spec.high_ex:
            stop = order.bisect_left((spec.high,))
        else:
            stop = len(order) if spec.high == INF else order.bisect_left((math.nextafter(spec.high, INF),))
        return start, max(start, stop)

    def lex_span(self, spec: LexRange, reverse: bool = False) -> tuple[int, int]:
        """Ranks [start, stop) of the members inside ``spec`` (as Redis walks them)."""
        order = self.order
        size = len(order)
        if spec.empty() or not size:
            return 0, 0
        first, last = order[0], order[-1]
        if first[0] == last[0]:
            return self._lex_bisect(spec, first[0])
        if not spec.above_low(last[1]) or not spec.below_high(first[1]):
            return 0, 0
        members = [member for _, member in order]
        if not reverse:
            start = next(i for i, member in enumerate(members) if spec.above_low(member))
            stop = start
            while stop < size and spec.below_high(members[stop]):
                stop += 1
            return start, stop
        stop = next(i for i in range(size - 1, -1, -1) if spec.below_high(members[i])) + 1
        start = stop
        while start > 0 and spec.above_low(members[start - 1]):
            start -= 1
        return start, stop

    def _lex_bisect(self, spec: LexRange, score: float) -> tuple[int, int]:
        order = self.order
        low, high = spec.low, spec.high
        if low is MINUS:
            start = 0
        elif low is PLUS:
            start = len(order)
        else:
            start = order.bisect_right((score, low)) if spec.low_ex else order.bisect_left((score, low))
        if high is PLUS:
            stop = len(order)
        elif high is MINUS:
            stop = 0
        else:
            stop = order.bisect_left((score, high)) if spec.high_ex else order.bisect_right((score, high))
        return start, max(start, stop)

    def scan(self, cursor: int, count: int) -> tuple[int, list[tuple[bytes, float]]]:
        """ZSCAN: a listpack-sized set whole (cursor 0), else a page in member-hash order,
        so members present for the whole scan are all returned whatever changes between calls."""
        if not self.skiplist:
            return 0, [(member, score) for score, member in self.order]
        if self.scan_index is None:
            self.scan_index = ScanIndex(self.scores)
        cursor, members = self.scan_index.page(cursor, count)
        scores = self.scores
        return cursor, [(member, scores[member]) for member in members if member in scores]

    def span(self, start: int, stop: int, reverse: bool = False) -> list[tuple[float, bytes]]:
        """Pairs at ranks [start, stop), in reverse order if asked."""
        return list(self.order.islice(start, stop, reverse=reverse))


_limits_cache: list = [None, (128, 64)]


def zset_limits(settings: object) -> tuple[int, int]:
    """(zset-max-listpack-entries, zset-max-listpack-value), cached per settings object."""
    if _limits_cache[0] is not settings:
        _limits_cache[1] = (
            threshold(settings, "zset-max-listpack-entries"),
            threshold(settings, "zset-max-listpack-value"),
        )
        _limits_cache[0] = settings
    return _limits_cache[1]


def _encoding(value: ZSetValue, settings: object) -> str:
    return "skiplist" if value.skiplist else "listpack"


def _dump(value: ZSetValue) -> bytes:
    members = [member for _, member in value.order]
    scores = [score for score, _ in value.order]
    return pack_tree([members, scores, int(value.skiplist)])


def _load(body: bytes) -> ZSetValue:
    tree = unpack_tree(body)
    if not isinstance(tree, list) or len(tree) != 3 or len(tree[0]) != len(tree[1]):
        raise PayloadError("bad zset payload")
    members, scores, skiplist = tree
    if any(m.__class__ is not bytes for m in members) or any(s.__class__ is not float or s != s for s in scores):
        raise PayloadError("bad zset element")
    zset = ZSetValue()
    zset.scores = dict(zip(members, scores, strict=True))
    zset.order = SortedList(zip(scores, members, strict=True))
    zset.skiplist = bool(skiplist)
    zset.scan_index = None
    return zset


def _size(value: ZSetValue) -> int:
    """MEMORY USAGE: the member -> score dict, plus per pair a tuple, a float and list slots."""
    count = len(value.scores)
    if not count:
        return 200
    sample = [member for _, member in value.order.islice(0, 5)]
    member_bytes = sum(map(sys.getsizeof, sample)) // len(sample)
    return 200 + sys.getsizeof(value.scores) + count * (member_bytes + 24 + 56 + 16)


register_type(ZSetValue, "zset")
register_sizer(ZSetValue, _size)
register_encoding(ZSetValue, _encoding)
register_codec(ZSetValue, 5, _dump, _load)
