"""FILTER expressions against Redis 8's documented behaviour: the README's examples and the
expectations of Redis's own vector-set tests (filter_expr, filter_string_escape,
filter_double_not), written here as (expression, attributes, expected) rows, plus the error
positions Redis reports ("syntax error in FILTER expression near: ...")."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.vector.vset.attrs import parse_attributes
from pion.vector.vset.expr import NULL, CompileError, compile_filter

ALICE = {"age": 25, "name": "Alice", "active": True, "scores": [85, 90, 95], "city": "New York"}
BOB = {"age": 30, "name": "Bob", "active": False, "scores": [70, 75, 80], "city": "Boston"}
CHARLIE = {"age": 35, "name": "Charlie", "scores": [60, 65, 70], "city": "Seattle"}
MOVIE = {"year": 1984, "genre": "action", "rating": 8.5, "director": "Nolan"}


def matches(expr: str, attrs) -> bool:
    raw = attrs if isinstance(attrs, (bytes, type(None))) else json.dumps(attrs).encode()
    fields = parse_attributes(raw) if raw is not None else None
    return compile_filter(expr.encode()).matches(fields)


# (expression, attributes, expected): the README's examples and filter_expr.py's assertions
DOCUMENTED = [
    (".year > 1950", {"year": 1951}, True),
    (".year > 1950", {"year": 1950}, False),
    (".year >= 1980 and .year < 1990", MOVIE, True),
    ('.genre == "action" and .rating > 8.0', MOVIE, True),
    ('.director in ["Spielberg", "Nolan"]', MOVIE, True),
    ('.director in ["Spielberg", "Lucas"]', MOVIE, False),
    ("(.year - 2000) ** 2 < 100 and .rating / 2 > 4", {"year": 2005, "rating": 9}, True),
    ("(.year - 2000) ** 2 < 100 and .rating / 2 > 4", MOVIE, False),
    ("5 in [1, 2, 3]", {}, False),
    ('"foo" in [1, "foo", "bar"]', {}, True),
    ('"foo" in "barfoobar"', {}, True),
    ('"zap" in "foobar"', {}, False),
    (".age == 25", ALICE, True),
    (".age > 25", BOB, True),
    (".age <= 30", CHARLIE, False),
    ('.name == "Alice"', ALICE, True),
    ('.name != "Alice"', BOB, True),
    (".active", ALICE, True),
    (".active", BOB, False),
    (".active", CHARLIE, False),  # missing field: no match
    (".age > 20 and .age < 30", ALICE, True),
    (".age < 30 or .age > 35", CHARLIE, False),
    ("!(.age == 25)", BOB, True),
    ("!(.age == 25)", ALICE, False),
    (".age in [25, 35]", CHARLIE, True),
    ('.name in ["Alice", "David"]', BOB, False),
    ('"lic" in .name', ALICE, True),
    ('"ork" in .city', ALICE, True),
    ('"xyz" in .name', ALICE, False),
    ('"Ali" in .name', ALICE, True),
    ('"ice" in .name', ALICE, True),
    ('"Alice" in .name', ALICE, True),
    ('"A" in .name', ALICE, True),
    ('"" in .name', BOB, True),
    ('.name in ""', ALICE, False),
    ('"" in .name && "" in ""', CHARLIE, True),
    (".age + 10 > 40", CHARLIE, True),
    (".age * 2 > 60", BOB, False),
    (".age / 5 == 5", ALICE, True),
    (".age % 2 == 0", BOB, True),
    (".age ** 2 > 900", CHARLIE, True),
    ('.missing_field == "value"', ALICE, False),
    (".any_field", None, False),  # no attributes at all
    (".any_field", b"invalid json", False),
    ('(.age > 20 and .age < 40) and (.city == "Boston" or .city == "New York")', BOB, True),
    ('(.age > 20 and .age < 40) and (.city == "Boston" or .city == "New York")', CHARLIE, False),
    (".age > (20 + 10)", CHARLIE, True),
    (".scores", ALICE, True),  # arrays are true
    # filter_double_not.py
    ("!!.active", {"active": True}, True),
    ("not not .active", {"active": True}, True),
    ("!!!.active", {"active": False}, True),
    ("!!.n == 1", {"n": 5}, True),
    ("!!.n == 1", {"n": 0}, False),
    ("!.active or !!.active", {"active": False}, True),
    (".n > 1 and not not .active", {"n": 5, "active": True}, True),
    # the operator table's grouping: ** right to left, unary minus after an operator
    ("2 ** 3 ** 2 == 512", {}, True),
    ("(5+2)*3 and .year > 1980 and 'foo' == 'foo'", MOVIE, True),
    (".x > -1", {"x": 0}, True),
    ("(.x) -1 == 4", {"x": 5}, True),
    # values: null, strings as numbers, objects are not usable
    (".v == null", {"v": None}, True),
    (".v == null", {"v": 0}, False),
    (".v", {"v": None}, False),
    ('.v == 10', {"v": "10"}, True),
    ('.v > 5', {"v": "abc"}, False),
    (".o", {"o": {"nested": 1}}, False),
    (".a in [1, 2]", {"a": [1, {"x": 1}]}, False),
]


@pytest.mark.parametrize(("expr", "attrs", "expected"), DOCUMENTED)
def test_documented_examples(expr, attrs, expected):
    assert matches(expr, attrs) is expected


def test_string_escapes_as_filter_string_escape_py():
    item1 = b'{"dq": "a\\"b", "sq": "O\'Brien", "bs": "x\\\\y", "nl": "l1\\nl2"}'
    item2 = b'{"dq": "ab", "sq": "OBrien", "bs": "xy", "nl": "l1l2"}'
    for expr in ['.dq == "a\\"b"', ".sq == 'O\\'Brien'", '.bs == "x\\\\y"', '.nl == "l1\\nl2"',
                 '"\\"b" in .dq', '.dq in ["zzz", "a\\"b"]', "'a\"b' == .dq", '.sq == "O\'Brien"']:
        assert matches(expr, item1), expr
        assert not matches(expr, item2), expr


# (expression, the text Redis shows after "near: ")
ERRORS = [
    ("1e-5", "-5"),            # '-' only starts a number: "1e" is not one
    ("foo == 1", " == 1"),     # no operator spelled "foo"
    (".a = 1", " 1"),          # a single "=" is not an operator: the error is after it
    ("$x > 1", "$x > 1"),      # not a token at all
    ('.a == "abc', '.a == "abc'),  # unterminated string: error at the end, shown from 0
    ("(1", "(1"),              # unbalanced: found after tokenizing, shown from 0
    ("1)", "1)"),
    (".a ==", ".a =="),        # an operator without its operand
    ("1 2", "1 2"),            # two values left on the stack
    ("[1, x]", "x]"),
    ("nullx", ""),
]


@pytest.mark.parametrize(("expr", "near"), ERRORS)
def test_errors_point_where_redis_points(expr, near):
    with pytest.raises(CompileError) as caught:
        compile_filter(expr.encode())
    pos = caught.value.pos
    shown = expr.encode()[pos:] if pos < len(expr) else expr.encode()
    if near:
        assert shown == near.encode()


def test_attribute_values_follow_fastjson():
    fields = parse_attributes(b'{"n": 1, "b": true, "f": false, "z": null, "s": "x", "a": [1, "y"], "o": {"k": 1}, "n": 2}')
    assert fields == {b"n": 1.0, b"b": 1.0, b"f": 0.0, b"z": NULL, b"s": b"x", b"a": (1.0, b"y")}
    assert parse_attributes(b"[1, 2]") is None
    assert parse_attributes(b"{bad") is None
    assert parse_attributes(b'{"x": NaN}') is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=' .abnotir0123456789-+*/%!()<>=|&[]",\'\\e', max_size=30))
def test_any_text_compiles_or_fails_cleanly_and_never_raises_at_match_time(text):
    try:
        flt = compile_filter(text.encode())
    except CompileError as exc:
        assert 0 <= exc.pos <= len(text.encode())
        return
    for attrs in ({}, {"a": 1, "b": "x", "n": None, "t": [1, "q"]}, {"a": "1e3", "b": 0, "n": 2, "t": 3}):
        assert flt.matches(parse_attributes(json.dumps(attrs).encode())) in (True, False)
