"""A seeded corpus of queries for the four parsers a client's text reaches (FT query, APPLY/FILTER
expressions, VSIM FILTER, JSONPath filters), and a description of what each parser makes of one:
the tree, the compiled program, the results on sample rows, or the error text.

``test_parse_golden`` compares these descriptions with digests recorded before the parsers were
rewritten for speed, so a faster parser is held to the same trees and the same errors.
``python -m tests.unit.vector.parse_corpus`` rewrites the digests (only when a change of meaning
is intended, and said so in the commit).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path

GOLDEN = Path(__file__).with_name("parse_golden.json")
PER_FAMILY = 1500
_BAD = "<refused from here>"

_FT_ATOMS = [
    "hello", "World", "zz", "héllo", "a", "\"exact phrase\"", "'single'", "\"\"", "hel*", "*llo", "*ell*", "w'h?l*'",
    "%hello%", "%%hel%%", "%%%x%%%", "3", "-3", "3.5", "1e3", "inf", "-inf", "+5", "12abc", "3™", "@t:hello",
    "@t|u:(a b)", "@g:{x|y}", "@g:{\"a b\"|w'x*'|*ab*|pre*|$p}", "@g:{ a\\ b | c }", "@n:[1 2]", "@n:[(1 +inf]",
    "@n:[-inf (5]", "@n:[$n $n]", "@n:[3]", "@n==3", "@n!=3", "@n>=2", "@n < $n", "@geo:[1 2 3 km]",
    "ismissing(@t)", "$p", "$p*", "*$p", "a\\-b", "a\\ b", "hello=>{$weight:2}",
    "(a|b)=>{$slop:1;$inorder:true}", "x=>{$weight:$n}", "-a", "~a", "-(a b)", "~@t:x", "@t:-x", "@t:~(y)",
    "@missing:x", "@n:[1]", "@t:(a|b|c)", "x*y", "\tq\n", "ISMISSING(@t)", "foo'bar'", "'it''s'", "\"a\\\"b\"",
    _BAD, "@geo:[1 2 3 parsec]", "x=>{$bogus:1}", "*", "(",
    ")", "|", "{", "}", "[", "]", ":", ";", "=>", "@", "$", "!", "#", ".", ",", "^", "<", "=", "\\", "-", "--a",
    "@n:[1 2 3]", "@v:[VECTOR_RANGE 0.5 $B]", "w'x", "\"unterminated", "ismissing", "12abc",
]
_FT_SEPS = [" ", " ", "|", " | ", "", "  "]
_FT_TAILS = ["", "", "", "", "", "", "", "", "", "", "=>[KNN 3 @v $B]", "=>[KNN $k @v $B AS d]", "=>[KNN 3 @v $B EF_RUNTIME 5]",
             "=>[KNN 3 @v $B]=>{$yield_distance_as: d}", "=>[KNN x @v $B]", "=>[KNN 3 @v]", "=>[KNN 3 @v $B"]
_FT_PARAMS = {"p": b"pv", "n": b"3", "B": b"\x00" * 16, "k": b"4"}

_EX_ATOMS = [
    "@n", "@s", "@t", "@missing", "@$.a[*]", "1", "2.5", ".5", "1e3", "0", "\"str\"", "'x'", "'a\\'b'", "upper(@s)",
    "lower(@s)", "substr(@s,0,2)", "strlen(@s)", "format(\"%s-%s\",@s,@n)", "contains(@s,\"b\")",
    "startswith(@s,'a')", "endswith(@s,'c')", "exists(@missing)", "exists(@n)", "case(@n>1,1,0)", "log(@n)",
    "abs(-@n)", "floor(@n/3)", "ceil(@n)", "sqrt(@n)", "pow(@n,2)", "exp(0)", "log2(8)", "to_number(\"3\")",
    "to_str(@n)", "split(\"a,b\")", "timefmt(@t)", "parsetime(\"2020\",\"%Y\")", "day(@t)", "hour(@t)", "year(@t)",
    "dayofweek(@t)", "monthofyear(@t)", "null", "inf", "(@n+1)", "-@n", "!@n", _BAD, "nosuch(1)", "upper()", "substr(@s)", "(", ")", ",", "$",
    "#", "@", "\"unterminated", "lower", "@n @n",
]
_EX_OPS = ["+", "-", "*", "/", "%", "^", "==", "!=", "<", "<=", ">", ">=", "&&", "||", " + ", " && ", ""]
_EX_ROWS = [{"n": 3.0, "s": "abc", "t": 86400 * 400}, {"n": "4", "s": "xyz", "t": "0"}, {}, {"n": 0.0, "s": ""}]

_VS_ATOMS = [
    ".a", ".b", ".c-d", ".name", "1", "-1", "2.5", "1e3", "\"str\"", "'x'", "\"a\\\"b\"", "'a\\nb'",
    "[1, \"a\"]", "[]", "null", "-.a",
    "[\"x\", 2, 'y']", "(.a+1)", "!.a", "not .b", _BAD, "#", "$", "in", "and", "or", "0x10", "12ab", "1e", "[1,", "true", "nullx", "(", ")", "!", "not", "-", ".", "..",
    "\"unterminated",
]
_VS_OPS = ["**", "*", "/", "%", "+", "-", ">", ">=", "<", "<=", "==", "!=", " in ", " and ", " && ", " or ", " || ",
           "&&", "||", " ", "", "=", "===", "andx", " not "]
_VS_ATTRS = [{"a": 1, "b": 2.5, "name": "x", "c-d": True}, {"a": "3", "b": None, "name": "abc"}, {"a": [1, 2]}, {}]

_JS_OPERANDS = [
    "@.a", "@.b.c", "@['a']", "@[0]", "@.*", "@..c", "$.x", "$.x[0]", "@", "@.name", "1", "-2", "2.5", "1e2", "\"s\"",
    "'s'", "\"a\\\"b\"", "true", "false", "null", _BAD, "nul", "@.a[", "@.", "", "(", "!", "-@.a",
]
_JS_COMPARE = ["==", "!=", "<=", ">=", "<", ">", " == ", " > ", _BAD, "", "=", "=~", "==="]
_JS_REGEX = ["\"x\"", "'a+'", "\"^a\"", "\"(?i)AA\"", _BAD, "3", "\"(a\"", "@.name"]
_JS_LOGIC = [" && ", " || ", "&&", "||", _BAD, "&", "|", " "]
_JS_WRAPS = ["$[?({})]", "$[?{}]", "$.items[?({})]", "$..[?({})]", "$[?( {} )]", "$[?({})].a", "$[?({})"]
_JS_DOC = [{"a": 1, "b": {"c": "x"}, "name": "aa"}, {"a": 2.5, "b": {"c": "y"}}, {"a": "s"}, {"x": [1, 2]}, 3,
           {"items": [{"a": 1}, {"a": 5}]}]


def _chain(rng: random.Random, atoms: list[str], seps: list[str], most: int) -> str:
    """Atoms joined by separators; the atoms after ``_BAD`` (refused on their own) come 1 in 12."""
    cut = atoms.index(_BAD)
    good, bad = atoms[:cut], atoms[cut + 1:]

    def atom() -> str:
        return rng.choice(bad) if rng.random() < 1 / 12 else rng.choice(good)

    parts = [atom()]
    for _ in range(rng.randrange(most)):
        parts.append(rng.choice(seps[:-3]) if rng.random() < 0.9 else rng.choice(seps))
        parts.append(atom())
    text = "".join(parts)
    roll = rng.random()
    if roll < 0.15:
        text = f"({text})"
    elif roll < 0.25:
        text = rng.choice(["-", "~", "!", " "]) + text
    return text


def ft_queries() -> list[str]:
    rng = random.Random(27001)
    return [_chain(rng, _FT_ATOMS, _FT_SEPS, 6) + rng.choice(_FT_TAILS) for _ in range(PER_FAMILY)]


def expressions() -> list[str]:
    rng = random.Random(27002)
    return [_chain(rng, _EX_ATOMS, _EX_OPS, 5) for _ in range(PER_FAMILY)]


def vsim_filters() -> list[str]:
    rng = random.Random(27003)
    return [_chain(rng, _VS_ATOMS, _VS_OPS, 5) for _ in range(PER_FAMILY)]


def _pick(rng: random.Random, items: list[str]) -> str:
    cut = items.index(_BAD)
    return rng.choice(items[cut + 1:]) if rng.random() < 1 / 40 else rng.choice(items[:cut])


def _json_filter(rng: random.Random, depth: int = 0) -> str:
    terms = []
    for _ in range(1 + rng.randrange(4)):
        roll = rng.random()
        if roll < 0.15 and depth < 2:
            term = f"({_json_filter(rng, depth + 1)})"
        elif roll < 0.25:
            term = _pick(rng, _JS_OPERANDS)
        elif roll < 0.35:
            term = f"{_pick(rng, _JS_OPERANDS)} =~ {_pick(rng, _JS_REGEX)}"
        else:
            term = f"{_pick(rng, _JS_OPERANDS)}{_pick(rng, _JS_COMPARE)}{_pick(rng, _JS_OPERANDS)}"
        terms.append(("!" if rng.random() < 0.1 else "") + term)
    return "".join(t + _pick(rng, _JS_LOGIC) for t in terms[:-1]) + terms[-1]


def json_paths() -> list[str]:
    rng = random.Random(27004)
    return [rng.choice(_JS_WRAPS).replace("{}", _json_filter(rng)) for _ in range(PER_FAMILY)]


def _plain(value: object) -> object:
    """A JSON-able, order-stable rendering (floats by repr, so nan and inf compare)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return value.hex()
    return value if value is None or isinstance(value, (str, int, bool)) else repr(value)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def describe_ft(text: str, dialect: int) -> object:
    from pion.vector.query_parser import parse_query

    try:
        return _plain(parse_query(text, dialect, dict(_FT_PARAMS)))
    except Exception as exc:
        return _error(exc)


