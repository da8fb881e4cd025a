"""Reply errors and Redis's exact error texts, in one place so no handler spells them twice."""

from __future__ import annotations


class ReplyError(Exception):
    """An error reply for the client. ``message`` carries its prefix: ``ERR ...``, ``WRONGTYPE ...``."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CountedError(ReplyError):
    """An error reply already in INFO errorstats: a script's redis.call/pcall error (the command's
    own error, or its refusal), carried up as the script's reply. Redis's error table holds
    ``ignore_error_stats_update`` for it; the script's command then counts as failed without
    counting the error a second time."""

    __slots__ = ()


class ProtocolError(Exception):
    """A malformed request frame: answered with ``-ERR Protocol error: ...``, then the connection closes."""


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
NO_SUCH_KEY = "ERR no such key"
OUT_OF_RANGE = "ERR index out of range"
OVERFLOW = "ERR increment or decrement would overflow"
NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
INVALID_EXPIRE = "ERR invalid expire time in '{}' command"
DB_INDEX_RANGE = "ERR DB index is out of range"
NOT_INT_TIMEOUT = "ERR timeout is not an integer or out of range"
NEGATIVE_TIMEOUT = "ERR timeout is negative"
LOADING = "LOADING Pion is loading the dataset in memory"
OOM = "OOM command not allowed when used memory > 'maxmemory'."
MISCONF = (
    "MISCONF Errors writing to the append only file. Pion is configured to refuse writes "
    "while the log cannot be written; check the server log for the cause."
)
MISCONF_SNAPSHOT = (
    "MISCONF Pion is configured to save snapshots, but it's currently unable to persist to disk. "
    "Commands that may modify the data set are disabled, because this instance is configured to "
    "report errors during writes if snapshotting fails (stop-writes-on-bgsave-error option). "
    "Please check the Pion logs for details about the snapshot error."
)


def wrong_arity(name: str) -> str:
    return f"ERR wrong number of arguments for '{name}' command"


def unknown_command(name: bytes, args: list[bytes]) -> str:
    """Redis's text: each argument quoted and followed by a space, 128 characters at most in all."""
    shown = ""
    for arg in args:
        if len(shown) >= 128:
            break
        shown += f"'{_printable(arg, 128 - len(shown))}' "
    return f"ERR unknown command '{_printable(name)}', with args beginning with: {shown}"


def unknown_subcommand(sub: bytes, container: str) -> str:
    return (
        f"ERR unknown subcommand '{_printable(sub)}'. Try {container.upper()} HELP."
    )


def _printable(raw: bytes, limit: int = 128) -> str:
    """Redis shows at most 128 bytes of a bad name and replaces control characters."""
    text = raw[:limit].decode("utf-8", "replace")
    return "".join(ch if ch.isprintable() else " " for ch in text)
