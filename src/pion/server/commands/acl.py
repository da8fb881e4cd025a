"""ACL: the users are the default user (``requirepass``) and the ``--tenant`` users, fixed at start.

WHOAMI, USERS, LIST, GETUSER, CAT, DRYRUN, LOG, GENPASS and HELP describe them truthfully, with
Redis 7's reply shapes: a tenant's command rules are generated from the same check that refuses
its commands (``pion.server.tenants.tenant_denied``), and its keys (``~*``) and channels (``&*``)
are all of its own keyspace and hub. SETUSER, DELUSER, SAVE and LOAD answer a clear error: users
change by editing the flags or the tenants file and restarting.
"""

from __future__ import annotations

import secrets

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.args import parse_int
from pion.server.auth import User, users_of
from pion.server.context import Ctx
from pion.server.registry import command
from pion.server.tenants import tenant_denied, tenant_rules

_USER = "noscript loading stale"
_ADMIN = "admin noscript loading stale"
_ADMIN_CATS = "@admin @slow @dangerous"
FIXED_USERS = ("is not supported by Pion: the users are the default user (requirepass) and the --tenant "
               "users, fixed at start; edit the flags or the --tenants-file and restart")

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


def _rules(ctx: Ctx, user: User) -> str:
    return "+@all" if user.tenant is None else tenant_rules(ctx.server.table)


def _flags(user: User) -> list[bytes]:
    return [b"on"] + ([b"nopass"] if user.digest is None else [])


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
    lines = []
    for name in sorted(users):
        user = users[name]
        password = "nopass" if user.digest is None else "#" + user.digest.hex()
        lines.append(f"user {name} on {password} ~* &* {_rules(ctx, user)}".encode())
    return lines


@command("ACL|GETUSER", 3, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_getuser(ctx: Ctx, argv: list[bytes]):
    """ACL GETUSER username"""
    user = users_of(ctx.server).get(argv[2].decode("utf-8", "replace"))
    if user is None:
        return None
    return {
        b"flags": _flags(user),
        b"passwords": [] if user.digest is None else [user.digest.hex().encode()],
        b"commands": _rules(ctx, user).encode(),
        b"keys": b"~*",
        b"channels": b"&*",
        b"selectors": [],
    }


@command("ACL|CAT", -2, _USER, categories="@slow", group="server", since="6.0.0")
def acl_cat(ctx: Ctx, argv: list[bytes]):
    """ACL CAT [category]"""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity("acl|cat"))
    specs = [s for top in ctx.server.table for s in [top, *top.subcommands.values()] if s.handler is not None]
    categories = sorted({cat[1:] for spec in specs for cat in spec.categories})
    if len(argv) == 2:
        return [cat.encode() for cat in categories]
    wanted = argv[2].decode("utf-8", "replace")
    if wanted.lower() not in categories:
        raise ReplyError(f"ERR Unknown category '{wanted}'")
    return sorted(spec.full_name.encode() for spec in specs if "@" + wanted.lower() in spec.categories)


@command("ACL|DRYRUN", -4, _ADMIN, categories=_ADMIN_CATS, group="server", since="7.0.0")
def acl_dryrun(ctx: Ctx, argv: list[bytes]):
    """ACL DRYRUN username command [arg [arg ...]]"""
    name = argv[2].decode("utf-8", "replace")
    user = users_of(ctx.server).get(name)
    if user is None:
        raise ReplyError(f"ERR User '{name}' not found")
    if ctx.server.table.get(argv[3]) is None:
        raise ReplyError(f"ERR Command '{argv[3].decode('utf-8', 'replace')}' not found")
    spec = ctx.server.dispatcher.lookup(argv[3:])
    if isinstance(spec, ReplyError):
        raise spec
    if user.tenant is not None and tenant_denied(spec):
        return f"User {name} has no permissions to run the '{spec.full_name}' command".encode()
    return OK


@command("ACL|LOG", -2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_log(ctx: Ctx, argv: list[bytes]):
    """ACL LOG [count | RESET]"""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity("acl|log"))
    log = users_of(ctx.server).log
    if len(argv) == 3 and argv[2].upper() == b"RESET":
        log.entries.clear()
        return OK
    count = parse_int(argv[2]) if len(argv) == 3 else None
    return log.reply(None if count is None else max(count, 0))


@command("ACL|GENPASS", -2, _USER, categories="@slow", group="server", since="6.0.0")
def acl_genpass(ctx: Ctx, argv: list[bytes]):
    """ACL GENPASS [bits]"""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity("acl|genpass"))
    bits = parse_int(argv[2]) if len(argv) == 3 else 256
    if not 0 < bits <= 4096:
        raise ReplyError("ERR ACL GENPASS argument must be the number of bits for the output password, "
                         "a positive number up to 4096")
    chars = (bits + 3) // 4
    return secrets.token_hex((chars + 1) // 2)[:chars].encode()


@command("ACL|SETUSER", -3, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
@command("ACL|DELUSER", -3, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
@command("ACL|SAVE", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
@command("ACL|LOAD", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="6.0.0")
def acl_fixed(ctx: Ctx, argv: list[bytes]):
    """ACL SETUSER|DELUSER|SAVE|LOAD ... (refused: the users are fixed at start)"""
    raise ReplyError(f"ERR ACL {argv[1].decode('utf-8', 'replace').upper()} {FIXED_USERS}")


@command("ACL|HELP", 2, "loading stale", categories="@slow", group="server", since="6.0.0")
def acl_help(ctx: Ctx, argv: list[bytes]):
    """ACL HELP"""
    return [Status(line) for line in HELP]
