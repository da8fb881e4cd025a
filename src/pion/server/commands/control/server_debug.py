"""MEMORY (USAGE STATS DOCTOR MALLOC-STATS PURGE HELP) and DEBUG.

MEMORY reports Pion's own estimates (``pion.storage.memory``, the same the maxmemory accounting
uses). DEBUG is refused unless
``enable-debug-command`` is ``yes`` (or ``local`` and the client is local), with Redis's text;
it offers SLEEP, OBJECT, SET-ACTIVE-EXPIRE and whatever engines register in
``server.debug_hooks`` (RELOAD, LOADAOF, ...); anything else is a clear error.
"""

from __future__ import annotations

import gc
import time

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Attribute, BigNumber, Push, Replies, SetReply, Status, Verbatim
from pion.server.admin.info import rss_bytes, used_memory
from pion.server.args import parse_float, parse_int
from pion.server.commands.control.client import syntax_error_for
from pion.server.commands.control.server_admin import help_lines
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.encodings import encoding_of
from pion.storage.memory import key_size

MEMORY_HELP = [
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
]


@command("MEMORY|USAGE", -3, "readonly", keys=(2, 2, 1), categories="@read @slow", group="server", since="4.0.0")
def memory_usage(ctx: Ctx, argv: list[bytes]):
    """MEMORY USAGE key [SAMPLES count]"""
    samples = 5
    i = 3
    while i < len(argv):
        if argv[i].upper() == b"SAMPLES" and i + 1 < len(argv):
            samples = parse_int(argv[i + 1])
            if samples < 0:
                raise ReplyError(errors.SYNTAX)
            i += 2
        else:
            raise ReplyError(errors.SYNTAX)
    value = ctx.db.get(argv[2])
    if value is None:
        return None
    return key_size(argv[2], value, samples or 2**62)  # SAMPLES 0 measures every element


@command("MEMORY|STATS", 2, "", categories="@slow", group="server", since="4.0.0")
def memory_stats(ctx: Ctx, argv: list[bytes]):
    """MEMORY STATS"""
    server = ctx.server
    used = max(used_memory(server), 1)
    dataset, keys = _dataset(server)
    out: dict[bytes, object] = {b"peak.allocated": used, b"total.allocated": used, b"startup.allocated": 0,
                                b"replication.backlog": 0, b"clients.slaves": 0,
                                b"clients.normal": _client_buffers(server), b"cluster.links": 0,
                                b"aof.buffer": 0, b"lua.caches": 0, b"functions.caches": 0}
    overhead = 0
    for db in server.dbs:
        if db.data:
            main, expires = db.data.__sizeof__(), db.expires.__sizeof__()
            overhead += main + expires
            out[b"db.%d" % db.index] = {b"overhead.hashtable.main": main, b"overhead.hashtable.expires": expires}
    out.update({
        b"overhead.total": overhead, b"keys.count": keys, b"keys.bytes-per-key": dataset // keys if keys else 0,
        b"dataset.bytes": dataset, b"dataset.percentage": 100.0 * dataset / used if used else 0.0,
        b"peak.percentage": 100.0, b"fragmentation": rss_bytes() / used if used else 0.0,
    })
    return out


