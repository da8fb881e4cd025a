"""CLIENT: ID INFO LIST KILL SETNAME GETNAME SETINFO REPLY PAUSE UNPAUSE NO-EVICT NO-TOUCH UNBLOCK
TRACKING GETREDIR TRACKINGINFO CACHING HELP, as Redis 7.2 answers them.

CLIENT TRACKING, GETREDIR, TRACKINGINFO and CACHING live in ``tracking_cmds``; CLIENT PAUSE
really holds the commands it covers (``pion.server.pause``).
"""

from __future__ import annotations

import time

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status, Verbatim
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.net.client import Client
from pion.server.net.client_info import CLIENT_TYPES, client_line, client_type, valid_attr
from pion.server.registry import command
from pion.server.security.tenants import visible_clients

_USER = "noscript loading stale"
_ADMIN = "admin noscript loading stale"
_CATS = "@slow @connection"
_ADMIN_CATS = "@admin @slow @dangerous @connection"

HELP = """CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:
CACHING (YES|NO)
    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.
GETREDIR
    Return the client ID we are redirecting to when tracking is enabled.
GETNAME
    Return the name of the current connection.
ID
    Return the ID of the current connection.
INFO
    Return information about the current client connection.
KILL <ip:port>
    Kill connection made from <ip:port>.
KILL <option> <value> [<option> <value> [...]]
    Kill connections. Options are:
    * ADDR (<ip:port>|<unixsocket>:0)
      Kill connections made from the specified address
    * LADDR (<ip:port>|<unixsocket>:0)
      Kill connections made to specified local address
    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)
      Kill connections by type.
    * USER <username>
      Kill connections authenticated by <username>.
    * SKIPME (YES|NO)
      Skip killing current connection (default: yes).
    * ID <client-id>
      Kill connections by client id.
    * MAXAGE <maxage>
      Kill connections older than the specified age.
LIST [options ...]
    Return information about client connections. Options:
    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)
      Return clients of specified type.
UNPAUSE
    Stop the current client pause, resuming traffic.
PAUSE <timeout> [WRITE|ALL]
    Suspend all, or just write, clients for <timeout> milliseconds.
REPLY (ON|OFF|SKIP)
    Control the replies sent to the current connection.
SETNAME <name>
    Assign the name <name> to the current connection.
SETINFO <option> <value>
    Set client meta attr. Options are:
    * LIB-NAME: the client lib name.
    * LIB-VER: the client lib version.
UNBLOCK <clientid> [TIMEOUT|ERROR]
    Unblock the specified blocked client.
TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]
         [OPTIN] [OPTOUT] [NOLOOP]
    Control server assisted client side caching.
TRACKINGINFO
    Report tracking status for the current connection.
NO-EVICT (ON|OFF)
    Protect current client connection from eviction.
NO-TOUCH (ON|OFF)
    Will not touch LRU/LFU stats when this mode is on.
HELP
    Prints this help.""".split("\n")


def syntax_error_for(argv: list[bytes], container: str = "CLIENT") -> ReplyError:
    """Redis's addReplySubcommandSyntaxError."""
    sub = argv[1].decode("utf-8", "replace")
    return ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {container} HELP.")


@command("CLIENT|ID", 2, _USER, categories=_CATS, group="connection", since="5.0.0")
def client_id(ctx: Ctx, argv: list[bytes]):
    """CLIENT ID"""
    return ctx.client.id


@command("CLIENT|INFO", 2, _USER, categories=_CATS, group="connection", since="6.2.0")
def client_info(ctx: Ctx, argv: list[bytes]):
    """CLIENT INFO"""
    return Verbatim(client_line(ctx.client, "client|info", argv) + "\n")


@command("CLIENT|LIST", -2, _ADMIN, categories=_ADMIN_CATS, group="connection", since="2.4.0")
def client_list(ctx: Ctx, argv: list[bytes]):
    """CLIENT LIST [TYPE <NORMAL | MASTER | REPLICA | PUBSUB>] [ID client-id [client-id ...]]"""
    clients = visible_clients(ctx)  # a tenant sees only its own connections
    if len(argv) == 2:
        chosen = list(clients.values())
    elif len(argv) == 4 and argv[2].upper() == b"TYPE":
        kind = _client_type_arg(argv[3])
        chosen = [c for c in clients.values() if client_type(c) == kind]
    elif len(argv) > 3 and argv[2].upper() == b"ID":
        ids = [parse_int(raw, "ERR Invalid client ID") for raw in argv[3:]]
        chosen = [clients[i] for i in ids if i in clients]
    else:
        raise ReplyError(errors.SYNTAX)
    me = ctx.client
    return Verbatim("".join(client_line(c, *(("client|list", argv) if c is me else ())) + "\n" for c in chosen))


