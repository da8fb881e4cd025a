"""Element attributes as FILTER sees them: the top-level fields of a JSON object, each turned
into an expression value the way Redis's fastjson does (numbers and booleans as doubles, strings
as bytes, ``null``, flat arrays as tuples; objects are not usable)."""

from __future__ import annotations

import json
import math
from typing import Any

from pion.vector.vset.expr import NULL


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")  # raw bytes that were not UTF-8 come back
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")  # a \\ud800 escape in the JSON


def _token(value: Any) -> Any:
    """A JSON value as an expression value; None for what expressions cannot use (objects)."""
    if value is True:
        return 1.0
    if value is False:
        return 0.0
    if value is None:
        return NULL
    if isinstance(value, str):
        return _utf8(value)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, list):
        items = [_token(item) for item in value]
        return None if any(item is None for item in items) else tuple(items)
    return None


def parse_attributes(raw: bytes) -> dict[bytes, Any] | None:
    """The top-level fields of a JSON object as expression values (fields holding objects, or
    arrays with objects inside, are left out); None when ``raw`` is not a JSON object."""
    try:
        doc = json.loads(raw.decode("utf-8", "surrogateescape"), object_pairs_hook=_first_wins,
                         parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    fields: dict[bytes, Any] = {}
    for key, value in doc.items():
        token = _token(value)
        if token is not None:
            fields[_utf8(key)] = token
    return fields
