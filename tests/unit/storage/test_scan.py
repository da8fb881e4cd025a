"""KeyTable (the SCAN index): the reverse-binary cursor returns every key that stays present,
across growth and shrinkage between calls; parse_cursor reads cursors as Redis's strtoul."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.protocol.errors import ReplyError
from pion.storage.scan import KeyTable, parse_cursor


def test_full_walk_visits_every_key_once_without_changes():
    table = KeyTable(b"k%d" % i for i in range(1000))
    seen: list[bytes] = []
    cursor = 0
    while True:
        cursor, keys = table.scan(cursor, 10)
        seen.extend(keys)
        if cursor == 0:
            break
    assert sorted(seen) == sorted(b"k%d" % i for i in range(1000))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), start=st.integers(0, 300), steps=st.lists(st.integers(-150, 150), max_size=40))
def test_keys_present_throughout_are_returned(seed, start, steps):
    rng = random.Random(seed)
    stable = {b"s%d" % i for i in range(start)}
    table = KeyTable(stable)
    extra: list[bytes] = []
    seen: set[bytes] = set()
    cursor, n = 0, 0
    for delta in steps + [0] * 10_000:
        cursor, keys = table.scan(cursor, rng.choice([1, 3, 10]))
        seen.update(keys)
        if cursor == 0:
            break
        if delta > 0:
            for _ in range(delta):
                n += 1
                extra.append(b"x%d" % n)
                table.add(extra[-1])
        for _ in range(min(-delta, len(extra))):
            table.discard(extra.pop(rng.randrange(len(extra))))
    assert stable <= seen


def test_table_resizes_both_ways():
    table = KeyTable()
    for i in range(5000):
        table.add(b"k%d" % i)
    assert len(table.buckets) >= 2048
    for i in range(4990):
        table.discard(b"k%d" % i)
    assert len(table) == 10 and len(table.buckets) <= 128
    table.discard(b"absent")
    assert len(table) == 10


def test_random_key_draws_from_all_keys():
    table = KeyTable([b"a", b"b", b"c"])
    assert {table.random_key() for _ in range(200)} == {b"a", b"b", b"c"}
    assert KeyTable().random_key() is None


@pytest.mark.parametrize(("raw", "value"), [
    (b"0", 0), (b"", 0), (b"+7", 7), (b"-0", 0), (b"-1", 2**64 - 1),
    (b"18446744073709551615", 2**64 - 1), (b"007", 7),
])
def test_cursor_parsing(raw, value):
    assert parse_cursor(raw) == value


@pytest.mark.parametrize("raw", [b" 1", b"1 ", b"x", b"1.0", b"-", b"+", b"18446744073709551616", b"0x10", b"1e3"])
def test_bad_cursors(raw):
    with pytest.raises(ReplyError, match="invalid cursor"):
        parse_cursor(raw)
