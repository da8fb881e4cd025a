"""Where the ACL rules meet the command table: the catalog the rules see, the keys and channels
of a command, and the admission check with Redis 7.0's -NOPERM texts (those of the reference
redis-server 7.0.15 and its Tcl suite) and ACL LOG entries.

Keys come from the command table's key specifications (``command_meta.keys_with_flags``: Redis's
key specs for the commands Redis has, the declared key range of Pion's own), so a command added
to the table is covered without a line here. ``refusal`` is what admission calls (today from the
guard ``auth.install`` builds): one dictionary lookup for a user that may run everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from pion.protocol.errors import ReplyError
from pion.server.admin.command_meta import categories_of, keys_with_flags
from pion.server.security.acl_rules import READ, WRITE, Catalog, CommandRef
from pion.server.security.acl_users import DENIED_CHANNEL, DENIED_CMD, DENIED_KEY, OK, User

if TYPE_CHECKING:
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec, CommandTable
    from pion.server.security.auth import Users

_CATALOGS: WeakKeyDictionary = WeakKeyDictionary()
_WRITE_FLAGS = {"insert", "delete", "update"}
#: commands whose arguments are channels: (first position, is a pattern) as getChannelsFromCommand
_CHANNEL_ARGS = {"publish": (1, False, True), "spublish": (1, False, True), "subscribe": (1, False, False),
                 "ssubscribe": (1, False, False), "psubscribe": (1, True, False)}


class TableCatalog(Catalog):
    """A ``Catalog`` that also maps each name back to the command table's spec."""

    def __init__(self, table: CommandTable) -> None:
        specs: dict[str, CommandSpec] = {}
        refs = []
        for top in table:
            subs = [s for s in top.subcommands.values() if s.handler is not None]
            for spec in ([top] if top.handler is not None or subs else []) + subs:
                name = spec.full_name.lower()
                specs[name] = spec
                refs.append(CommandRef(
                    name, spec.container, tuple(s.full_name.lower() for s in subs) if spec is top else (),
                    frozenset(cat.lstrip("@") for cat in categories_of(spec)) if spec.handler is not None
                    else frozenset(), "no_auth" in spec.flags))
        super().__init__(refs)
        self.specs = specs


def catalog_of(table: CommandTable) -> TableCatalog:
    found = _CATALOGS.get(table)
    if found is None:
        found = _CATALOGS[table] = TableCatalog(table)
    return found


def key_access(catalog: TableCatalog) -> Any:
    """The ``KeyFinder`` for ``User.check``: key positions with READ/WRITE from the key specs."""

    def find(ref: CommandRef, argv: list[bytes]) -> list[tuple[int, int]]:
        spec = catalog.specs[ref.name]
        found = []
        for pos, flags in keys_with_flags(spec, argv):
            lowered = {flag.lower() for flag in flags}
            if "not_key" in lowered:  # a shard channel (SPUBLISH, SSUBSCRIBE): checked as a channel
                continue
            found.append((pos, (READ if "access" in lowered else 0) | (WRITE if lowered & _WRITE_FLAGS else 0)))
        return found

    return find


def channel_args(ref: CommandRef, argv: list[bytes]) -> list[tuple[int, bool]]:
    """The ``ChannelFinder``: the channels PUBLISH and the SUBSCRIBE family name."""
    entry = _CHANNEL_ARGS.get(ref.name)
    if entry is None:
        return []
    first, is_pattern, single = entry
    end = first + 1 if single else len(argv)
    return [(pos, is_pattern) for pos in range(first, min(end, len(argv)))]


def check(users: Users, user: User, spec: CommandSpec, argv: list[bytes]) -> tuple[int, int]:
    """(OK, 0) or (refusal kind, argv position) for ``user`` running ``argv``."""
    catalog = users.table.catalog
    ref = catalog.lookup(spec.full_name)
    if ref is None:  # a container without a handler of its own (COMMAND needs its subcommand)
        return DENIED_CMD, 0
    return user.check(ref, argv, key_access(catalog), channel_args)  # type: ignore[arg-type]


def has_full_key_access(users: Users, user_name: str, name: str, argv: list[bytes]) -> bool:
    """Whether ``user_name`` may read every key while running ``argv`` (command ``name``):
    Redis's ACLUserCheckCmdWithUnrestrictedKeyAccess with CMD_KEY_ACCESS, for SORT BY/GET."""
    user = users.table.users.get(user_name)
    if user is None or is_unrestricted(user):
        return True
    catalog = users.table.catalog
    ref = catalog.lookup(name)
    return ref is not None and user.has_unrestricted_key_access(ref, argv, key_access(catalog), channel_args, READ)


def is_unrestricted(user: User) -> bool:
    root = user.root
    return root.allcommands and root.allkeys and root.allchannels


def message(kind: int, user: User, spec: CommandSpec, argv: list[bytes], pos: int, verbose: bool) -> str:
    """Redis 7.0's texts: processCommand's -NOPERM ones, or (``verbose``) ACL DRYRUN's, which
    name the key or channel."""
    if verbose:
        if kind == DENIED_CMD:
            return f"This user has no permissions to run the '{spec.full_name}' command"
        what = "key" if kind == DENIED_KEY else "channel"
        return f"This user has no permissions to access the '{_text(argv[pos])}' {what}"
    if kind == DENIED_CMD:
        return f"this user has no permissions to run the '{spec.full_name}' command"
    what = "keys" if kind == DENIED_KEY else "channels"
    return f"this user has no permissions to access one of the {what} used as arguments"


#: getAclErrorMessage: what a script's refused redis.call says after "The user executing the script "
_SCRIPT_REASONS = {DENIED_CMD: "can't run this command or subcommand",
                   DENIED_KEY: "can't access at least one of the keys mentioned in the command arguments",
                   DENIED_CHANNEL: "can't publish to the channel mentioned in the command"}
_EXEC_REASONS = {DENIED_CMD: "no permission to execute the command or subcommand",
                 DENIED_KEY: "no permission to touch the specified keys",
                 DENIED_CHANNEL: "no permission to access one of the channels used as arguments"}


def refusal(users: Users, client: Client, spec: CommandSpec, argv: list[bytes]) -> ReplyError | None:
    """The ACL part of admission: None, or the -NOPERM error (logged to ACL LOG) Redis gives at
    top level, inside MULTI (queued and again at EXEC, as multi.c) and from a script."""
    user = users.table.users.get(client.user)
    if user is None or is_unrestricted(user):
        return None
    kind, pos = check(users, user, spec, argv)
    if kind == OK:
        return None
    obj = spec.full_name if kind == DENIED_CMD else _text(argv[pos])
    users.log.add(client, {DENIED_CMD: "command", DENIED_KEY: "key", DENIED_CHANNEL: "channel"}[kind],
                  obj, client.user)
    if client.in_script:
        return ReplyError("ERR The user executing the script " + _SCRIPT_REASONS[kind])
    if client.executing:
        return ReplyError("NOPERM ACLs rules changed between the moment the transaction was accumulated and "
                          "the EXEC call. This command is no longer allowed for the following reason: "
                          + _EXEC_REASONS[kind])
    return ReplyError("NOPERM " + message(kind, user, spec, argv, pos, False))


def _text(raw: Any) -> str:
    return bytes(raw).decode("utf-8", "replace")
