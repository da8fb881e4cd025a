"""What MONITOR shows of a command: Redis 7's argument redaction.

AUTH shows no argument, HELLO hides what follows its AUTH token, MIGRATE what follows AUTH or
AUTH2, and CONFIG SET of a password parameter its value (``auth.redacted``). Admin commands are
not shown at all (``Dispatcher.monitor``); ACL is one of them.
"""

from __future__ import annotations

from pion.server.auth import REDACTED, redacted


def monitor_argv(argv: list[bytes]) -> list[bytes]:
    name = argv[0].lower()
    if name == b"auth":
        return [argv[0]] + [REDACTED] * (len(argv) - 1)
    if name == b"hello":
        return _after_token(argv, 2, {b"AUTH": 2})
    if name == b"migrate":
        return _after_token(argv, 6, {b"AUTH": 1, b"AUTH2": 2})
    return redacted(argv)


def _after_token(argv: list[bytes], start: int, tokens: dict[bytes, int]) -> list[bytes]:
    shown = list(argv)
    i = start
    while i < len(shown):
        hidden = tokens.get(shown[i].upper(), 0)
        if hidden and i + hidden < len(shown):
            shown[i + 1 : i + 1 + hidden] = [REDACTED] * hidden
            i += hidden
        elif shown[i].upper() == b"KEYS":
            break
        i += 1
    return shown
