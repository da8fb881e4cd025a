"""Server administration: TIME LASTSAVE SHUTDOWN SLOWLOG LATENCY MONITOR LOLWUT ROLE REPLICAOF
MODULE.

MEMORY and DEBUG live in ``server_debug``. LATENCY answers as Redis does with latency monitoring
off (Pion does not sample event latencies): LATEST and HISTORY are empty.
"""

from __future__ import annotations

import time

from pion import __version__
from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status, Verbatim
from pion.server.admin.info import REDIS_VERSION
from pion.server.admin.latency import doctor_report
from pion.server.args import parse_int
from pion.server.commands.control.client import syntax_error_for
from pion.server.context import Ctx
from pion.server.registry import command

_ADMIN = "admin noscript loading stale"
_ADMIN_CATS = "@admin @slow @dangerous"


def help_lines(lines: list[str]) -> list[Status]:
    return [Status(line) for line in [*lines, "HELP", "    Prints this help."]]


@command("TIME", 1, "loading stale fast", categories="@fast", group="server", since="2.6.0")
def time_(ctx: Ctx, argv: list[bytes]):
    """TIME"""
    now = time.time_ns() // 1000
    return [b"%d" % (now // 1_000_000), b"%d" % (now % 1_000_000)]


@command("LASTSAVE", 1, "loading stale fast", categories="@admin @fast @dangerous", group="server")
def lastsave(ctx: Ctx, argv: list[bytes]):
    """LASTSAVE

    The persistence engine's last successful snapshot time; 0 while there is none.
    """
    engine = ctx.server.parts.persistence
    value = getattr(engine, "lastsave", 0) if engine is not None else 0
    return int(value() if callable(value) else value)


@command("SHUTDOWN", -1, "admin noscript loading stale no_multi allow_busy", categories=_ADMIN_CATS,
         group="server")
def shutdown(ctx: Ctx, argv: list[bytes]):
    """SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]

    Pion stops at once (it never waits for replicas): NOW and FORCE are accepted and change
    nothing. SAVE asks the persistence engine for a snapshot first; the mode is left in
    ``server.shutdown_mode`` for durability's final save. On success the connection closes unanswered.
    """
    options = {arg.upper() for arg in argv[1:]}
    if len(options) != len(argv) - 1 or not options <= {b"NOSAVE", b"SAVE", b"NOW", b"FORCE", b"ABORT"}:
        raise ReplyError(errors.SYNTAX)
    if {b"NOSAVE", b"SAVE"} <= options or (b"ABORT" in options and len(options) > 1):
        raise ReplyError(errors.SYNTAX)
    if b"ABORT" in options:
        raise ReplyError("ERR No shutdown in progress.")
    server = ctx.server
    engine = server.parts.persistence
    if b"SAVE" in options and engine is not None and callable(getattr(engine, "save", None)):
        try:
            engine.save()
        except Exception:
            if b"FORCE" not in options:
                raise ReplyError("ERR Errors trying to SHUTDOWN. Check logs.") from None
    server.shutdown_mode = "nosave" if b"NOSAVE" in options else "save" if b"SAVE" in options else "default"
    ctx.client.reply_mode = "off"
    if ctx.client.conn is not None:
        ctx.client.conn.close_soon()
    server.request_shutdown()
    return None


# -- SLOWLOG ------------------------------------------------------------------------------------------

SLOWLOG_HELP = [
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
]


@command("SLOWLOG|GET", -2, "admin loading stale", categories=_ADMIN_CATS, group="server", since="2.2.12")
def slowlog_get(ctx: Ctx, argv: list[bytes]):
    """SLOWLOG GET [count]"""
    if len(argv) > 3:
        raise syntax_error_for(argv, "SLOWLOG")
    count = 10
    if len(argv) == 3:
        count = parse_int(argv[2], "ERR count should be greater than or equal to -1")
        if count < -1:
            raise ReplyError("ERR count should be greater than or equal to -1")
    entries = list(ctx.server.slowlog.entries) if ctx.server.slowlog is not None else []
    if count != -1:
        entries = entries[:count]
    return [[e[0], e[1], e[2], list(e[3]), e[4], e[5]] for e in entries]


@command("SLOWLOG|LEN", 2, "admin loading stale", categories=_ADMIN_CATS, group="server", since="2.2.12")
def slowlog_len(ctx: Ctx, argv: list[bytes]):
    """SLOWLOG LEN"""
    return len(ctx.server.slowlog.entries) if ctx.server.slowlog is not None else 0


@command("SLOWLOG|RESET", 2, "admin loading stale", categories=_ADMIN_CATS, group="server", since="2.2.12")
def slowlog_reset(ctx: Ctx, argv: list[bytes]):
    """SLOWLOG RESET"""
    if ctx.server.slowlog is not None:
        ctx.server.slowlog.reset()
    return OK


@command("SLOWLOG|HELP", 2, "loading stale", categories="@slow", group="server", since="6.2.0")
def slowlog_help(ctx: Ctx, argv: list[bytes]):
    """SLOWLOG HELP"""
    return help_lines(SLOWLOG_HELP)


# -- LATENCY (pion.server.admin.latency) --------------------------------------------------------------------------

LATENCY_HELP = [
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
]
@command("LATENCY|LATEST", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="2.8.13")
def latency_latest(ctx: Ctx, argv: list[bytes]):
    """LATENCY LATEST

    Per event (pion.server.admin.latency): the time and latency of its last sample, and its all-time high.
    """
    return ctx.server.latency.latest()


@command("LATENCY|HISTORY", 3, _ADMIN, categories=_ADMIN_CATS, group="server", since="2.8.13")
def latency_history(ctx: Ctx, argv: list[bytes]):
    """LATENCY HISTORY event"""
    return ctx.server.latency.history(argv[2].decode("utf-8", "replace"))


@command("LATENCY|RESET", -2, _ADMIN, categories=_ADMIN_CATS, group="server", since="2.8.13")
def latency_reset(ctx: Ctx, argv: list[bytes]):
    """LATENCY RESET [event [event ...]]"""
    return ctx.server.latency.reset([raw.decode("utf-8", "replace") for raw in argv[2:]])


@command("LATENCY|GRAPH", 3, _ADMIN, categories=_ADMIN_CATS, group="server", since="2.8.13")
def latency_graph(ctx: Ctx, argv: list[bytes]):
    """LATENCY GRAPH event

    Redis's header line, then one column per sample (oldest first), four rows high.
    """
    event = argv[2].decode("utf-8", "replace")
    samples = ctx.server.latency.history(event)
    if not samples:
        raise ReplyError(f"ERR No samples available for event '{event}'")
    values = [ms for _, ms in samples]
    peak = ctx.server.latency.events[event][1]
    top = max(values) or 1
    lines = [f"{event} - high {max(values)} ms, low {min(values)} ms (all time high {peak} ms)", "-" * 80]
    for row in range(4, 0, -1):
        lines.append("".join("#" if value * 4 >= row * top else " " for value in values).rstrip())
    return Verbatim("\n".join(lines) + "\n")


@command("LATENCY|DOCTOR", 2, _ADMIN, categories=_ADMIN_CATS, group="server", since="2.8.13")
def latency_doctor(ctx: Ctx, argv: list[bytes]):
    """LATENCY DOCTOR"""
    return Verbatim(doctor_report(ctx.server.latency, ctx.server.dispatcher.latency_threshold))


@command("LATENCY|HISTOGRAM", -2, _ADMIN, categories=_ADMIN_CATS, group="server", since="7.0.0")
def latency_histogram(ctx: Ctx, argv: list[bytes]):
    """LATENCY HISTOGRAM [command [command ...]]

    Cumulative latency counts per command (``latency-tracking``); a container command stands for
    its subcommands, unknown names are skipped.
    """
    if len(argv) == 2:
        return ctx.server.latency.histogram_reply(None)
    names: list[str] = []
    for raw in argv[2:]:
        parent, _, sub = raw.lower().partition(b"|")
        spec = ctx.server.table.by_name.get(parent)
        if spec is not None and sub:
            spec = spec.subcommands.get(sub)
        if spec is not None:
            names += [s.full_name for s in spec.subcommands.values()] if spec.subcommands else [spec.full_name]
    return ctx.server.latency.histogram_reply(list(dict.fromkeys(names)))


@command("LATENCY|HELP", 2, "loading stale", categories="@slow", group="server", since="2.8.13")
def latency_help(ctx: Ctx, argv: list[bytes]):
    """LATENCY HELP"""
    return help_lines(LATENCY_HELP)


# -- MONITOR, LOLWUT -------------------------------------------------------------------------------------


@command("MONITOR", 1, _ADMIN, categories=_ADMIN_CATS, group="server")
def monitor(ctx: Ctx, argv: list[bytes]):
    """MONITOR

    From now on the client receives every command the server runs, as Redis's feed lines.
    """
    client = ctx.client
    if not ctx.can_block:
        raise ReplyError("ERR MONITOR isn't allowed for DENY BLOCKING client")
    ctx.server.monitors[client.id] = client
    return OK


PAWN = r"""
        _
       (_)
      /   \
      \___/
      /   \
     |     |
    /_______\
   (_________)
"""


@command("LOLWUT", -1, "readonly fast", categories="@read @fast", group="server", since="5.0.0")
def lolwut(ctx: Ctx, argv: list[bytes]):
    """LOLWUT [VERSION version]

    A pawn (French: pion), whatever the version asked.
    """
    if len(argv) >= 3 and argv[1].upper() == b"VERSION":
        parse_int(argv[2])
    return Verbatim(PAWN.lstrip("\n") + f"\nPion ver. {__version__} - Redis ver. {REDIS_VERSION}\n")


# -- MODULE: Pion loads no Redis modules ------------------------------------------------------------------

MODULE_HELP = [
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST", "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]", "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and optional arguments.",
    "UNLOAD <name>", "    Unload a module.",
]


@command("MODULE|LIST", 2, "admin noscript", categories=_ADMIN_CATS, group="server", since="4.0.0")
def module_list(ctx: Ctx, argv: list[bytes]):
    """MODULE LIST

    Pion loads no Redis modules; its built-in engines that stand in for one (search, JSON) are
    listed under the module's name and version, so clients enable their features.
    """
    return [dict(entry) for entry in ctx.server.parts.modules]


def _no_modules(ctx: Ctx, argv: list[bytes]):
    raise ReplyError(f"ERR MODULE {argv[1].decode(errors='replace').upper()} is not supported by Pion: "
                     "it cannot load Redis modules")


@command("MODULE|LOAD", -3, "admin noscript no_async_loading", categories=_ADMIN_CATS, group="server", since="4.0.0")
def module_load(ctx: Ctx, argv: list[bytes]):
    """MODULE LOAD path [arg [arg ...]]"""
    return _no_modules(ctx, argv)


@command("MODULE|LOADEX", -3, "admin noscript no_async_loading", categories=_ADMIN_CATS, group="server", since="7.0.0")
def module_loadex(ctx: Ctx, argv: list[bytes]):
    """MODULE LOADEX path [CONFIG name value [CONFIG name value ...]] [ARGS args [args ...]]"""
    return _no_modules(ctx, argv)


@command("MODULE|UNLOAD", 3, "admin noscript no_async_loading", categories=_ADMIN_CATS, group="server", since="4.0.0")
def module_unload(ctx: Ctx, argv: list[bytes]):
    """MODULE UNLOAD name"""
    return _no_modules(ctx, argv)


@command("MODULE|HELP", 2, "loading stale", categories="@slow", group="server", since="5.0.0")
def module_help(ctx: Ctx, argv: list[bytes]):
    """MODULE HELP"""
    return help_lines(MODULE_HELP)
