"""What a connection logs when something breaks below the dispatcher, rate-limited.

Why: a hostile client can open thousands of connections. One that breaks the protocol before
authenticating (an oversize frame) is answered and closed, and logged as one line at most every
PREAUTH_LOG_SECONDS with the count of the others; a bug in parsing or writing a reply is logged
with its traceback once per exception type, then only answered. Either way the log cannot be
flooded by repeating the same thing.
"""

from __future__ import annotations

import logging
import time

from pion.protocol.errors import ProtocolError

log = logging.getLogger("pion.connection")

PREAUTH_LOG_SECONDS = 10.0
_preauth = {"next": 0.0, "quiet": 0}
_broken_logged: set[str] = set()


def note_preauth_error(addr: str, exc: ProtocolError) -> None:
    """An unauthenticated client broke the protocol: one line, rate-limited."""
    now = time.monotonic()
    if now < _preauth["next"]:
        _preauth["quiet"] += 1
        return
    quiet, _preauth["quiet"] = _preauth["quiet"], 0
    _preauth["next"] = now + PREAUTH_LOG_SECONDS
    log.warning("closed unauthenticated client %s: Protocol error: %s%s", addr, exc,
                f" ({quiet} more such connections since the last line)" if quiet else "")


def note_broken(addr: str, exc: Exception) -> None:
    """A connection closed after an internal error: the traceback once per exception type."""
    kind = exc.__class__.__name__
    if kind not in _broken_logged and len(_broken_logged) < 100:
        _broken_logged.add(kind)
        log.error("closing client %s after an internal error (%s); further ones are not logged",
                  addr, kind, exc_info=exc)
