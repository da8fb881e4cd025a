"""The CLIENT LIST / CLIENT INFO line of one client, in Redis 7.2's format, and client types.

Buffer fields Pion has no counterpart for (``rbs``, ``argv-mem``, ...) are reported as 0; ``qbuf``,
``multi-mem`` and ``omem`` are measured.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pion.server.net.client import Client

#: CLIENT LIST/KILL TYPE names (Redis's getClientTypeByName); ``replica`` is ``slave``
CLIENT_TYPES = {"normal": "normal", "slave": "slave", "replica": "slave", "pubsub": "pubsub", "master": "master"}


def client_type(client: Client) -> str:
    """Redis's getClientType: a subscribed client is ``pubsub``, every other Pion client ``normal``."""
    return "pubsub" if client.subscription_count else "normal"


def is_unix(client: Client) -> bool:
    transport = getattr(client.conn, "transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    return sock is not None and sock.family == socket.AF_UNIX


def client_flags(client: Client) -> str:
    server = client.server
    flags = ""
    if client.id in server.monitors:
        flags += "O"
    if client.subscription_count:
        flags += "P"
    if client.multi is not None:
        flags += "x"
    if client.blocked is not None:
        flags += "b"
    if client.dirty_cas:
        flags += "d"
    if client.closing:
        flags += "c"
    if is_unix(client):
        flags += "U"
    if client.no_evict:
        flags += "e"
    if client.no_touch:
        flags += "T"
    if client.tracking is not None:
        flags += "t" + ("R" if client.tracking.broken else "") + ("B" if client.tracking.bcast else "")
    return flags or "N"


def client_line(client: Client, current_cmd: str | None = None, current_argv: list[bytes] | None = None) -> str:
    """One CLIENT LIST line (without the newline). ``current_cmd`` names the running command;
    ``current_argv`` (the caller's own command) counts in ``qbuf`` as the request Redis still
    holds in its query buffer while running it."""
    now = time.time()
    conn = client.conn
    qbuf = conn.reader.buffered() if conn is not None else 0
    if current_argv:
        qbuf += request_size(current_argv)
    transport = getattr(conn, "transport", None)
    omem = transport.get_write_buffer_size() if transport is not None and not transport.is_closing() else 0
    multi = -1 if client.multi is None else len(client.multi)
    multi_mem = sum(len(arg) for _, argv in client.multi or () for arg in argv)
    idle = 0 if current_cmd else int(now - client.last_interaction)
    cmd = current_cmd or client.last_cmd  # "NULL" before the first command, as Redis
    return (
        f"id={client.id} addr={client.addr} laddr={client.laddr} fd={client.fd} name={_text(client.name)} "
        f"age={int(now - client.created)} idle={idle} flags={client_flags(client)} db={client.db_index} "
        f"sub={len(client.subscriptions)} psub={len(client.patterns)} ssub={len(client.shard_subscriptions)} "
        f"multi={multi} qbuf={qbuf} qbuf-free=0 argv-mem=0 multi-mem={multi_mem} rbs=0 rbp=0 obl=0 oll=0 "
        f"omem={omem} tot-mem={qbuf + omem + multi_mem} events=r cmd={cmd} user={client.user} "
        f"redir={client.tracking.redirect if client.tracking is not None else -1} "
        f"resp={client.proto} lib-name={_text(client.lib_name)} lib-ver={_text(client.lib_ver)}"
    )


def request_size(argv: list[bytes]) -> int:
    """Bytes of ``argv`` as a RESP multibulk request."""
    size = len(b"*%d\r\n" % len(argv))
    for arg in argv:
        size += len(b"$%d\r\n" % len(arg)) + len(arg) + 2
    return size


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def valid_attr(value: bytes) -> bool:
    """Client names and lib attributes: printable ASCII without spaces (Redis's validateClientAttr)."""
    return all(0x21 <= byte <= 0x7E for byte in value)
