"""ACL: Redis 7's users, rules and selectors (``pion.server.security.acl_rules``/``acl_users``), with the
ACL file (``aclfile``) for ACL SAVE/LOAD and restarts.

A ``--tenant`` is a user bound to its own keyspace: ACL SETUSER may change its password and
narrow its rules (keys, channels, commands), but the tenant limits (no @admin, no scripting,
``pion.server.security.tenants``) hold whatever the rules say, and ACL DELUSER refuses it (it owns data;
remove its --tenant and restart). Users made with ACL SETUSER share the main keyspace, as in
Redis. Deleting a user disconnects its clients; narrowing a user's channels disconnects its
subscribers that lost a channel, as Redis does.
"""

from __future__ import annotations

import logging
import os
import secrets

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, SetReply, Status
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.server.security.acl_check import check, message
from pion.server.security.acl_users import DENIED_CMD, User, save_file
from pion.server.security.acl_users import OK as ACL_OK
from pion.server.security.auth import users_of
from pion.server.security.tenants import tenant_denied

log = logging.getLogger("pion.acl")

_USER = "noscript loading stale"
_ADMIN = "admin noscript loading stale"
_ADMIN_CATS = "@admin @slow @dangerous"
NO_ACLFILE = ("ERR This Redis instance is not configured to use an ACL file. Start Pion with --aclfile PATH "
              "(or 'aclfile PATH' in its config file) to keep users across restarts with ACL SAVE.")

HELP = """ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:
CAT [<category>]
    List all commands that belong to <category>, or all command categories
    when no category is specified.
DELUSER <username> [<username> ...]
    Delete a list of users.
DRYRUN <username> <command> [<arg> ...]
    Returns whether the user can execute the given command without executing the command.
GETUSER <username>
    Get the user's details.
GENPASS [<bits>]
    Generate a secure 256-bit user password. The optional `bits` argument can
    be used to specify a different size.
LIST
    Show users details in config file format.
LOAD
    Reload users from the ACL file.
LOG [<count> | RESET]
    Show the ACL log entries.
SAVE
    Save the current config to the ACL file.
SETUSER <username> <attribute> [<attribute> ...]
    Create or modify a user with the specified attributes.
USERS
    List all the registered usernames.
WHOAMI
    Return the current connection username.
HELP
    Prints this help.""".split("\n")

def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _syntax_error(argv: list[bytes]) -> ReplyError:
    """aclCommand's fallback for CAT, LOG and GENPASS with too many arguments (their arity is
    only a minimum): addReplySubcommandSyntaxError, naming the subcommand as typed."""
    return ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{_text(argv[1])[:128]}'. "
                      "Try ACL HELP.")


def aclfile(ctx: Ctx) -> str:
    """The ACL file's path: a relative one is relative to ``dir``, as in Redis (which chdirs there)."""
    path = ctx.server.settings.aclfile
    return os.path.join(ctx.server.settings.dir, path) if path else ""


@command("ACL|WHOAMI", 2, _USER, categories="@slow", group="server", since="6.0.0")
def acl_whoami(ctx: Ctx, argv: list[bytes]):
    """ACL WHOAMI"""
    return ctx.client.user.encode()


