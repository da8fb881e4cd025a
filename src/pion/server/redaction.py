"""What the server shows of a command's arguments: credentials hidden (a leaf: imports nothing).

MONITOR follows Redis 7: AUTH shows no argument, HELLO hides what follows its AUTH token,
MIGRATE what follows AUTH or AUTH2, CONFIG SET of a password parameter its value. SLOWLOG hides
every argument of the credential commands. Admin commands are not shown in MONITOR at all
(``Dispatcher.monitor``); ACL is one of them.
"""

from __future__ import annotations

#: CONFIG SET parameters whose values are credentials
SENSITIVE_PARAMS = {b"requirepass", b"masterauth", b"tls-key-file-pass", b"tls-client-key-file-pass"}
#: commands whose arguments are credentials: SLOWLOG shows none of them
CREDENTIAL_COMMANDS = {b"auth", b"hello", b"migrate", b"acl"}
REDACTED = b"(redacted)"


def redacted(argv: list[bytes]) -> list[bytes]:
    """``argv`` with credential values hidden: CONFIG SET of a password parameter."""
    if len(argv) >= 4 and argv[0].lower() == b"config" and argv[1].lower() == b"set":
        shown = list(argv)
        for i in range(2, len(argv) - 1, 2):
            if argv[i].lower() in SENSITIVE_PARAMS:
                shown[i + 1] = REDACTED
        return shown
    return argv


def monitor_argv(argv: list[bytes]) -> list[bytes]:
    """The arguments a MONITOR line shows."""
    name = argv[0].lower()
    if name == b"auth":
        return [argv[0]] + [REDACTED] * (len(argv) - 1)
    if name == b"hello":
        return _after_token(argv, 2, {b"AUTH": 2})
    if name == b"migrate":
        return _after_token(argv, 6, {b"AUTH": 1, b"AUTH2": 2})
    return redacted(argv)


def slowlog_argv(argv: list[bytes]) -> list[bytes]:
    """The arguments before SLOWLOG trims them: none of a credential command's."""
    argv = redacted(argv)
    if argv[0].lower() in CREDENTIAL_COMMANDS:
        return [argv[0]] + [REDACTED] * (len(argv) - 1)
    return argv


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
