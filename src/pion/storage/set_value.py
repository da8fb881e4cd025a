"""Set values: a Python ``set`` of members plus the encoding Redis 7.2+ would report.

Redis starts a set as intset (integers only) or listpack, and converts to hashtable when a
threshold is crossed (set-max-intset-entries, set-max-listpack-entries/value); a set never
converts back. ``SetValue`` tracks that state so OBJECT ENCODING answers as Redis does, and so
SSCAN returns a small set in one call, as Redis does for its compact encodings.

Also here: ``ScanIndex``, the cursor for scanning big hashes and sets. A member's cursor is a
fixed 63-bit hash of it; a page returns members in hash order from the cursor on, so every
member present for the whole scan is returned, whatever changes between calls.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Iterable

from pion.storage import encodings, serialize
from pion.storage.keyspace import register_type

INTSET, LISTPACK, HASHTABLE = "intset", "listpack", "hashtable"
_MASK63 = (1 << 63) - 1
_INT_START = frozenset(b"-0123456789")

#: (set-max-intset-entries, set-max-listpack-entries, set-max-listpack-value)
Limits = tuple[int, int, int]


def is_int64(member: bytes) -> bool:
    """True if Redis would store ``member`` in an intset (canonical signed 64-bit decimal)."""
    if not member or len(member) > 20 or member[0] not in _INT_START:
        return False
    try:
        number = int(member)
    except ValueError:
        return False
    return -(2**63) <= number < 2**63 and str(number).encode() == member


class ScanIndex:
    """Members sorted by their scan key, built when a scan starts and dropped on any change."""

    __slots__ = ("keys", "members")

    def __init__(self, members: Iterable[bytes]) -> None:
        pairs = sorted(((hash(m) & _MASK63) + 1, m) for m in members)
        self.keys = [key for key, _ in pairs]
        self.members = [member for _, member in pairs]

    def page(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        keys = self.keys
        start = bisect_left(keys, cursor)
        stop = min(start + count, len(keys))
        while 0 < stop < len(keys) and keys[stop] == keys[stop - 1]:
            stop += 1  # never split members that share a key
        return (keys[stop] if stop < len(keys) else 0), self.members[start:stop]


class SetValue:
    """A set of byte strings."""

    __slots__ = ("members", "encoding", "scan_index", "pool")

    def __init__(self, members: set[bytes] | None = None, encoding: str = LISTPACK) -> None:
        self.members: set[bytes] = members if members is not None else set()
        self.encoding = encoding
        self.scan_index: ScanIndex | None = None
        #: a superset of ``members`` as a list, for O(1) random picks (dropped when one is added)
        self.pool: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.members)

    def copy(self) -> SetValue:
        return SetValue(set(self.members), self.encoding)

    __copy__ = dup = copy

    def __deepcopy__(self, memo: dict) -> SetValue:
        return self.copy()

    @classmethod
    def create(cls, first: bytes, hint: int, limits: Limits) -> SetValue:
        """setTypeCreate: intset for an integer, listpack when the hint is small, else hashtable."""
        if is_int64(first) and hint <= limits[0]:
            return cls(encoding=INTSET)
        return cls(encoding=LISTPACK if hint <= limits[1] else HASHTABLE)

    @classmethod
    def from_members(cls, members: set[bytes], limits: Limits) -> SetValue:
        """A result set (SINTERSTORE ...), encoded as adding its members one by one would."""
        intset_max, entries, longest = limits
        if len(members) <= intset_max and all(is_int64(m) for m in members):
            encoding = INTSET
        elif len(members) <= entries and all(len(m) <= longest for m in members):
            encoding = LISTPACK
        else:
            encoding = HASHTABLE
        return cls(members, encoding)

    def reserve(self, hint: int, limits: Limits) -> None:
        """setTypeMaybeConvert: a big SADD converts before adding."""
        if (self.encoding == LISTPACK and hint > limits[1]) or (self.encoding == INTSET and hint > limits[0]):
            self.encoding = HASHTABLE

    def add_many(self, items: Iterable[bytes], limits: Limits) -> int:
        members = self.members
        before = len(members)
        if self.encoding == HASHTABLE:
            members.update(items)
        else:
            for item in items:
                if item not in members:
                    self._convert_for(item, limits)
                    members.add(item)
        added = len(members) - before
        if added:
            self.scan_index = None
            self.pool = None
        return added

    def _convert_for(self, item: bytes, limits: Limits) -> None:
        intset_max, entries, longest = limits
        size = len(self.members)
        if self.encoding == INTSET:
            if is_int64(item):
                if size + 1 > intset_max:
                    self.encoding = HASHTABLE
                return
            widest = max((len(m) for m in self.members), default=0)
            fits = size < entries and len(item) <= longest and widest <= longest
            self.encoding = LISTPACK if fits else HASHTABLE
        elif self.encoding == LISTPACK and (size >= entries or len(item) > longest):
            self.encoding = HASHTABLE

    def remove_many(self, items: Iterable[bytes]) -> int:
        members = self.members
        before = len(members)
        members.difference_update(items)
        removed = before - len(members)
        if removed:
            self.scan_index = None
        return removed

    # -- random members: a pick from ``pool``, retried while it hits a removed member --------

    def _pool(self) -> list[bytes]:
        pool = self.pool
        if pool is None or len(pool) > 2 * len(self.members) + 8:
            pool = self.pool = list(self.members)
        return pool

    def random_member(self) -> bytes:
        pool, members = self._pool(), self.members
        while True:
            member = pool[random.randrange(len(pool))]
            if member in members:
                return member

    def random_repeats(self, count: int) -> list[bytes]:
        """``count`` uniform picks with repetition (SRANDMEMBER with a negative count)."""
        pool = self._pool()
        if len(pool) == len(self.members):
            return random.choices(pool, k=count)
        return [self.random_member() for _ in range(count)]

    def random_distinct(self, count: int) -> list[bytes]:
        """``count`` distinct members (fewer than the set holds), in random order."""
        if count * 3 > len(self.members):
            return random.sample(list(self.members), count)
        chosen: dict[bytes, None] = {}
        while len(chosen) < count:
            chosen[self.random_member()] = None
        return list(chosen)

    def pop_random(self, count: int) -> list[bytes]:
        """Remove and return ``count`` random members (all of them if there are fewer)."""
        if count >= len(self.members):
            popped = list(self.members)
            self.members.clear()
        else:
            popped = self.random_distinct(count)
            self.members.difference_update(popped)
        self.scan_index = None
        return popped

    def scan(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        if self.encoding != HASHTABLE:
            return 0, list(self.members)
        if self.scan_index is None:
            self.scan_index = ScanIndex(self.members)
        return self.scan_index.page(cursor, count)


_limits_cache: list = [None, None]


def set_limits(settings: object) -> Limits:
    """The three thresholds for ``settings`` (cached: settings objects are immutable)."""
    if _limits_cache[0] is not settings:
        _limits_cache[1] = (
            encodings.threshold(settings, "set-max-intset-entries"),
            encodings.threshold(settings, "set-max-listpack-entries"),
            encodings.threshold(settings, "set-max-listpack-value"),
        )
        _limits_cache[0] = settings
    return _limits_cache[1]


def _dump(value: SetValue) -> bytes:
    return serialize.pack_tree([value.encoding.encode(), list(value.members)])


def _load(body: bytes) -> SetValue:
    encoding, members = serialize.unpack_tree(body)
    value = SetValue(set(members), encoding.decode())
    if value.encoding == INTSET and not all(is_int64(m) for m in value.members):
        value.encoding = HASHTABLE
    return value


register_type(SetValue, "set")
encodings.register_encoding(SetValue, lambda value, settings: value.encoding)
serialize.register_codec(SetValue, 4, _dump, _load)