@command("ACL|USERS", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_users(ctx: Ctx, argv: list[bytes]):
    """ACL USERS"""
    return [name.encode() for name in sorted(users_of(ctx.server).users)]


@command("ACL|LIST", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_list(ctx: Ctx, argv: list[bytes]):
    """ACL LIST"""
    users = users_of(ctx.server).users
    return [f"user {name} {users[name].describe()}".encode() for name in sorted(users)]


def _selector_fields(selector) -> dict[bytes, bytes]:
    return {b"commands": selector.command_rules().encode(), b"keys": " ".join(selector.key_rules()).encode(),
            b"channels": " ".join(selector.channel_rules()).encode()}


@command("ACL|GETUSER", 3, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_getuser(ctx: Ctx, argv: list[bytes]):
    """ACL GETUSER username"""
    user = users_of(ctx.server).get(_text(argv[2]))
    if user is None:
        return None
    return {
        b"flags": SetReply(flag.encode() for flag in user.flags()),
        b"passwords": list(user.passwords),
        **_selector_fields(user.root),
        b"selectors": [_selector_fields(s) for s in user.selectors[1:]],
    }


@command("ACL|SETUSER", -3, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_setuser(ctx: Ctx, argv: list[bytes]):
    """ACL SETUSER username [rule [rule ...]]"""
    users = users_of(ctx.server)
    name = _text(argv[2])
    before = users.get(name)
    try:
        user = users.table.set_user(name, argv[3:])
    except ValueError as exc:
        raise ReplyError(f"ERR {exc}") from None
    if before is not None:
        _drop_revoked_subscribers(ctx, user)
    return OK


@command("ACL|DELUSER", -3, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_deluser(ctx: Ctx, argv: list[bytes]):
    """ACL DELUSER username [username ...]"""
    users = users_of(ctx.server)
    names = [_text(raw) for raw in argv[2:]]
    if "default" in names:
        raise ReplyError("ERR The 'default' user cannot be removed")
    for name in names:
        user = users.get(name)
        if user is not None and user.tenant is not None:
            raise ReplyError(f"ERR The user '{name}' is a tenant with a keyspace of its own and cannot be removed "
                             "with ACL DELUSER: remove its --tenant and restart")
    deleted = 0
    for name in names:
        if users.users.pop(name, None) is not None:
            _disconnect_user(ctx, name)
            deleted += 1
    return deleted


def _disconnect_user(ctx: Ctx, name: str) -> None:
    """ACLFreeUserAndKillClients: its connections go back to an unauthenticated default, then close."""
    for client in list(ctx.server.clients.values()):
        if client.user != name:
            continue
        client.user, client.authenticated = "default", False
        if client.conn is not None:
            client.conn.close_soon()
            if client is not ctx.client:
                client.conn.flush()


def _drop_revoked_subscribers(ctx: Ctx, user: User) -> None:
    """ACLKillPubsubClientsIfNeeded: subscribers of ``user`` that lost one of their channels."""
    for client in list(ctx.server.clients.values()):
        if client.user != user.name or not client.subscription_count or client.conn is None:
            continue
        lost = (any(not user.can_use_channel(ch, False) for ch in client.subscriptions | client.shard_subscriptions)
                or any(not user.can_use_channel(p, True) for p in client.patterns))
        if lost:
            client.conn.close_soon()
            client.conn.flush()


@command("ACL|CAT", -2, _USER, categories="@slow", group="server", since="6.0.0")
def acl_cat(ctx: Ctx, argv: list[bytes]):
    """ACL CAT [category]"""
    if len(argv) > 3:
        raise _syntax_error(argv)
    catalog = users_of(ctx.server).table.catalog
    if len(argv) == 2:
        return [cat.encode() for cat in catalog.categories]
    wanted = _text(argv[2])
    refs = catalog.by_category.get(wanted.lower())
    if refs is None:
        raise ReplyError(f"ERR Unknown category '{wanted[:128]}'")
    return sorted(ref.name.encode() for ref in refs)


@command("ACL|DRYRUN", -4, _ADMIN, categories=_ADMIN_CATS, group="server", since="7.0.0")
def acl_dryrun(ctx: Ctx, argv: list[bytes]):
    """ACL DRYRUN username command [arg [arg ...]]"""
    users = users_of(ctx.server)
    name = _text(argv[2])
    user = users.get(name)
    if user is None:
        raise ReplyError(f"ERR User '{name}' not found")
    if ctx.server.table.get(argv[3]) is None:
        raise ReplyError(f"ERR Command '{_text(argv[3])}' not found")
    spec = ctx.server.dispatcher.lookup(argv[3:])
    if isinstance(spec, ReplyError):
        raise spec
    command_argv = argv[3:]
    kind, pos = check(users, user, spec, command_argv)
    if kind == ACL_OK and user.tenant is not None and tenant_denied(spec):
        kind = DENIED_CMD
    if kind != ACL_OK:
        return message(kind, user, spec, command_argv, pos, True).encode()
    return OK


@command("ACL|LOG", -2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_log(ctx: Ctx, argv: list[bytes]):
    """ACL LOG [count | RESET]"""
    if len(argv) > 3:
        raise _syntax_error(argv)
    acl_log = users_of(ctx.server).log
    if len(argv) == 3 and argv[2].upper() == b"RESET":
        acl_log.entries.clear()
        return OK
    count = parse_int(argv[2]) if len(argv) == 3 else 10
    return acl_log.reply(max(count, 0))


@command("ACL|GENPASS", -2, _USER, categories="@slow", group="server", since="6.0.0")
def acl_genpass(ctx: Ctx, argv: list[bytes]):
    """ACL GENPASS [bits]"""
    if len(argv) > 3:
        raise _syntax_error(argv)
    bits = parse_int(argv[2]) if len(argv) == 3 else 256
    if not 0 < bits <= 4096:
        raise ReplyError("ERR ACL GENPASS argument must be the number of bits for the output password, "
                         "a positive number up to 4096")
    chars = (bits + 3) // 4
    return secrets.token_hex((chars + 1) // 2)[:chars].encode()


@command("ACL|SAVE", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_save(ctx: Ctx, argv: list[bytes]):
    """ACL SAVE: write every user to the ACL file (a temporary file renamed over it)."""
    path = aclfile(ctx)
    if not path:
        raise ReplyError(NO_ACLFILE)
    try:
        save_file(path, users_of(ctx.server).table.file_text())
    except OSError as exc:
        log.warning("ACL SAVE to %s failed: %s", path, exc)
        raise ReplyError("ERR There was an error trying to save the ACLs. Please check the server logs for more "
                         "information") from None
    return OK


@command("ACL|LOAD", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_load(ctx: Ctx, argv: list[bytes]):
    """ACL LOAD: replace the users with the ACL file's, or change nothing if any line is wrong."""
    path = aclfile(ctx)
    if not path:
        raise ReplyError(NO_ACLFILE)
    users = users_of(ctx.server)
    error = users.table.load_file(path)
    if error is not None:
        raise ReplyError(f"ERR {error}")
    # Redis 7.0 frees every user but the default one (copied in place) and kills their clients,
    # the caller's own connection after this reply; tenants' users stay bound to their keyspaces.
    for name in {client.user for client in ctx.server.clients.values()}:
        user = users.users.get(name)
        if name != "default" and (user is None or user.tenant is None):
            _disconnect_user(ctx, name)
    return OK


@command("ACL|HELP", 2, "loading stale", categories="@slow", group="server", since="6.0.0")
def acl_help(ctx: Ctx, argv: list[bytes]):
    """ACL HELP"""
    return [Status(line) for line in HELP]