def describe_expression(text: str) -> object:
    from pion.vector.expressions import compile_with_properties

    try:
        expr, props = compile_with_properties(text)
    except Exception as exc:
        return _error(exc)
    results = []
    for row in _EX_ROWS:
        try:
            results.append(_plain(expr(dict(row))))
        except Exception as exc:
            results.append(_error(exc))
    return {"properties": props, "results": results}


def describe_vsim(text: str) -> object:
    from pion.vector.vset.attrs import parse_attributes
    from pion.vector.vset.expr import CompileError, compile_filter

    try:
        flt = compile_filter(text.encode())
    except CompileError as exc:
        return f"CompileError at {exc.pos}"
    program = []
    for item in flt.program:
        cls = type(item).__name__
        if cls == "_Selector":
            program.append(["sel", item.name.decode()])
        elif cls == "_Op":
            program.append(["op", item.code])
        else:
            program.append(["val", _plain(item)])
    results = []
    for attrs in _VS_ATTRS:
        try:
            results.append(flt.matches(parse_attributes(json.dumps(attrs).encode())))
        except Exception as exc:
            results.append(_error(exc))
    return {"program": program, "selectors": sorted(s.decode() for s in flt.selectors), "results": results}


def describe_json(text: str) -> object:
    from pion.storage.json_path import compile_path

    try:
        path = compile_path(text)
    except Exception as exc:
        return _error(exc)
    try:
        return _plain(path.values(json.loads(json.dumps(_JS_DOC))))
    except Exception as exc:
        return _error(exc)


FAMILIES: dict[str, tuple[Callable[[], list[str]], Callable[[str], object]]] = {
    "ft_dialect1": (ft_queries, lambda q: describe_ft(q, 1)),
    "ft_dialect2": (ft_queries, lambda q: describe_ft(q, 2)),
    "expressions": (expressions, describe_expression),
    "vsim_filter": (vsim_filters, describe_vsim),
    "json_filter": (json_paths, describe_json),
}


def digest(description: object) -> str:
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:12]


def digests() -> Iterator[tuple[str, list[str]]]:
    for family, (corpus, describe) in FAMILIES.items():
        yield family, [digest(describe(q)) for q in corpus()]


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(dict(digests()), indent=0) + "\n")
    print(f"wrote {GOLDEN}")
    _ = math  # the module's renderings rely on float repr only
