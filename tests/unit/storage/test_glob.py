"""glob_match: Redis stringmatchlen semantics, and no exponential blow-up on many stars."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from pion.storage.glob import glob_match


def _reference(pattern: bytes, value: bytes) -> bool:
    """Plain backtracking over the pattern, small inputs only (no classes or escapes)."""
    if not pattern:
        return not value
    if pattern[:1] == b"*":
        return any(_reference(pattern[1:], value[i:]) for i in range(len(value) + 1))
    if not value:
        return False
    if pattern[:1] == b"?" or pattern[:1] == value[:1]:
        return _reference(pattern[1:], value[1:])
    return False


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=8).map(lambda b: bytes(b"ab*?"[x % 4] for x in b)),
       st.binary(max_size=10).map(lambda b: bytes(b"ab"[x % 2] for x in b)))
def test_glob_matches_a_plain_backtracking_reference(pattern, value):
    assert glob_match(pattern, value) == _reference(pattern, value)


def test_glob_classes_escapes_and_nocase():
    assert glob_match(b"h[ae]llo", b"hallo") and not glob_match(b"h[ae]llo", b"hillo")
    assert glob_match(b"h[^e]llo", b"hallo") and not glob_match(b"h[^e]llo", b"hello")
    assert glob_match(b"h[a-b]llo", b"hbllo") and glob_match(b"h[b-a]llo", b"hbllo")
    assert glob_match(b"a\\*b", b"a*b") and not glob_match(b"a\\*b", b"axb")
    assert glob_match(b"*.txt", b"notes.txt") and not glob_match(b"*.txt", b"notes.txt2")
    assert glob_match(b"user:*:name", b"user:12:name") and not glob_match(b"user:*:name", b"user:12")
    assert glob_match(b"HELLO*", b"hello world", nocase=True)
    assert glob_match(b"a*b*c", b"abc") and not glob_match(b"a*b*c", b"acb")
    assert glob_match(b"*", b"") and glob_match(b"**", b"x") and not glob_match(b"?", b"")
    assert glob_match(b"a\nb*", b"a\nbc")


def test_many_stars_against_a_long_value_are_fast():
    pattern = b"a*" * 20 + b"b"
    start = time.perf_counter()
    assert not glob_match(pattern, b"a" * 40)
    assert not glob_match(pattern, b"a" * 4000)
    assert glob_match(pattern, b"a" * 40 + b"b")
    assert time.perf_counter() - start < 1.0