def _client_type_arg(raw: bytes) -> str:
    kind = CLIENT_TYPES.get(raw.decode("utf-8", "replace").lower())
    if kind is None:
        raise ReplyError(f"ERR Unknown client type '{raw.decode('utf-8', 'replace')}'")
    return kind


@command("CLIENT|KILL", -3, _ADMIN, categories=_ADMIN_CATS, group="connection", since="2.4.0")
def client_kill(ctx: Ctx, argv: list[bytes]):
    """CLIENT KILL <ip:port | <[ID client-id] | [TYPE <NORMAL | MASTER | SLAVE | REPLICA | PUBSUB>] |
    [USER username] | [ADDR ip:port] | [LADDR ip:port] | [SKIPME <YES | NO>] | [MAXAGE maxage]>
    [[ID client-id] | ... ]>"""
    clients = visible_clients(ctx)  # a tenant can kill only its own connections
    if len(argv) == 3:
        addr = argv[2].decode("utf-8", "replace")
        target = next((c for c in clients.values() if c.addr == addr), None)
        if target is None:
            raise ReplyError("ERR No such client")
        _kill(target, ctx.client)
        return OK
    if len(argv) % 2:
        raise ReplyError(errors.SYNTAX)
    tests, skipme = _kill_filters(ctx, argv)
    killed = 0
    for client in list(clients.values()):
        if (skipme and client is ctx.client) or not all(test(client) for test in tests):
            continue
        _kill(client, ctx.client)
        killed += 1
    return killed


def _kill_filters(ctx: Ctx, argv: list[bytes]) -> tuple[list, bool]:
    """The CLIENT KILL filter options as predicates, and SKIPME."""
    tests = []
    skipme = True
    for i in range(2, len(argv), 2):
        option, raw = argv[i].upper(), argv[i + 1]
        text = raw.decode("utf-8", "replace")
        if option == b"ID":
            wanted = _parse_or(raw, -1)
            if wanted <= 0:
                raise ReplyError("ERR client-id should be greater than 0")
            tests.append(lambda c, w=wanted: c.id == w)
        elif option == b"TYPE":
            kind = _client_type_arg(raw)
            tests.append(lambda c, k=kind: client_type(c) == k)
        elif option == b"USER":
            if not _user_exists(ctx, text):
                raise ReplyError(f"ERR No such user '{text}'")
            tests.append(lambda c, u=text: c.user == u)
        elif option in (b"ADDR", b"LADDR"):
            attr = "addr" if option == b"ADDR" else "laddr"
            tests.append(lambda c, a=attr, t=text: getattr(c, a) == t)
        elif option == b"SKIPME" and raw.lower() in (b"yes", b"no"):
            skipme = raw.lower() == b"yes"
        elif option == b"MAXAGE":
            age = parse_int(raw)
            tests.append(lambda c, a=age: time.time() - c.created >= a)
        else:
            raise ReplyError(errors.SYNTAX)
    return tests, skipme


def _parse_or(raw: bytes, default: int) -> int:
    try:
        return parse_int(raw)
    except ReplyError:
        return default


def _user_exists(ctx: Ctx, name: str) -> bool:
    acl = ctx.server.parts.acl
    users = getattr(acl, "users", None)
    return name == "default" or (users is not None and name in users)


def _kill(target: Client, me: Client) -> None:
    """Close a client: the caller after this reply, another one at once."""
    if target.conn is None:
        return
    target.conn.close_soon()
    if target is not me:
        target.conn.flush()


@command("CLIENT|SETNAME", 3, _USER, categories=_CATS, group="connection", since="2.6.9")
def client_setname(ctx: Ctx, argv: list[bytes]):
    """CLIENT SETNAME connection-name"""
    if not valid_attr(argv[2]):
        raise ReplyError("ERR Client names cannot contain spaces, newlines or special characters.")
    ctx.client.name = argv[2]
    return OK


@command("CLIENT|GETNAME", 2, _USER, categories=_CATS, group="connection", since="2.6.9")
def client_getname(ctx: Ctx, argv: list[bytes]):
    """CLIENT GETNAME"""
    return ctx.client.name or None


