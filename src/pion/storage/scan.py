"""The SCAN cursor structure: keys in 2**n hash buckets walked with Redis's reverse-binary cursor.

SCAN promises that a full iteration returns every key present from its start to its end, even
while keys come and go between calls. Redis gets this from its dict: the cursor is a bucket
index whose bits are incremented from the top (reverse binary), so a table that grows or
shrinks between two calls only repeats buckets, never skips one. A Python dict has no stable
positions, so ``KeyTable`` keeps the keys of a dict in such buckets beside it (the keyspace
builds one on the first SCAN or RANDOMKEY and keeps it in step afterwards). The hash and
container SCAN variants may use it for their own members too.

Imports only ``pion.protocol`` (for the cursor error text).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from pion.protocol.errors import ReplyError

INVALID_CURSOR = "ERR invalid cursor"
_MIN_BUCKETS = 4
_U64 = 2**64


def parse_cursor(raw: bytes) -> int:
    """A cursor as Redis's strtoul reads it: decimal, optional sign, no leading space.

    ``-1`` wraps to 2**64-1 and an empty string is 0, exactly as in Redis 7.0.
    """
    if not raw:
        return 0
    text, sign = raw, 1
    if text[:1] in (b"+", b"-"):
        sign = -1 if text[:1] == b"-" else 1
        text = text[1:]
    if not text.isdigit():
        raise ReplyError(INVALID_CURSOR)
    value = int(text)
    if value >= _U64:
        raise ReplyError(INVALID_CURSOR)
    return (sign * value) % _U64


def _reverse(value: int, bits: int) -> int:
    return int(format(value, f"0{bits}b")[::-1], 2) if bits else 0


def _capacity_for(size: int) -> int:
    capacity = _MIN_BUCKETS
    while capacity < size:
        capacity *= 2
    return capacity


class KeyTable:
    """A set of keys in ``2**n`` lists chosen by ``hash(key) & mask``.

    The load factor stays between 1/8 and 2 (resizes rebuild the table at once; cursors stay
    valid across resizes, which is the point of the reverse-binary walk).
    """

    __slots__ = ("buckets", "mask", "size")

    def __init__(self, keys: Iterable[bytes] = ()) -> None:
        items = list(keys)
        self.size = len(items)
        self._fill(items, _capacity_for(self.size))

    def __len__(self) -> int:
        return self.size

    def nbytes(self) -> int:
        """About what the table holds in memory (measured: a list per bucket, a pointer per
        key): the keyspace counts it against maxmemory once eviction or SCAN has built it."""
        return len(self.buckets) * 76 + self.size * 16

    def _fill(self, items: list[bytes], capacity: int) -> None:
        buckets: list[list[bytes]] = [[] for _ in range(capacity)]
        mask = capacity - 1
        for key in items:
            buckets[hash(key) & mask].append(key)
        self.buckets = buckets
        self.mask = mask

    def _resize(self, capacity: int) -> None:
        self._fill([key for bucket in self.buckets for key in bucket], capacity)

    def add(self, key: bytes) -> None:
        """Add a key the table does not hold yet (the caller knows it is new)."""
        self.buckets[hash(key) & self.mask].append(key)
        self.size += 1
        if self.size > 2 * len(self.buckets):
            self._resize(_capacity_for(self.size))

    def discard(self, key: bytes) -> None:
        bucket = self.buckets[hash(key) & self.mask]
        try:
            bucket.remove(key)
        except ValueError:
            return
        self.size -= 1
        if len(self.buckets) > _MIN_BUCKETS and self.size * 8 < len(self.buckets):
            self._resize(_capacity_for(self.size))

    def scan(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        """Visit buckets from ``cursor`` until ``count`` keys were collected (or 10*count
        buckets were visited, as Redis bounds work on sparse tables); 0 means done."""
        mask = self.mask
        bits = mask.bit_length()
        buckets = self.buckets
        out: list[bytes] = []
        visits = max(count, 1) * 10
        cursor &= mask
        while True:
            out.extend(buckets[cursor])
            step = _reverse(cursor, bits) + 1
            cursor = 0 if step >> bits else _reverse(step, bits)
            visits -= 1
            if cursor == 0 or len(out) >= count or visits <= 0:
                return cursor, out

    def random_key(self) -> bytes | None:
        """A random key: pick non-empty buckets at random (load >= 1/8 keeps this O(1))."""
        if not self.size:
            return None
        buckets = self.buckets
        mask = self.mask
        while True:
            bucket = buckets[random.getrandbits(mask.bit_length()) & mask if mask else 0]
            if bucket:
                return bucket[random.randrange(len(bucket))]
