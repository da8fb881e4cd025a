"""Exception classes for Pion's error replies, and the mapping from redis-py's exceptions.

redis-py turns an error reply into ``ResponseError`` (or a subclass for the prefixes it knows)
and strips known prefixes from the text. The client re-raises every failure as one of the
classes below so callers can catch what they mean (``SessionNotFound``, ``CodecRefused``,
``OutOfMemory``, ...) without parsing texts; the original exception stays as ``__cause__``.
"""

from __future__ import annotations


class PionError(Exception):
    """Base class of every error the Pion client raises."""


class PionConnectionError(PionError):
    """The server could not be reached, or the connection broke mid-command."""


class PionTimeoutError(PionConnectionError):
    """The server did not answer within the socket timeout."""


class PionResponseError(PionError):
    """The server answered with an error reply. ``prefix`` is its first word (``ERR``, ``OOM``...)."""

    def __init__(self, message: str, prefix: str = "ERR") -> None:
        super().__init__(message)
        self.prefix = prefix
        self.message = message


class AuthError(PionResponseError):
    """NOAUTH, WRONGPASS or NOPERM: wrong or missing credentials in the URL."""


class OutOfMemory(PionResponseError):
    """OOM: the server is at ``--maxmemory`` with ``noeviction``."""


class Loading(PionResponseError):
    """LOADING: the server is still replaying its log after a restart; retry shortly."""


class WriteRefused(PionResponseError):
    """MISCONF or READONLY: the server refuses writes (its log cannot be written, or it is a replica)."""


class KVCacheDisabled(PionResponseError):
    """The server runs without its K/V engine (the reference's ``--kvcache``)."""


class SessionNotFound(PionResponseError):
    """The V-store session (``<ns>_pk`` / ``<ns>_pv``) does not exist."""


class CodecRefused(PionResponseError):
    """The server does not know this codec, or refuses it for this dimension or session."""


class NamespaceRefused(PionResponseError):
    """The namespace is outside this tenant's required prefix, or its length is out of range."""


class UnknownCommand(PionResponseError):
    """The server does not have this command: an older Pion, or a plain Redis."""


class ColdMiss(PionResponseError):
    """COLDMISS: the prefix was demoted to the cold tier; rehydrate and retry."""


class Unavailable(PionResponseError):
    """UNAVAILABLE: the feature is not enabled on this server."""


class CorruptReply(PionError):
    """A reply had the wrong size or shape for what was asked (a server bug or a mismatched layout)."""


_BY_PREFIX: dict[str, type[PionResponseError]] = {
    "NOAUTH": AuthError, "WRONGPASS": AuthError, "NOPERM": AuthError,
    "OOM": OutOfMemory, "LOADING": Loading, "MISCONF": WriteRefused, "READONLY": WriteRefused,
    "COLDMISS": ColdMiss, "UNAVAILABLE": Unavailable,
}

#: (substring of an ERR text, class): the first match wins
_BY_TEXT: tuple[tuple[str, type[PionResponseError]], ...] = (
    ("not enabled", KVCacheDisabled),
    ("session not found", SessionNotFound),
    ("unknown vquant", CodecRefused),
    ("unknown codec", CodecRefused),
    ("format", CodecRefused),
    ("must be multiple of 32", CodecRefused),
    ("required prefix", NamespaceRefused),
    ("ns_key length", NamespaceRefused),
    ("unknown command", UnknownCommand),
    ("invalid password", AuthError),
)


def classify(message: str, prefix: str | None = None) -> PionResponseError:
    """The exception for an error reply. ``message`` may or may not still start with ``prefix``."""
    if prefix is None:
        first = message.split(" ", 1)[0]
        prefix = first if first.isupper() and first.isalpha() else "ERR"
    text = message if message.startswith(prefix + " ") or message == prefix else f"{prefix} {message}"
    cls = _BY_PREFIX.get(prefix)
    if cls is None:
        low = text.lower()
        cls = next((c for needle, c in _BY_TEXT if needle in low), PionResponseError)
    return cls(text, prefix)


def translate(exc: BaseException) -> PionError:
    """A redis-py exception as the matching Pion exception (used with ``raise ... from exc``)."""
    import redis.exceptions as rx

    if isinstance(exc, PionError):
        return exc
    if isinstance(exc, rx.TimeoutError):
        return PionTimeoutError(str(exc))
    if isinstance(exc, rx.AuthenticationError):
        return AuthError(str(exc), getattr(exc, "status_code", None) or "NOAUTH")
    if isinstance(exc, rx.ConnectionError):
        return PionConnectionError(str(exc))
    if isinstance(exc, rx.ResponseError):
        return classify(str(exc), getattr(exc, "status_code", None))
    return PionError(str(exc))