def _dataset(server) -> tuple[int, int]:
    """(estimated bytes of the keys and values, number of keys); sampled when the keyspace is big."""
    keys = sum(len(db.data) for db in server.dbs)
    memory = server.parts.memory
    if memory is not None and hasattr(memory, "used_memory"):
        return int(memory.used_memory()), keys
    sample = [(k, v) for db in server.dbs for k, v in list(db.data.items())[:1000]]
    measured = sum(key_size(k, v) for k, v in sample)
    return (measured * keys // len(sample) if sample else 0), keys


def _client_buffers(server) -> int:
    total = 0
    for client in server.clients.values():
        transport = getattr(client.conn, "transport", None)
        if transport is not None and not transport.is_closing():
            total += transport.get_write_buffer_size()
    return total


@command("MEMORY|DOCTOR", 2, "", categories="@slow", group="server", since="4.0.0")
def memory_doctor(ctx: Ctx, argv: list[bytes]):
    """MEMORY DOCTOR"""
    server = ctx.server
    used = used_memory(server)
    limit = server.settings.maxmemory
    if limit and used > 0.9 * limit:
        return Verbatim(f"Sam, I detected a few issues in this Pion instance memory implants:\n\n"
                        f" * High memory use: {used} bytes used of a maxmemory of {limit} bytes (over 90%). "
                        f"Consider raising maxmemory or choosing an eviction policy.\n")
    return Verbatim("Hi Sam, I can't find any memory issue in your instance. "
                    "I can only account for what occurs on this base.")


@command("MEMORY|MALLOC-STATS", 2, "", categories="@slow", group="server", since="4.0.0")
def memory_malloc_stats(ctx: Ctx, argv: list[bytes]):
    """MEMORY MALLOC-STATS"""
    return b"Stats not supported for the current allocator"


@command("MEMORY|PURGE", 2, "", categories="@slow", group="server", since="4.0.0")
def memory_purge(ctx: Ctx, argv: list[bytes]):
    """MEMORY PURGE

    Runs Python's garbage collector, the nearest thing to returning dirty pages.
    """
    gc.collect()
    return OK


@command("MEMORY|HELP", 2, "loading stale", categories="@slow", group="server", since="4.0.0")
def memory_help(ctx: Ctx, argv: list[bytes]):
    """MEMORY HELP"""
    return help_lines(MEMORY_HELP)


# -- DEBUG -----------------------------------------------------------------------------------------------

DEBUG_REFUSED = (
    "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it "
    "from a local connection, otherwise you need to set this option in the configuration file, and then "
    "restart the server."
)
DEBUG_HELP = [
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ERROR <string>",
    "    Return a Redis protocol error with <string> as message. Useful for clients",
    "    unit tests to simulate Redis errors.",
    "OBJECT <key>",
    "    Show low level info about `key` and associated value.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
]


def debug_allowed(ctx: Ctx) -> bool:
    mode = ctx.server.settings.enable_debug_command
    if mode is True or mode == "yes":
        return True
    if mode == "local":
        addr = ctx.client.addr
        return addr.startswith(("127.", "[::1]", "/")) or not addr or addr.startswith(":")
    return False


@command("DEBUG", -2, "admin noscript loading stale", categories="@admin @slow @dangerous", group="server")
def debug(ctx: Ctx, argv: list[bytes]):
    """DEBUG subcommand [argument ...]"""
    if not debug_allowed(ctx):
        raise ReplyError(DEBUG_REFUSED)
    sub = argv[1].decode("utf-8", "replace").lower()
    hook = ctx.server.debug_hooks.get(sub)
    if hook is not None:
        return hook(ctx, argv)
    handler = _DEBUG.get((sub, len(argv))) or _DEBUG.get((sub, 0))
    if handler is None:
        if sub in ("reload", "loadaof", "jmap"):
            raise ReplyError(f"ERR DEBUG {sub.upper()} is not supported by this Pion server")
        raise syntax_error_for(argv, "DEBUG")
    return handler(ctx, argv)


def _debug_help(ctx: Ctx, argv: list[bytes]):
    lines = list(DEBUG_HELP)
    for name in sorted(ctx.server.debug_hooks):
        lines += [name.upper(), "    Provided by a Pion engine."]
    return help_lines(lines)


def _debug_sleep(ctx: Ctx, argv: list[bytes]):
    seconds = parse_float(argv[2])
    time.sleep(max(seconds, 0.0))  # DEBUG SLEEP stops the whole server, as in Redis
    return OK


def _debug_object(ctx: Ctx, argv: list[bytes]):
    key = argv[2]
    db = ctx.db
    value = db.get(key)
    if value is None:
        raise ReplyError(errors.NO_SUCH_KEY)
    encoding = encoding_of(value, ctx.server.settings)
    lru_ms = db.lru.get(key, int(time.time() * 1000))
    idle = max(int(time.time() - lru_ms / 1000), 0)
    return Status(f"Value at:0x{id(value):x} refcount:1 encoding:{encoding} "
                  f"serializedlength:{_serialized_length(value)} lru:{(lru_ms // 1000) & 0xFFFFFF} "
                  f"lru_seconds_idle:{idle}")


def _serialized_length(value) -> int:
    from pion.storage.serialize import dump_value

    try:
        return len(dump_value(value))
    except Exception:  # a value class without a codec: its raw size is the best we know
        return len(value) if isinstance(value, bytes) else 0


def _debug_error(ctx: Ctx, argv: list[bytes]):
    """The argument verbatim as an error reply (newlines blanked): client test suites use it to
    fake LOADING, READONLY, OOM ... answers."""
    return ReplyError(argv[2].decode("utf-8", "replace").replace("\r", " ").replace("\n", " "))


def _debug_set_active_expire(ctx: Ctx, argv: list[bytes]):
    ctx.server.active_expire_enabled = parse_int(argv[2]) != 0
    return OK


def _debug_protocol(ctx: Ctx, argv: list[bytes]):
    """DEBUG PROTOCOL <type>: one reply of each RESP type, for client tests (Redis's fixtures)."""
    name = argv[2].decode("utf-8", "replace").lower()
    if name == "push" and ctx.client.proto < 3:
        raise ReplyError("ERR RESP2 is not supported by this command")
    fixture = _PROTOCOL_FIXTURES.get(name)
    if fixture is None:
        raise ReplyError("ERR Wrong protocol type name. Please use one of the following: "
                         "string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false")
    return fixture()


_PROTOCOL_FIXTURES = {
    "string": lambda: b"Hello World",
    "integer": lambda: 12345,
    "double": lambda: 3.141,
    "bignum": lambda: BigNumber(1234567999999999999999999999999999999),
    "null": lambda: None,
    "array": lambda: [0, 1, 2],
    "set": lambda: SetReply([0, 1, 2]),
    "map": lambda: {0: False, 1: True, 2: False},
    "attrib": lambda: Replies([Attribute({b"key-popularity": [b"key:123", 90]}),
                               b"Some real reply following the attribute"]),
    "push": lambda: Replies([Push([b"server-cpu-usage", 42]), b"Some real reply following the push reply"]),
    "verbatim": lambda: Verbatim("This is a verbatim\nstring"),
    "true": lambda: True,
    "false": lambda: False,
}


#: (subcommand, argc) -> handler; argc 0 accepts any count
_DEBUG = {
    ("protocol", 3): _debug_protocol,
    ("help", 2): _debug_help,
    ("sleep", 3): _debug_sleep,
    ("object", 3): _debug_object,
    ("error", 3): _debug_error,
    ("set-active-expire", 3): _debug_set_active_expire,
}
