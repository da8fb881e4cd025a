"""The JSON value type (TYPE ``ReJSON-RL``, RedisJSON's type name): a parsed document tree.

The document is kept as plain Python values (dict keeps insertion order, as RedisJSON's objects
do; int and float stay apart, as RedisJSON's integer and number). Serialisation follows
serde_json, which RedisJSON uses: compact separators, non-ASCII left as is, floats in their
shortest round-trip form with serde's exponent spelling (``1e21``, ``1.5e-7``). Parse errors read
like serde_json's (``expected value at line 1 column 1``). Snapshots and DUMP store the compact
text; the size estimate for INFO and maxmemory is refreshed from it on every write.
"""

from __future__ import annotations

import json
import math
import re
import sys
from decimal import Decimal
from typing import Any

from pion.storage import json_serde, serialize
from pion.storage.encodings import register_encoding
from pion.storage.keyspace import register_type
from pion.storage.memory import register_sizer

#: RedisJSON's nesting limit (MAX_DEPTH)
MAX_DEPTH = 128
TYPE_ID = 10


class JsonError(ValueError):
    """Text that is not a JSON value; ``str(exc)`` is the reply text."""


class JsonValue:
    """A JSON document stored at a key; ``root`` is the tree, ``size`` the last estimate."""

    __slots__ = ("root", "size")

    def __init__(self, root: Any) -> None:
        self.root = root
        self.size = 0
        self.touch()

    def touch(self) -> None:
        """Refresh the size estimate after an in-place change."""
        self.size = estimate_size(self.root)

    def dumps(self) -> str:
        return dumps(self.root)


#: what Python's parser reads otherwise than serde_json in a text it accepts (checked in texts up to
#: SUSPECT_CHECK_MAX characters; the regex costs about a third of a parse on a long document): a
#: UTF-16 surrogate escape (serde refuses a lone one), an exponent of 3 digits or a 309-digit run
#: (serde refuses an infinite number; Python reads it as inf)
_SUSPECT = re.compile(r"\\u[dD][89a-fA-F]|[eE]\+?[0-9]{3}|[0-9]{309}")
SUSPECT_CHECK_MAX = 4096


class _Serde(Exception):
    """This text is read by ``json_serde``: Python's reading would differ from serde_json's."""


def _integer(text: str) -> int | float:
    """serde_json's integers: i64 and u64; a longer one is read as a float, ``-0`` as -0.0."""
    value = int(text)
    if -(2**63) <= value < 2**64:
        return -0.0 if text == "-0" else value
    if math.isinf(float(text)):
        raise _Serde
    return float(text)


def loads(text: str | bytes) -> Any:
    """Parse the text's first JSON value as RedisJSON's serde_json does: Python's parser when it
    reads the text the same way, else ``json_serde`` (serde's error texts and positions; text
    after the first value is not read, as RedisJSON does not)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise JsonError("invalid unicode code point at line 1 column 1") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_int=_integer)
    except (json.JSONDecodeError, RecursionError, _Serde):
        return _serde_loads(text)
    if len(text) <= SUSPECT_CHECK_MAX and _SUSPECT.search(text) is not None:
        return _serde_loads(text)
    if text.count("[") + text.count("{") >= json_serde.RECURSION_LIMIT and depth(value) >= json_serde.RECURSION_LIMIT:
        return _serde_loads(text)
    return value


def _serde_loads(text: str) -> Any:
    data = text.encode("utf-8", "surrogatepass")
    try:
        end = json_serde.first_value_end(data)
    except json_serde.SerdeError as exc:
        raise JsonError(str(exc)) from None
    try:
        return json.loads(data[:end].decode("utf-8"), parse_constant=_reject_constant, parse_int=_integer)
    except (ValueError, RecursionError, _Serde):  # not expected: serde's reading accepted it
        raise JsonError("expected value at line 1 column 1") from None


def _reject_constant(name: str) -> Any:
    raise _Serde


def depth(value: Any) -> int:
    """Nesting depth (a scalar is 0), iteratively so a deep document cannot blow the stack."""
    best = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            best = max(best, level)
            stack.extend((item, level + 1) for item in node.values())
        elif isinstance(node, list):
            best = max(best, level)
            stack.extend((item, level + 1) for item in node)
    return best


def format_number(value: int | float) -> str:
    """serde_json's spelling of a number: integers as is, floats as ryu writes them."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # value = digits * 10**exponent
    kk = len(digits) + exponent  # where the decimal point falls
    prefix = "-" if sign else ""
    if exponent >= 0 and kk <= 16:
        body = digits + "0" * exponent + ".0"
    elif 0 < kk <= 16:
        body = digits[:kk] + "." + digits[kk:]
    elif -5 < kk <= 0:
        body = "0." + "0" * -kk + digits
    elif len(digits) == 1:
        body = f"{digits}e{kk - 1}"
    else:
        body = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return prefix + body


