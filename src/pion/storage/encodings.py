"""OBJECT ENCODING: each value class registers how Redis would name its encoding.

The functions receive the value and the live ``Settings`` so thresholds such as
``hash-max-listpack-entries`` (kept in ``Settings.extra`` unless promoted to fields) apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_ENCODERS: dict[type, Callable[[Any, Any], str]] = {}

#: Redis 7 defaults of the encoding thresholds, used when the setting is absent.
DEFAULT_THRESHOLDS = {
    "hash-max-listpack-entries": 128,
    "hash-max-listpack-value": 64,
    "list-max-listpack-size": -2,
    "set-max-intset-entries": 512,
    "set-max-listpack-entries": 128,
    "set-max-listpack-value": 64,
    "zset-max-listpack-entries": 128,
    "zset-max-listpack-value": 64,
}
#: older names Redis still accepts for the same settings
ALIASES = {
    "hash-max-ziplist-entries": "hash-max-listpack-entries",
    "hash-max-ziplist-value": "hash-max-listpack-value",
    "list-max-ziplist-size": "list-max-listpack-size",
    "zset-max-ziplist-entries": "zset-max-listpack-entries",
    "zset-max-ziplist-value": "zset-max-listpack-value",
}


def register_encoding(cls: type, fn: Callable[[Any, Any], str]) -> None:
    _ENCODERS[cls] = fn


def encoding_of(value: Any, settings: Any) -> str:
    fn = _ENCODERS.get(value.__class__)
    return fn(value, settings) if fn is not None else "raw"


def threshold(settings: Any, name: str) -> int:
    """An encoding threshold from ``settings.extra`` (by its name or its old alias) or the default."""
    extra = dict(getattr(settings, "extra", ()))
    for key, value in extra.items():
        if ALIASES.get(key, key) == name:
            try:
                return int(value)
            except ValueError:
                break
    return DEFAULT_THRESHOLDS[name]


def _string_encoding(value: bytes, settings: Any) -> str:
    if len(value) <= 20:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is not None and -(2**63) <= number < 2**63 and str(number).encode() == value:
            return "int"
    return "embstr" if len(value) <= 44 else "raw"


register_encoding(bytes, _string_encoding)
