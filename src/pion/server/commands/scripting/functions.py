"""FUNCTION and FCALL/FCALL_RO: Redis 7 function libraries.

FUNCTION LOAD/DELETE/FLUSH/RESTORE change the libraries and are logged (they are write commands
that count a change), so libraries come back from the log; snapshots carry them as an engine
extension. FCALL runs like EVAL (pion.server.commands.scripting.eval).
"""

from __future__ import annotations

import time

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.commands.scripting.eval import script_keys, split_keys
from pion.server.context import Ctx
from pion.server.registry import command
from pion.server.scripting.busy import BUSY_EVAL
from pion.server.scripting.engine import engine_of

_CATS = "@slow @scripting"
_WCATS = "@write @slow @scripting"
_FCALL_FLAGS = "noscript stale skip_monitor no_mandatory_keys"

FUNCTION_HELP = """FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:
LOAD [REPLACE] <FUNCTION CODE>
    Create a new library with the given library name and code.
DELETE <LIBRARY NAME>
    Delete the given library.
LIST [LIBRARYNAME PATTERN] [WITHCODE]
    Return general information on all the libraries:
    * Library name
    * The engine used to run the Library
    * Library description
    * Functions list
    * Library code (if WITHCODE is given)
    It also possible to get only function that matches a pattern using LIBRARYNAME argument.
STATS
    Return information about the current function running:
    * Function name
    * Command used to run the function
    * Duration in MS that the function is running
    If no function is running, return nil
    In addition, returns a list of available engines.
KILL
    Kill the current running function.
FLUSH [ASYNC|SYNC]
    Delete all the libraries.
    When called without the optional mode argument, the behavior is determined by the
    lazyfree-lazy-user-flush configuration directive. Valid modes are:
    * ASYNC: Asynchronously flush the libraries.
    * SYNC: Synchronously flush the libraries.
DUMP
    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command
RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]
    Restore the libraries represented by the given payload, it is possible to give a restore policy to
    control how to handle existing libraries (default APPEND):
    * FLUSH: delete all existing libraries.
    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.
    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old
      libraries with the new libraries (notice that even on this option there is a chance of failure
      in case of functions name collision with another library).
HELP
    Prints this help."""


def _fcall(ctx: Ctx, argv: list[bytes], ro: bool):
    engine = engine_of(ctx.server)
    function = engine.libraries.get(argv[1])
    if function is None:
        raise ReplyError("ERR Function not found")
    keys, args = split_keys(argv, "ERR Bad number of keys provided")
    return engine.run_function(ctx, function, keys, args, ro, argv)


@command("FCALL", -3, _FCALL_FLAGS, categories=_CATS, group="scripting", since="7.0.0", key_finder=script_keys)
def fcall(ctx: Ctx, argv: list[bytes]):
    """FCALL function numkeys [key ...] [arg ...]"""
    return _fcall(ctx, argv, False)


@command("FCALL_RO", -3, "readonly " + _FCALL_FLAGS, categories=_CATS, group="scripting", since="7.0.0", key_finder=script_keys)
def fcall_ro(ctx: Ctx, argv: list[bytes]):
    """FCALL_RO function numkeys [key ...] [arg ...]: only functions flagged no-writes."""
    return _fcall(ctx, argv, True)


@command("FUNCTION|LOAD", -3, "write denyoom noscript", categories=_WCATS, group="scripting", since="7.0.0")
def function_load(ctx: Ctx, argv: list[bytes]):
    """FUNCTION LOAD [REPLACE] function-code"""
    replace = False
    for arg in argv[2:-1]:
        if arg.lower() != b"replace":
            raise ReplyError(f"ERR Unknown option given: {arg.decode('utf-8', 'replace')}")
        replace = True
    name = engine_of(ctx.server).libraries.load(argv[-1], replace)
    ctx.dirty()
    return name.encode("utf-8", "surrogateescape")


@command("FUNCTION|DELETE", 3, "write noscript", categories=_WCATS, group="scripting", since="7.0.0")
def function_delete(ctx: Ctx, argv: list[bytes]):
    """FUNCTION DELETE library-name"""
    engine_of(ctx.server).libraries.delete(argv[2].decode("utf-8", "surrogateescape"))
    ctx.dirty()
    return OK


