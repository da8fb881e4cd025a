"""JSON that clients send (K/V manifests, and whatever else a command takes as JSON), parsed
with a nesting limit.

Why: ``json.loads`` recurses once per nesting level, so a 60 KB document of ``[[[[...`` hits
Python's recursion limit and raises ``RecursionError`` (not ``ValueError``) from deep inside a
command. The depth is measured first, in one scan that skips string contents, and a document
nested deeper than ``max_depth`` is refused with ``ValueError`` like any other bad JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: deeper than any manifest or document a client has a reason to send
MAX_DEPTH = 128
#: a JSON string (escapes included) or one bracket; everything else is skipped by the scan
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_OPEN = frozenset(b"[{")


def too_deep(data: bytes, max_depth: int = MAX_DEPTH) -> bool:
    """Is any array or object in ``data`` nested more than ``max_depth`` levels deep?"""
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return False  # the common case: not enough brackets to be that deep
    depth = 0
    for match in _TOKEN.finditer(data):
        first = data[match.start()]
        if first in _OPEN:
            depth += 1
            if depth > max_depth:
                return True
        elif first != 0x22:  # a closing bracket (strings are skipped)
            depth -= 1
    return False


def loads_bounded(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that refuses (``ValueError``) a document nested deeper than ``max_depth``."""
    raw = bytes(data)
    if too_deep(raw, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except RecursionError:  # unreachable after the depth check; kept so no caller ever sees it
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
