"""MIGRATE: move keys to another server as DUMP payloads sent with RESTORE.

Redis's MIGRATE blocks the server while it talks to the target, and so does this one (a plain
socket with the command's timeout). A value of a Redis type goes in redis-server's payload format
(``pion.storage.rdb_payload``), which a Redis node and a Pion node both RESTORE; a value Redis's
format cannot carry (JSON, vector sets, streams, a hash with field TTLs) goes in Pion's own format,
which only a Pion node reads: a Redis target refuses it, and MIGRATE says the value cannot be
migrated to a Redis node. Connections are not cached between calls. What gets
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
from pion.storage.rdb_payload import NotRedisType, dump_redis
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


def transfer_option(options, argv: list[bytes], i: int) -> int | None:
    """COPY, REPLACE, AUTH pw or AUTH2 user pw at ``argv[i]`` (MIGRATE's and KV.PREFIX.MIGRATE's
    shared options) set on ``options``; the index of the option's last word, or None if it is none
    of them."""
    word, more = argv[i].upper(), len(argv) - i - 1
    if word in (b"COPY", b"REPLACE"):
        setattr(options, word.decode().lower(), True)
        return i
    if word == b"AUTH" and more >= 1:
        options.auth = [argv[i + 1]]
        return i + 1
    if word == b"AUTH2" and more >= 2:
        options.auth = [argv[i + 1], argv[i + 2]]
        return i + 2
    return None


class _Options:
    __slots__ = ("copy", "replace", "auth", "keys")

    def __init__(self, argv: list[bytes]) -> None:
        self.copy = self.replace = False
        self.auth: list[bytes] = []
        self.keys = [argv[3]]
        i = 6
        while i < len(argv):
            word = argv[i].upper()
            last = transfer_option(self, argv, i)
            if last is not None:
                i = last
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
    for key, ttl, payload, _ in batch:
        commands.append([restore, key, b"%d" % ttl, payload] + ([b"REPLACE"] if options.replace else []))
    replies = _exchange(argv[1], argv[2], commands, timeout_s)
    setup, restores = replies[: len(commands) - len(batch)], replies[len(commands) - len(batch):]
    for reply in setup:
        if reply.startswith(b"-"):
            raise ReplyError("ERR Target instance replied with error: " + reply[1:].decode("utf-8", "replace"))
    return _finish(ctx, options, batch, restores)


def _payloads(ctx: Ctx, options: _Options) -> list[tuple[bytes, int, bytes, str | None]]:
    """(key, ttl, payload, why the payload is Pion's format or None) per existing key."""
    out = []
    for key in options.keys:
        value = ctx.db.get(key)
        if value is None:
            continue
        expires_at = ctx.db.ttl_ms(key)  # absolute ms; RESTORE takes the time left (at least 1)
        ttl = 0 if expires_at is None else max(expires_at - int(time.time() * 1000), 1)
        try:
            out.append((key, ttl, dump_redis(value), None))
        except NotRedisType as why:
            try:
                out.append((key, ttl, dump_value(value), str(why)))
            except PayloadError as exc:
                raise ReplyError(f"ERR MIGRATE cannot send this value: {exc}") from None
    return out


def _finish(ctx: Ctx, options: _Options, batch: list, restores: list[bytes]):
    """Delete what moved (unless COPY), log it as DEL, and relay the first refusal."""
    first_error, moved = None, []
    for (key, _, _, pion_only), reply in zip(batch, restores, strict=True):
        if reply.startswith(b"-"):
            error = reply[1:].decode("utf-8", "replace")
            if pion_only and "payload version or checksum" in error:  # a Redis node, not a Pion one
                error = (f"{error} (the value of '{key.decode('utf-8', 'replace')}' is {pion_only}, which cannot "
                         "be migrated to a Redis node)")
            first_error = first_error or error
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
            sock.sendall(b"".join(encode_request(argv) for argv in commands))
        except OSError:
            raise ReplyError(IO_WRITE) from None
        return _read_lines(sock, len(commands))


def encode_request(argv: list[bytes]) -> bytes:
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