@command("FUNCTION|FLUSH", -2, "write noscript", categories=_WCATS, group="scripting", since="7.0.0")
def function_flush(ctx: Ctx, argv: list[bytes]):
    """FUNCTION FLUSH [ASYNC|SYNC]"""
    if len(argv) > 3:
        raise ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{argv[1].decode('utf-8', 'replace')}'. Try FUNCTION HELP.")
    if len(argv) == 3 and argv[2].lower() not in (b"async", b"sync"):
        raise ReplyError("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
    engine_of(ctx.server).libraries.flush()
    ctx.dirty()
    return OK


@command("FUNCTION|RESTORE", -3, "write denyoom noscript", categories=_WCATS, group="scripting", since="7.0.0")
def function_restore(ctx: Ctx, argv: list[bytes]):
    """FUNCTION RESTORE serialized-value [FLUSH|APPEND|REPLACE]"""
    if len(argv) > 4:
        raise ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{argv[1].decode('utf-8', 'replace')}'. Try FUNCTION HELP.")
    policy = argv[3].lower().decode("latin-1") if len(argv) == 4 else "append"
    if policy not in ("flush", "append", "replace"):
        raise ReplyError("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
    engine_of(ctx.server).libraries.restore(argv[2], policy)
    ctx.dirty()
    return OK


@command("FUNCTION|DUMP", 2, "noscript", categories=_CATS, group="scripting", since="7.0.0")
def function_dump(ctx: Ctx, argv: list[bytes]):
    """FUNCTION DUMP: the libraries as Redis's payload (RESTORE-able by Redis 7 and Pion)."""
    return engine_of(ctx.server).libraries.dump()


@command("FUNCTION|LIST", -2, "noscript", categories=_CATS, group="scripting", since="7.0.0")
def function_list(ctx: Ctx, argv: list[bytes]):
    """FUNCTION LIST [LIBRARYNAME library-name-pattern] [WITHCODE]"""
    pattern, withcode, i = None, False, 2
    while i < len(argv):
        arg = argv[i].lower()
        if not withcode and arg == b"withcode":
            withcode = True
        elif pattern is None and arg == b"libraryname":
            if i >= len(argv) - 1:
                raise ReplyError("ERR library name argument was not given")
            i += 1
            pattern = argv[i]
        else:
            raise ReplyError(f"ERR Unknown argument {argv[i].decode('utf-8', 'replace')}")
        i += 1
    return engine_of(ctx.server).libraries.listing(pattern, withcode)


@command("FUNCTION|STATS", 2, "noscript allow_busy", categories=_CATS, group="scripting", since="7.0.0")
def function_stats(ctx: Ctx, argv: list[bytes]):
    """FUNCTION STATS: the running function (if any) and the engine's counts."""
    engine = engine_of(ctx.server)
    run = engine.runner.current
    if run is not None and run.kind == "eval":
        raise ReplyError(BUSY_EVAL)
    running = None
    if run is not None:
        running = {b"name": run.name.encode(), b"command": list(run.argv),
                   b"duration_ms": int((time.monotonic() - run.started) * 1000)}
    libraries = engine.libraries
    counts = {b"libraries_count": len(libraries.libraries), b"functions_count": len(libraries.functions)}
    return {b"running_script": running, b"engines": {b"LUA": counts}}


@command("FUNCTION|KILL", 2, "noscript allow_busy", categories=_CATS, group="scripting", since="7.0.0")
def function_kill(ctx: Ctx, argv: list[bytes]):
    """FUNCTION KILL: stop the running function, if it has not written."""
    engine_of(ctx.server).runner.kill(is_eval=False)
    return OK


@command("FUNCTION|HELP", 2, "loading stale", categories=_CATS, group="scripting", since="7.0.0")
def function_help(ctx: Ctx, argv: list[bytes]):
    """FUNCTION HELP"""
    return [Status(line) for line in FUNCTION_HELP.split("\n")]