@command("CLIENT|SETINFO", 4, _USER, categories=_CATS, group="connection", since="7.2.0",
         summary="Set client or connection specific info")
def client_setinfo(ctx: Ctx, argv: list[bytes]):
    """CLIENT SETINFO <LIB-NAME libname | LIB-VER libver>"""
    option = argv[2].decode("utf-8", "replace")
    if option.lower() not in ("lib-name", "lib-ver"):
        raise ReplyError(f"ERR Unrecognized option '{option}'")
    if not valid_attr(argv[3]):
        raise ReplyError(f"ERR {option} cannot contain spaces, newlines or special characters.")
    if option.lower() == "lib-name":
        ctx.client.lib_name = argv[3]
    else:
        ctx.client.lib_ver = argv[3]
    return OK


@command("CLIENT|REPLY", 3, _USER, categories=_CATS, group="connection", since="3.2.0")
def client_reply(ctx: Ctx, argv: list[bytes]):
    """CLIENT REPLY <ON | OFF | SKIP>"""
    mode = argv[2].lower()
    if mode == b"on":
        ctx.client.reply_mode = "on"
        return OK
    if mode == b"off":
        ctx.client.reply_mode = "off"
    elif mode == b"skip":
        if ctx.client.reply_mode != "off":
            ctx.client.reply_mode = "skip_next"
    else:
        raise ReplyError(errors.SYNTAX)
    return None


@command("CLIENT|PAUSE", -3, _ADMIN, categories=_ADMIN_CATS, group="connection", since="3.0.0")
def client_pause(ctx: Ctx, argv: list[bytes]):
    """CLIENT PAUSE timeout [WRITE | ALL]"""
    if len(argv) > 4:
        raise syntax_error_for(argv)
    ms = parse_int(argv[2], errors.NOT_INT_TIMEOUT)
    if ms < 0:
        raise ReplyError(errors.NEGATIVE_TIMEOUT)
    mode = argv[3].lower() if len(argv) == 4 else b"all"
    if mode not in (b"write", b"all"):
        raise ReplyError("ERR CLIENT PAUSE mode must be WRITE or ALL")
    ctx.server.pause.pause(ms / 1000.0, mode.decode())
    return OK


@command("CLIENT|UNPAUSE", 2, _ADMIN, categories=_ADMIN_CATS, group="connection", since="6.2.0")
def client_unpause(ctx: Ctx, argv: list[bytes]):
    """CLIENT UNPAUSE"""
    ctx.server.pause.unpause()
    return OK


@command("CLIENT|NO-EVICT", 3, _ADMIN, categories=_ADMIN_CATS, group="connection", since="7.0.0")
def client_no_evict(ctx: Ctx, argv: list[bytes]):
    """CLIENT NO-EVICT <ON | OFF>"""
    ctx.client.no_evict = _on_off(argv[2])
    return OK


@command("CLIENT|NO-TOUCH", 3, _USER, categories=_CATS, group="connection", since="7.2.0",
         summary="Controls whether commands sent by the client will alter the LRU/LFU of the keys they access.")
def client_no_touch(ctx: Ctx, argv: list[bytes]):
    """CLIENT NO-TOUCH <ON | OFF>"""
    ctx.client.no_touch = _on_off(argv[2])
    return OK


def _on_off(raw: bytes) -> bool:
    value = raw.lower()
    if value not in (b"on", b"off"):
        raise ReplyError(errors.SYNTAX)
    return value == b"on"


@command("CLIENT|UNBLOCK", -3, _ADMIN, categories=_ADMIN_CATS, group="connection", since="5.0.0")
def client_unblock(ctx: Ctx, argv: list[bytes]):
    """CLIENT UNBLOCK client-id [TIMEOUT | ERROR]"""
    if len(argv) > 4:
        raise syntax_error_for(argv)
    target_id = parse_int(argv[2])
    with_error = False
    if len(argv) == 4:
        reason = argv[3].upper()
        if reason not in (b"TIMEOUT", b"ERROR"):
            raise ReplyError("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        with_error = reason == b"ERROR"
    server = ctx.server
    target = server.clients.get(target_id)
    if target is None or target.blocked is None or server.pause.is_postponed(target):
        return 0
    return int(server.blocking.unblock_by_request(target, with_error))


@command("CLIENT|HELP", 2, "loading stale", categories=_CATS, group="connection", since="5.0.0")
def client_help(ctx: Ctx, argv: list[bytes]):
    """CLIENT HELP"""
    return [Status(line) for line in HELP]
