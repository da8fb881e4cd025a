"""The list type: a deque of bytes, plus what OBJECT ENCODING needs to name it as Redis would.

Redis 7.2 keeps a small list in one listpack and converts it to a quicklist when a push would
make it exceed ``list-max-listpack-size``; it converts back only after shrinking below half the
limit. We keep the deque (O(1) at both ends) and track the listpack byte size Redis would have,
so ``quick`` flips at the same points. Handlers pass the live fill setting to ``grew``/``shrank``.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable

from pion.storage.encodings import register_encoding, threshold
from pion.storage.keyspace import register_type
from pion.storage.memory import register_sizer
from pion.storage.serialize import PayloadError, pack_tree, register_codec, unpack_tree

#: listpack size limits for list-max-listpack-size -1 .. -5 (quicklist.c optimization_level)
_SIZE_LEVELS = (4096, 8192, 16384, 32768, 65536)
#: a count-limited node may still not pass this many bytes (quicklist SIZE_SAFETY_LIMIT)
_SAFETY_LIMIT = 8192
#: listpack header (total bytes + count) and end marker
_LP_OVERHEAD = 7


def node_limits(fill: int) -> tuple[float, float]:
    """(byte limit, entry limit) of one listpack for a list-max-listpack-size value."""
    if fill >= 0:
        return float("inf"), float(fill or 1)
    return float(_SIZE_LEVELS[min(-fill - 1, len(_SIZE_LEVELS) - 1)]), float("inf")


def _exceeds(fill: int, size: int, count: int) -> bool:
    byte_limit, count_limit = node_limits(fill)
    if fill < 0:
        return size > byte_limit
    return size > _SAFETY_LIMIT or count > count_limit


def entry_size(value: bytes) -> int:
    """Bytes one element takes in a listpack (integers are stored compactly)."""
    size = len(value)
    if 0 < size <= 20 and value[0] in b"-0123456789":
        number = _canonical_int(value)
        if number is not None:
            if 0 <= number <= 127:
                return 2
            for bits, width in ((13, 2), (16, 3), (24, 4), (32, 5)):
                if -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
                    return width + 1
            return 10
    encoded = size + (1 if size < 64 else 2 if size < 4096 else 5)
    return encoded + (1 if encoded < 128 else 2 if encoded < 16384 else 3 if encoded < 2097152 else 5)


def _canonical_int(value: bytes) -> int | None:
    try:
        number = int(value)
    except ValueError:
        return None
    if b"%d" % number != value or not -(2**63) <= number < 2**63:
        return None
    return number


class ListValue:
    """A Redis list. ``items`` is public: handlers index, slice and rotate the deque directly,
    then call ``grew``/``shrank`` so the encoding bookkeeping follows."""

    __slots__ = ("items", "nbytes", "quick")

    def __init__(self, items: Iterable[bytes] = (), quick: bool = False) -> None:
        self.items: deque[bytes] = deque(items)
        self.nbytes = _LP_OVERHEAD + sum(map(entry_size, self.items))
        self.quick = quick

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def dup(self) -> ListValue:
        """COPY: an independent list (elements are immutable bytes, so a shallow copy)."""
        copy = ListValue.__new__(ListValue)
        copy.items, copy.nbytes, copy.quick = deque(self.items), self.nbytes, self.quick
        return copy

    def push(self, values: list[bytes], left: bool, fill: int) -> int:
        """LPUSH/RPUSH: the list converts before the push if the push would overflow it."""
        if not self.quick and _exceeds(fill, self.nbytes + sum(map(len, values)), len(self.items) + len(values)):
            self.quick = True
        if left:
            self.items.extendleft(values)
        else:
            self.items.extend(values)
        self.nbytes += sum(map(entry_size, values))
        return len(self.items)

    def pop(self, left: bool) -> bytes:
        value = self.items.popleft() if left else self.items.pop()
        self.nbytes -= entry_size(value)
        return value

    def grew(self, fill: int) -> None:
        """For a list built in one go (SORT STORE): recount, convert if too big for a listpack."""
        self.recount()
        self.adjust(0, fill)

    def adjust(self, delta: int, fill: int) -> None:
        """After an edit in place that changed the listpack size by ``delta`` bytes."""
        self.nbytes += delta
        if not self.quick and _exceeds(fill, self.nbytes, len(self.items)):
            self.quick = True

    def shrank(self, fill: int) -> None:
        """After removals: a quicklist that fits in half a listpack goes back to a listpack."""
        if not self.quick:
            return
        byte_limit, count_limit = node_limits(fill)
        if len(self.items) <= count_limit / 2 and self.nbytes <= byte_limit / 2:
            self.quick = False

    def recount(self) -> None:
        self.nbytes = _LP_OVERHEAD + sum(map(entry_size, self.items))


_fill_cache: list = [None, -2]


def list_fill(settings: object) -> int:
    """list-max-listpack-size of these settings (cached: settings objects are frozen)."""
    if _fill_cache[0] is not settings:
        _fill_cache[1] = threshold(settings, "list-max-listpack-size")
        _fill_cache[0] = settings
    return _fill_cache[1]


def _encoding(value: ListValue, settings: object) -> str:
    return "quicklist" if value.quick else "listpack"


def _dump(value: ListValue) -> bytes:
    return pack_tree([list(value.items), int(value.quick)])


def _load(body: bytes) -> ListValue:
    tree = unpack_tree(body)
    if not isinstance(tree, list) or len(tree) != 2 or not isinstance(tree[0], list):
        raise PayloadError("bad list payload")
    if not all(item.__class__ is bytes for item in tree[0]):
        raise PayloadError("bad list element")
    return ListValue(tree[0], bool(tree[1]))


def _size(value: ListValue) -> int:
    """MEMORY USAGE: deque blocks (a pointer an element) plus sampled element sizes."""
    items = value.items
    if not items:
        return 120
    sample = (items[0], items[-1], items[len(items) // 2])
    return 120 + len(items) * (8 + sum(map(sys.getsizeof, sample)) // 3)


register_type(ListValue, "list")
register_sizer(ListValue, _size)
register_encoding(ListValue, _encoding)
register_codec(ListValue, 3, _dump, _load)
