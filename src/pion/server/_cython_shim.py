"""What ``pion.server.fastlane`` asks of Cython's ``cython`` module when Cython is not installed.

The lane is written in Cython's pure-Python mode: compiled (setup.py) its annotations and these
decorators give C types and C functions; run as Python without Cython installed, this stand-in
makes them do nothing (``compiled`` is False), so the module is its own pure twin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

compiled = False

int = int  # noqa: A001 - the C types, as Python's own numbers
longlong = int
Py_ssize_t = int
bint = bool


def _same(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


cfunc = _same
inline = _same
cclass = _same


def exceptval(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return _same
