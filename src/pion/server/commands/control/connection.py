"""Connection commands: PING ECHO QUIT HELLO AUTH SELECT RESET."""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, PONG, Push, Status
from pion.server.admin.info import REDIS_VERSION
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.server.security.auth import authenticate


@command("PING", -1, "fast", categories="@fast @connection", group="connection")
def ping(ctx: Ctx, argv: list[bytes]):
    """PING [message]"""
    if len(argv) > 2:
        raise ReplyError(errors.wrong_arity("ping"))
    client = ctx.client
    if client.proto == 2 and client.subscription_count:
        return Push([b"pong", argv[1] if len(argv) == 2 else b""])
    return argv[1] if len(argv) == 2 else PONG


@command("ECHO", 2, "fast", categories="@fast @connection", group="connection")
def echo(ctx: Ctx, argv: list[bytes]):
    """ECHO message"""
    return argv[1]


@command("QUIT", -1, "allow_busy no_auth fast", categories="@fast @connection", group="connection")
def quit_(ctx: Ctx, argv: list[bytes]):
    """QUIT"""
    if ctx.client.conn is not None:
        ctx.client.conn.close_soon()
    return OK


@command("SELECT", 2, "loading stale fast", categories="@keyspace @fast @connection", group="connection")
def select(ctx: Ctx, argv: list[bytes]):
    """SELECT index"""
    index = parse_int(argv[1], errors.NOT_INTEGER)
    if index != 0 and ctx.server.admission.cluster is not None:
        raise ReplyError("ERR SELECT is not allowed in cluster mode")
    if not 0 <= index < len(ctx.client.dbs):
        raise ReplyError(errors.DB_INDEX_RANGE)
    ctx.client.db_index = index
    return OK


@command("AUTH", -2, "noscript loading stale fast no_auth allow_busy", categories="@fast @connection", group="connection")
def auth(ctx: Ctx, argv: list[bytes]):
    """AUTH [username] password"""
    if len(argv) > 3:
        raise ReplyError(errors.SYNTAX)
    user = argv[1] if len(argv) == 3 else None  # None: the one-argument form (default user)
    password = argv[-1]
    authenticate(ctx.server, ctx.client, user, password)
    return OK


@command("HELLO", -1, "noscript loading stale fast no_auth allow_busy", categories="@fast @connection", group="connection", since="6.0.0")
def hello(ctx: Ctx, argv: list[bytes]):
    """HELLO [protover [AUTH username password] [SETNAME clientname]]"""
    client = ctx.client
    proto = client.proto
    i = 1
    if len(argv) > 1:
        try:
            proto = parse_int(argv[1])
        except ReplyError:
            raise ReplyError("ERR Protocol version is not an integer or out of range") from None
        if proto not in (2, 3):
            raise ReplyError("NOPROTO unsupported protocol version")
        i = 2
    name = None
    while i < len(argv):
        option = argv[i].upper()
        if option == b"AUTH" and i + 2 < len(argv):
            auth(ctx, [b"AUTH", argv[i + 1], argv[i + 2]])
            i += 3
        elif option == b"SETNAME" and i + 1 < len(argv):
            name = argv[i + 1]
            if any(c <= 32 or c > 126 for c in name):
                raise ReplyError("ERR Client names cannot contain spaces, newlines or special characters.")
            i += 2
        else:
            raise ReplyError(f"ERR Syntax error in HELLO option '{argv[i].decode('utf-8', 'replace')}'")
    if not client.authenticated:
        raise ReplyError("NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                         "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                         "select the RESP protocol version at the same time")
    if name is not None:
        client.name = name
    client.proto = proto
    return {
        b"server": b"redis",
        b"version": REDIS_VERSION.encode(),
        b"proto": proto,
        b"id": client.id,
        b"mode": b"standalone" if ctx.server.admission.cluster is None else b"cluster",
        b"role": b"master",
        b"modules": [dict(entry) for entry in ctx.server.parts.modules],
    }


@command("RESET", 1, "noscript loading stale fast no_auth allow_busy", categories="@fast @connection", group="connection", since="6.2.0")
def reset(ctx: Ctx, argv: list[bytes]):
    """RESET"""
    server = ctx.server
    client = ctx.client
    client.multi = None
    client.multi_error = False
    server.drop_watches(client)
    server.pubsub.drop_client(client)
    server.monitors.pop(client.id, None)
    server.tracking.disable(client)
    client.db_index = 0
    client.proto = 2
    client.name = b""
    client.reply_mode = "on"
    client.no_evict = False
    client.no_touch = False
    client.authenticated = not server.requires_auth
    client.user = "default"
    client.tenant = None
    client.dbs = server.dbs  # a tenant's connection goes back to the default user's view
    return Status("RESET")
