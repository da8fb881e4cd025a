"""Introspection: COMMAND (COUNT INFO DOCS LIST GETKEYS GETKEYSANDFLAGS HELP) and INFO.

COMMAND answers from the live command table, so what it reports (arity, flags, key positions)
is what the dispatcher enforces; ``command_meta`` adds Redis's docs, tips and key specs.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import SetReply, Status, Verbatim
from pion.server.admin.command_meta import command_docs, command_info, keys_with_flags
from pion.server.admin.info import render_info
from pion.server.context import Ctx
from pion.server.registry import CommandSpec, CommandTable, command
from pion.storage.glob import glob_match

_FLAGS = "loading stale"
_CATS = "@slow @connection"

HELP = [
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Prints this help.",
]


def find_spec(table: CommandTable, name: bytes) -> CommandSpec | None:
    """A command by name, or a subcommand by its full name (``client|list``)."""
    container, bar, sub = name.lower().partition(b"|")
    spec = table.by_name.get(container)
    if spec is None or not bar:
        return spec
    return spec.subcommands.get(sub)


@command("COMMAND", -1, _FLAGS, categories=_CATS, group="server", since="2.8.13")
def command_(ctx: Ctx, argv: list[bytes]):
    """COMMAND"""
    return [command_info(spec) for spec in ctx.server.table]


@command("COMMAND|COUNT", 2, _FLAGS, categories=_CATS, group="server", since="2.8.13")
def command_count(ctx: Ctx, argv: list[bytes]):
    """COMMAND COUNT"""
    return len(ctx.server.table)


@command("COMMAND|INFO", -2, _FLAGS, categories=_CATS, group="server", since="2.8.13")
def command_info_(ctx: Ctx, argv: list[bytes]):
    """COMMAND INFO [command-name [command-name ...]]"""
    table = ctx.server.table
    if len(argv) == 2:
        return [command_info(spec) for spec in table]
    out = []
    for name in argv[2:]:
        spec = find_spec(table, name)
        out.append(None if spec is None else command_info(spec))
    return out


@command("COMMAND|DOCS", -2, _FLAGS, categories=_CATS, group="server", since="7.0.0")
def command_docs_(ctx: Ctx, argv: list[bytes]):
    """COMMAND DOCS [command-name [command-name ...]]"""
    table = ctx.server.table
    if len(argv) == 2:
        return {spec.name.encode(): command_docs(spec) for spec in table}
    out = {}
    for name in argv[2:]:
        spec = find_spec(table, name)
        if spec is not None:
            out[spec.full_name.lower().encode()] = command_docs(spec)
    return out


@command("COMMAND|LIST", -2, _FLAGS, categories=_CATS, group="server", since="7.0.0")
def command_list(ctx: Ctx, argv: list[bytes]):
    """COMMAND LIST [FILTERBY <MODULE module-name | ACLCAT category | PATTERN pattern>]"""
    specs = [spec for top in ctx.server.table for spec in (top, *top.subcommands.values())]
    if len(argv) == 2:
        return [spec.full_name.lower().encode() for spec in specs]
    if len(argv) != 5 or argv[2].upper() != b"FILTERBY":
        raise ReplyError(errors.SYNTAX)
    kind, value = argv[3].upper(), argv[4]
    if kind == b"MODULE":
        return []
    if kind == b"ACLCAT":
        category = "@" + value.decode("utf-8", "replace").lower()
        return [spec.full_name.lower().encode() for spec in specs if category in spec.categories]
    if kind == b"PATTERN":
        return [spec.full_name.lower().encode() for spec in specs
                if glob_match(value, spec.full_name.lower().encode(), nocase=True)]
    raise ReplyError(errors.SYNTAX)


@command("COMMAND|GETKEYS", -4, _FLAGS, categories=_CATS, group="server", since="2.8.13")
def command_getkeys(ctx: Ctx, argv: list[bytes]):
    """COMMAND GETKEYS command [arg [arg ...]]"""
    args = argv[2:]
    return [args[pos] for pos, _ in _keys_of(ctx, args)]


@command("COMMAND|GETKEYSANDFLAGS", -4, _FLAGS, categories=_CATS, group="server", since="7.0.0")
def command_getkeysandflags(ctx: Ctx, argv: list[bytes]):
    """COMMAND GETKEYSANDFLAGS command [arg [arg ...]]"""
    args = argv[2:]
    return [[args[pos], SetReply(Status(flag) for flag in flags)] for pos, flags in _keys_of(ctx, args)]


def _keys_of(ctx: Ctx, args: list[bytes]) -> list[tuple[int, list[str]]]:
    """Redis's getKeysSubcommandImpl checks, then the keys of ``args`` with their flags."""
    spec = ctx.server.table.get(args[0])
    if spec is not None and spec.subcommands and len(args) > 1:
        spec = spec.subcommands.get(args[1].lower())
    if spec is None:
        raise ReplyError("ERR Invalid command specified")
    if spec.first_key <= 0 and spec.key_finder is None and "movablekeys" not in spec.flags:
        raise ReplyError("ERR The command has no key arguments")
    if (spec.arity > 0 and len(args) != spec.arity) or len(args) < -spec.arity:
        raise ReplyError("ERR Invalid number of arguments specified for command")
    keys = keys_with_flags(spec, args)
    if not keys and "no_mandatory_keys" not in spec.flags:
        raise ReplyError("ERR Invalid arguments specified for command")
    return keys


@command("COMMAND|HELP", 2, _FLAGS, categories=_CATS, group="server", since="5.0.0")
def command_help(ctx: Ctx, argv: list[bytes]):
    """COMMAND HELP"""
    return [Status(line) for line in HELP]


@command("INFO", -1, "loading stale", categories="@slow @dangerous", group="server")
def info(ctx: Ctx, argv: list[bytes]):
    """INFO [section [section ...]]"""
    names = [arg.decode("utf-8", "replace") for arg in argv[1:]]
    if ctx.client.tenant is not None:  # a tenant sees its own usage and keyspace, not the server's
        from pion.server.security.tenants import tenant_info

        return Verbatim(tenant_info(ctx, names))
    return Verbatim(render_info(ctx.server, names))