def dumps(value: Any, indent: str | None = None, newline: str | None = None, space: str | None = None) -> str:
    """Compact JSON, or RedisJSON's INDENT/NEWLINE/SPACE layout when any is given."""
    if indent is None and newline is None and space is None:
        if value.__class__ in (dict, list):
            # the C encoder writes what _compact writes, except floats in exponent form
            # (Python's 1e+16 against serde's 1e16): any "e+"/"e-" in the text takes the slow path
            try:
                text = _C_COMPACT(value)
            except (TypeError, ValueError):
                text = "e+"
            if "e+" not in text and "e-" not in text:
                return text
        out: list[str] = []
        _compact(value, out)
        return "".join(out)
    out = []
    _pretty(value, out, indent or "", newline or "", space or "", 0)
    return "".join(out)


_ENCODE_STR = json.JSONEncoder(ensure_ascii=False).encode
_C_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False).encode


def _compact(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_ENCODE_STR(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, (int, float)):
        out.append(format_number(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            out.append(_ENCODE_STR(key))
            out.append(":")
            _compact(item, out)
        out.append("}")
    else:
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _compact(item, out)
        out.append("]")


def _pretty(value: Any, out: list[str], indent: str, newline: str, space: str, level: int) -> None:
    if isinstance(value, dict) and value:
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append("," if i else "")
            out.append(newline + indent * (level + 1))
            out.append(_ENCODE_STR(key) + ":" + space)
            _pretty(item, out, indent, newline, space, level + 1)
        out.append(newline + indent * level + "}")
    elif isinstance(value, list) and value:
        out.append("[")
        for i, item in enumerate(value):
            out.append("," if i else "")
            out.append(newline + indent * (level + 1))
            _pretty(item, out, indent, newline, space, level + 1)
        out.append(newline + indent * level + "]")
    else:
        _compact(value, out)


def type_name_of(value: Any) -> str:
    """JSON.TYPE's names."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def estimate_size(root: Any) -> int:
    """Bytes the tree holds, roughly: its compact text times the overhead of Python objects,
    sampled for big containers so a write costs O(sample), not O(document)."""
    return sys.getsizeof(root) + _sampled(root, 3)


def _sampled(value: Any, budget: int) -> int:
    if isinstance(value, dict):
        items = list(value.items())
        if not items:
            return 64
        if len(items) > 32:
            step = len(items) // 16
            sample = items[::step][:16]
            return int(sum(_entry_size(k, v, budget) for k, v in sample) * len(items) / len(sample)) + 64
        return sum(_entry_size(k, v, budget) for k, v in items) + 64
    if isinstance(value, list):
        if not value:
            return 56
        if len(value) > 32:
            step = len(value) // 16
            sample = value[::step][:16]
            return int(sum(_item_size(v, budget) for v in sample) * len(value) / len(sample)) + 56
        return sum(_item_size(v, budget) for v in value) + 56
    return sys.getsizeof(value)


def _entry_size(key: str, value: Any, budget: int) -> int:
    return sys.getsizeof(key) + 16 + _item_size(value, budget)


def _item_size(value: Any, budget: int) -> int:
    if isinstance(value, (dict, list)):
        return _sampled(value, budget - 1) if budget > 0 else 256
    return sys.getsizeof(value) + 8


def _dump(value: JsonValue) -> bytes:
    return value.dumps().encode("utf-8")


def _load(body: bytes) -> JsonValue:
    try:
        return JsonValue(loads(body))
    except JsonError as exc:
        raise serialize.PayloadError(f"corrupt JSON value: {exc}") from None


register_type(JsonValue, "ReJSON-RL")
serialize.register_codec(JsonValue, TYPE_ID, _dump, _load)
register_sizer(JsonValue, lambda value: value.size)
register_encoding(JsonValue, lambda value, settings: "raw")
