"""MIGRATE: move keys to another server as DUMP payloads sent with RESTORE.

Redis's MIGRATE blocks the server while it talks to the target, and so does this one (a plain
socket with the command's timeout). The payload is Pion's DUMP format, so the target must be a Pion
server: a Redis target answers RESTORE with its payload error, which MIGRATE relays as Redis does
("ERR Target instance replied with error: ..."). Connections are not cached between calls. What gets
logged is a DEL of the keys that moved (never the MIGRATE itself, so a replay sends nothing).
"""

from __future__ import annotations

import socket
import time

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.serialize import PayloadError, dump_value

_SKIP = {b"COPY": 0, b"REPLACE": 0, b"AUTH": 1, b"AUTH2": 2}
IO_CONNECT = "IOERR error or timeout connecting to the client"
IO_WRITE = "IOERR error or timeout writing to target instance"
IO_READ = "IOERR error or timeout reading to target instance"


def migrate_keys(argv: list[bytes]) -> list[int]:
    """Key positions as Redis's migrateGetKeys: argv[3], or what follows KEYS when argv[3] is empty."""
    i = 6
    while i < len(argv):
        word = argv[i].upper()
        if word == b"KEYS":
            return [3] if argv[3] else list(range(i + 1, len(argv)))
        i += 1 + _SKIP.get(word, 0)
    return [3]


class _Options:
    __slots__ = ("copy", "replace", "auth", "keys")

    def __init__(self, argv: list[bytes]) -> None:
        self.copy = self.replace = False
        self.auth: list[bytes] = []
        self.keys = [argv[3]]
        i = 6
        while i < len(argv):
            word, more = argv[i].upper(), len(argv) - i - 1
            if word in (b"COPY", b"REPLACE"):
                setattr(self, word.decode().lower(), True)
            elif word == b"AUTH" and more >= 1:
                self.auth, i = [argv[i + 1]], i + 1
            elif word == b"AUTH2" and more >= 2:
                self.auth, i = [argv[i + 1], argv[i + 2]], i + 2
            elif word == b"KEYS":
                if argv[3]:
                    raise ReplyError("ERR When using MIGRATE KEYS option, the key argument must be set to "
                                     "the empty string")
                self.keys = argv[i + 1:]
                break
            else:
                raise ReplyError(errors.SYNTAX)
            i += 1


@command("MIGRATE", -6, "write", keys=(3, 3, 1), categories="@keyspace @write @slow @dangerous",
         since="2.6.0", key_finder=migrate_keys)
def migrate(ctx: Ctx, argv: list[bytes]):
    """MIGRATE host port key | "" destination-db timeout [COPY] [REPLACE] [AUTH password | AUTH2 username password] [KEYS key [key ...]]

    Sends every named key that exists (with its remaining TTL) and, unless COPY, deletes the ones the
    target accepted. NOKEY when none of them exists.
    """
    options = _Options(argv)
    dbid, timeout = parse_int(argv[4]), parse_int(argv[5])
    timeout_s = (timeout if timeout > 0 else 1000) / 1000
    batch = _payloads(ctx, options)
    if not batch:
        return Status("NOKEY")
    commands = ([[b"AUTH", *options.auth]] if options.auth else []) + [[b"SELECT", b"%d" % dbid]]
    restore = b"RESTORE-ASKING" if ctx.server.parts.cluster is not None else b"RESTORE"  # as Redis in cluster mode
    for key, ttl, payload in batch:
        commands.append([restore, key, b"%d" % ttl, payload] + ([b"REPLACE"] if options.replace else []))
    replies = _exchange(argv[1], argv[2], commands, timeout_s)
    setup, restores = replies[: len(commands) - len(batch)], replies[len(commands) - len(batch):]
    for reply in setup:
        if reply.startswith(b"-"):
            raise ReplyError("ERR Target instance replied with error: " + reply[1:].decode("utf-8", "replace"))
    return _finish(ctx, options, batch, restores)


def _payloads(ctx: Ctx, options: _Options) -> list[tuple[bytes, int, bytes]]:
    out = []
    for key in options.keys:
        value = ctx.db.get(key)
        if value is None:
            continue
        expires_at = ctx.db.ttl_ms(key)  # absolute ms; RESTORE takes the time left (at least 1)
        ttl = 0 if expires_at is None else max(expires_at - int(time.time() * 1000), 1)
        try:
            out.append((key, ttl, dump_value(value)))
        except PayloadError as exc:
            raise ReplyError(f"ERR MIGRATE cannot send this value: {exc}") from None
    return out


def _finish(ctx: Ctx, options: _Options, batch: list, restores: list[bytes]):
    """Delete what moved (unless COPY), log it as DEL, and relay the first refusal."""
    first_error, moved = None, []
    for (key, _, _), reply in zip(batch, restores, strict=True):
        if reply.startswith(b"-"):
            first_error = first_error or reply[1:].decode("utf-8", "replace")
        elif not options.copy and ctx.db.delete(key):
            moved.append(key)
            ctx.notify("g", "del", key)
    if moved:
        ctx.dirty(len(moved))
        ctx.rewrite([b"DEL", *moved])
    else:
        ctx.no_propagate()
    if first_error is not None:
        raise ReplyError("ERR Target instance replied with error: " + first_error)
    return OK


def _exchange(host: bytes, port: bytes, commands: list[list[bytes]], timeout_s: float) -> list[bytes]:
    """Send all commands at once and read one reply line per command (all of them are one-line replies)."""
    try:
        sock = socket.create_connection((host.decode(), int(port)), timeout=timeout_s)
    except ConnectionRefusedError:  # Redis's non-blocking connect "succeeds"; its write then fails
        raise ReplyError(IO_WRITE) from None
    except (OSError, ValueError):
        raise ReplyError(IO_CONNECT) from None
    with sock:
        try:
            sock.sendall(b"".join(_encode(argv) for argv in commands))
        except OSError:
            raise ReplyError(IO_WRITE) from None
        return _read_lines(sock, len(commands))


def _encode(argv: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def _read_lines(sock: socket.socket, count: int) -> list[bytes]:
    buf, lines = b"", []
    try:
        while len(lines) < count:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("closed")
            buf += chunk
            *complete, buf = buf.split(b"\r\n")
            lines.extend(complete)
    except OSError:
        raise ReplyError(IO_READ) from None
    return lines[:count]
