"""``KV.PREFIX.MIGRATE``: move whole K/V prefixes (rows, recurrent state, manifest, token chain) to
another Pion node, the K/V counterpart of MIGRATE for resharding a cluster.

A prefix is not a keyspace key: MIGRATE and GETKEYSINSLOT do not see it. Its namespace carries a
hash tag (``{ns}``) so its sessions share the namespace's slot; this command moves every prefix of
a slot (``SLOT n``) or the named ones (``NAMESPACES ns ...``). Each goes as a ``KV.PREFIX.EXPORT``
artifact (SHA-256 over all of it) in one ``KV.PREFIX.IMPORT`` on the target: a staged store, all
or nothing, invisible there until its last row arrived. So a prefix caught half way is a miss on
the target and still whole here, never a wrong cache. Once the target answered, the prefix is
dropped here (``KV.PREFIX.DROP``, logged and replicated as such) unless COPY, and only if it is
still the prefix that was sent (a prefix re-stored here meanwhile stays).

Packing and the transfer run in the worker pool (the loop serves other clients meanwhile); the
router serves a migrating slot's K/V command here while its namespace is here and answers -ASK
once it moved, as Redis does for keys (``pion.server.cluster.router``).
"""

from __future__ import annotations

import socket
from functools import partial

from pion.codecs.artifact import Artifact, pack
from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.keyslot import SLOTS, key_slot
from pion.server.args import check_ns, parse_int
from pion.server.commands.core.migrate import IO_CONNECT, IO_READ, IO_WRITE, encode_request, transfer_option
from pion.server.commands.kv.artifact import collect
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command

TARGET = "ERR Target instance replied with error: "


class _Options:
    __slots__ = ("host", "port", "timeout_s", "copy", "replace", "auth", "namespaces", "slot")

    def __init__(self, argv: list[bytes]) -> None:
        self.host, self.port = argv[1].decode("utf-8", "replace"), parse_int(argv[2])
        timeout = parse_int(argv[3])
        self.timeout_s = (timeout if timeout > 0 else 1000) / 1000
        self.copy = self.replace = False
        self.auth: list[bytes] = []
        self.namespaces: list[bytes] = []
        self.slot: int | None = None
        i = 4
        while i < len(argv):
            word, more = argv[i].upper(), len(argv) - i - 1
            last = transfer_option(self, argv, i)
            if last is not None:
                i = last
            elif word == b"SLOT" and more >= 1 and self.slot is None and not self.namespaces:
                self.slot, i = parse_int(argv[i + 1]), i + 1
                if not 0 <= self.slot < SLOTS:
                    raise ReplyError("ERR Invalid or out of range slot")
            elif word == b"NAMESPACES" and more >= 1 and self.slot is None:
                self.namespaces = [check_ns(ns) for ns in argv[i + 1:]]
                break
            else:
                raise ReplyError(errors.SYNTAX)
            i += 1
        if self.slot is None and not self.namespaces:
            raise ReplyError("ERR KV.PREFIX.MIGRATE needs SLOT slot or NAMESPACES ns [ns ...]")


@command("KV.PREFIX.MIGRATE", -5, "write", categories="@write @pion @slow @dangerous", group="pion", since="0.3.0")
def kv_prefix_migrate(ctx, argv):
    """KV.PREFIX.MIGRATE host port timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw] SLOT slot | NAMESPACES ns [ns ...]: move prefixes to another Pion node; the namespaces moved.

    Moves the named prefixes, or every prefix of a slot, to the Pion node at host:port (an empty
    array when there was none). In SLOT mode a prefix that cannot be
    exported (a part of it was evicted, no manifest or token chain: a miss anyway) is dropped here
    unless COPY; named, it is an error.
    """
    options = _Options(argv)
    sp = ctx.kv_space()
    names = options.namespaces or sorted(ns for ns in sp.registry.prefixes if key_slot(ns) == options.slot)
    sending: list[tuple[bytes, object, Artifact]] = []
    unsendable: list[bytes] = []
    for ns in names:
        try:
            sending.append((ns, sp.registry.get(ns), collect(sp, ns)))
        except ReplyError:
            if options.namespaces:
                raise
            unsendable.append(ns)
    ctx.no_propagate()  # what is logged is the KV.PREFIX.DROP of what moved
    if not sending:
        return _finish(ctx, options, [], unsendable, [])
    job = partial(_transfer, options, [art for _, _, art in sending], ctx.server.settings.proto_max_bulk_len)
    if can_defer(ctx):
        return Deferred([job], lambda ctx, results: _finish(ctx, options, sending, unsendable, results[0]))
    return _finish(ctx, options, sending, unsendable, job())


def _transfer(options: _Options, arts: list[Artifact], max_bulk: int) -> list[bytes | ReplyError]:
    """Pack each artifact and IMPORT it on the target (one connection, one pipeline); the replies."""
    commands = [[b"AUTH", *options.auth]] if options.auth else []
    for art in arts:
        blob = pack(art)
        if len(blob) > max_bulk:
            raise ReplyError(f"ERR KV.PREFIX.MIGRATE: the artifact of '{art.ns.decode('utf-8', 'replace')}' "
                             f"({len(blob)} bytes) exceeds proto-max-bulk-len")
        commands.append([b"KV.PREFIX.IMPORT", blob, *([b"REPLACE"] if options.replace else [])])
    try:
        sock = socket.create_connection((options.host, options.port), timeout=options.timeout_s)
    except ConnectionRefusedError:
        raise ReplyError(IO_WRITE) from None
    except (OSError, ValueError, OverflowError):
        raise ReplyError(IO_CONNECT) from None
    with sock:
        try:
            for argv in commands:
                sock.sendall(encode_request(argv))
        except OSError:
            raise ReplyError(IO_WRITE) from None
        replies = _Replies(sock).read(len(commands))
    if options.auth and isinstance(replies[0], ReplyError):
        raise ReplyError(TARGET + replies[0].message)
    return replies[1:] if options.auth else replies


class _Replies:
    """Reads simple, error, integer and bulk replies (what AUTH and KV.PREFIX.IMPORT answer)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("closed")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read(self, count: int) -> list[bytes | ReplyError]:
        out: list[bytes | ReplyError] = []
        try:
            while len(out) < count:
                line = self._line()
                if line[:1] == b"-":
                    out.append(ReplyError(line[1:].decode("utf-8", "replace")))
                elif line[:1] == b"$" and line != b"$-1":
                    size = int(line[1:])
                    while len(self.buf) < size + 2:
                        self._fill()
                    out.append(self.buf[:size])
                    self.buf = self.buf[size + 2:]
                else:
                    out.append(line[1:])
        except (OSError, ValueError):
            raise ReplyError(IO_READ) from None
        return out


def _finish(ctx, options: _Options, sending: list, unsendable: list[bytes], replies: list):
    """Drop what the target took (unless COPY, and only the prefix that was sent); the moved names."""
    sp = ctx.kv_space()
    dispatcher = ctx.server.dispatcher
    moved, first_error = [], None
    for (ns, _, _), reply in zip(sending, replies, strict=True):
        if isinstance(reply, ReplyError):
            first_error = first_error or reply.message
            continue
        moved.append(ns)
    drop = [] if options.copy else [ns for ns, prefix, _ in sending if ns in moved and sp.registry.get(ns) is prefix]
    for ns in drop + ([] if options.copy else unsendable):
        argv = [b"KV.PREFIX.DROP", ns]
        dispatcher.call(ctx.client, dispatcher.lookup(argv), argv)
    if drop or unsendable:
        ctx.dirty()
    if first_error is not None:
        raise ReplyError(TARGET + first_error)
    return moved
