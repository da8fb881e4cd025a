"""JSON texts read as RedisJSON's serde_json reads them: every answer recorded from Redis Stack
7.4.1 (RedisJSON 2.8.3, ``data/json_serde_stack.json``: ``JSON.SET k $ <text>`` then ``JSON.GET``)
must be Pion's too, the error texts with their line and column included. The live comparison
against a running Redis Stack is the ``json_bad_input`` case of ``tests/search/stack_diff.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pion.storage import json_serde
from pion.storage.json_value import JsonError, dumps, loads

RECORDED = json.loads((Path(__file__).parent / "data" / "json_serde_stack.json").read_text())
#: RedisJSON 2.8's serde_json builds a float as mantissa x 10^exponent in two roundings (no
#: float_roundtrip): 23e40 reads 2.3000000000000002e41 there; Pion keeps the correctly rounded
#: value (docs/compat-differences.md)
ROUNDED_DIFFERENTLY = {"23e40"}


def _pion(text: str) -> str:
    try:
        return "OK:" + dumps(loads(text))
    except JsonError as exc:
        return "ERR:" + str(exc)


@pytest.mark.parametrize("group", ["curated", "fuzzed"])
def test_every_recorded_answer_of_redisjson_is_pions(group):
    wrong = {text: (want, _pion(text)) for text, want in RECORDED[group].items()
             if text not in ROUNDED_DIFFERENTLY and _pion(text) != want}
    assert not wrong, list(wrong.items())[:10]
    assert len(RECORDED[group]) >= 100


@pytest.mark.parametrize(("text", "value"), [
    ("[1]x", [1]), ("1 2", 1), ('{"a":1}}', {"a": 1}), ("0x10", 0), ("truex", True),
    ("-0", -0.0), ("18446744073709551615", 18446744073709551615), ("18446744073709551616", 1.8446744073709552e19),
    ("-9223372036854775809", -9.223372036854776e18), ('"\\ud83d\\ude00"', "\U0001F600"), ("1e-400", 0.0),
])
def test_the_first_value_is_read_as_serde_reads_it(text, value):
    got = loads(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("text", "error"), [
    ("[" * 128 + "]" * 128, "recursion limit exceeded at line 1 column 128"),
    ('"\\ud800"', "unexpected end of hex escape at line 1 column 8"),
    ("1e400", "number out of range at line 1 column 5"),
    ("1" + "0" * 400, "number out of range at line 1 column 401"),
    ("{\n\"a\"\n:\n1\n,\n}", "trailing comma at line 6 column 1"),
    ('"\u00e9\x01"', "control character (\\u0000-\\u001F) found while parsing a string at line 1 column 4"),
])
def test_refusals_name_serdes_position_in_bytes(text, error):
    with pytest.raises(JsonError) as exc:
        loads(text)
    assert str(exc.value) == error


def test_127_levels_are_accepted_and_a_long_document_keeps_the_fast_path():
    assert json_serde.first_value_end(b"[" * 127 + b"]" * 127) == 254
    deep = "[" * 127 + "]" * 127
    assert dumps(loads(deep)) == deep
    doc = json.dumps({"v": [0.5 + i for i in range(2000)], "n": -0.25})
    assert loads(doc) == json.loads(doc)
