"""TEXT terms and TAG values are case-folded as the Query Engine of Redis 8 folds them (Unicode full
case folding: ``ß`` and ``ẞ`` are ``ss``, a final ``ς`` is ``σ``, Cyrillic and Greek capitals are
their small letters), in documents and in queries alike; CASESENSITIVE tags keep their bytes.
The cases are RediSearch's own (its tests/pytests/test_multibyte_char_terms.py). RediSearch 2.10.5
of Redis Stack 7.4 lower-cases ASCII only; Pion follows 8.x (docs/compat-differences.md)."""

from __future__ import annotations

import pytest


def _ids(reply) -> list[bytes]:
    if isinstance(reply, dict):
        return sorted(item[b"id"] for item in reply[b"results"])
    return sorted(x for x in reply[1:] if isinstance(x, bytes))


@pytest.fixture
def folded(rr):
    rr.execute_command("FT.CREATE", "f", "ON", "HASH", "PREFIX", "1", "d:", "SCHEMA", "t", "TEXT", "NOSTEM",
                       "g", "TAG", "c", "TAG", "CASESENSITIVE")
    words = {"upper": "БЪЛГА123", "lower": "бълга123", "mixed": "БЪлга123", "esz1": "GRÜẞEN",
             "esz2": "grüßen", "esz3": "GRÜSSEN", "ecole1": "ÉCOLE", "ecole2": "école",
             "sig1": "ΝΕΑΝΊΑΣ", "sig2": "νεανίας"}
    for key, word in words.items():
        rr.hset(f"d:{key}", mapping={"t": word, "g": word, "c": word})
    return rr


@pytest.mark.parametrize("query, expected", [
    ("бЪЛГА123", [b"d:lower", b"d:mixed", b"d:upper"]),
    ("БЪЛГА*", [b"d:lower", b"d:mixed", b"d:upper"]),
    ("grüßen", [b"d:esz1", b"d:esz2", b"d:esz3"]),
    ("GRÜSS*", [b"d:esz1", b"d:esz2", b"d:esz3"]),
    ("ÉCOLE", [b"d:ecole1", b"d:ecole2"]),
    ("νεανίας", [b"d:sig1", b"d:sig2"]),
    ("*ΊΑΣ", [b"d:sig1", b"d:sig2"]),
])
def test_text_and_tag_fold(folded, query, expected):
    text = folded.execute_command("FT.SEARCH", "f", f"@t:{query}", "NOCONTENT", "DIALECT", "2")
    tag = folded.execute_command("FT.SEARCH", "f", "@g:{%s}" % query, "NOCONTENT", "DIALECT", "2")
    assert _ids(text) == expected
    assert _ids(tag) == expected


def test_tagvals_are_folded_and_casesensitive_keeps_bytes(folded):
    vals = folded.execute_command("FT.TAGVALS", "f", "g")
    assert sorted(v.decode() for v in vals) == sorted({"бълга123", "grüssen", "école", "νεανίασ"})
    exact = folded.execute_command("FT.SEARCH", "f", "@c:{GRÜẞEN}", "NOCONTENT", "DIALECT", "2")
    assert _ids(exact) == [b"d:esz1"]
