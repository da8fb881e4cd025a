"""EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT: Lua scripts as Redis 7 runs them.

The engine (``pion.server.scripting``) runs the script atomically; its ``redis.call``s go through
the dispatcher, so their effects are logged as one record when EVAL returns. EVAL itself is not a
write: only the effects reach the log (Redis 7 replicates scripts by effects). The script cache
is not persisted, as in Redis.
"""

from __future__ import annotations

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.registry import command
from pion.server.scripting.engine import engine_of

_CATS = "@slow @scripting"
_EVAL_FLAGS = "noscript stale skip_monitor no_mandatory_keys"
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."

SCRIPT_HELP = """SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:
DEBUG (YES|SYNC|NO)
    Set the debug mode for subsequent scripts executed.
EXISTS <sha1> [<sha1> ...]
    Return information about the existence of the scripts in the script cache.
FLUSH [ASYNC|SYNC]
    Flush the Lua scripts cache. Very dangerous on replicas.
    When called without the optional mode argument, the behavior is determined by the
    lazyfree-lazy-user-flush configuration directive. Valid modes are:
    * ASYNC: Asynchronously flush the scripts cache.
    * SYNC: Synchronously flush the scripts cache.
KILL
    Kill the currently executing Lua script.
LOAD <script>
    Load a script into the scripts cache without executing it.
HELP
    Prints this help."""


def script_keys(argv: list[bytes]) -> list[int]:
    """EVAL/FCALL's movable keys: ``numkeys`` keys after it."""
    try:
        numkeys = int(argv[2])
    except (ValueError, IndexError):
        return []
    if numkeys < 0 or numkeys > len(argv) - 3:
        return []
    return list(range(3, 3 + numkeys))


def split_keys(argv: list[bytes], error: str | None = None) -> tuple[list[bytes], list[bytes]]:
    """KEYS and ARGV of ``<script> numkeys key... arg...``; Redis's errors for a bad numkeys."""
    numkeys = parse_int(argv[2]) if error is None else parse_int(argv[2], error)
    if numkeys > len(argv) - 3:
        raise ReplyError("ERR Number of keys can't be greater than number of args")
    if numkeys < 0:
        raise ReplyError("ERR Number of keys can't be negative")
    return argv[3:3 + numkeys], argv[3 + numkeys:]


def _eval(ctx: Ctx, argv: list[bytes], ro: bool):
    keys, args = split_keys(argv)
    engine = engine_of(ctx.server)
    return engine.run_script(ctx, engine.script_for(argv[1]), keys, args, ro, argv)


def _evalsha(ctx: Ctx, argv: list[bytes], ro: bool):
    keys, args = split_keys(argv)
    engine = engine_of(ctx.server)
    script = engine.scripts.get(argv[1].lower().decode("latin-1"))
    if script is None:
        raise ReplyError(NOSCRIPT)
    return engine.run_script(ctx, script, keys, args, ro, argv)


@command("EVAL", -3, _EVAL_FLAGS, categories=_CATS, group="scripting", since="2.6.0", key_finder=script_keys)
def eval_(ctx: Ctx, argv: list[bytes]):
    """EVAL script numkeys [key ...] [arg ...]"""
    return _eval(ctx, argv, False)


@command("EVAL_RO", -3, "readonly " + _EVAL_FLAGS, categories=_CATS, group="scripting", since="7.0.0", key_finder=script_keys)
def eval_ro(ctx: Ctx, argv: list[bytes]):
    """EVAL_RO script numkeys [key ...] [arg ...]: the script may not write."""
    return _eval(ctx, argv, True)


@command("EVALSHA", -3, _EVAL_FLAGS, categories=_CATS, group="scripting", since="2.6.0", key_finder=script_keys)
def evalsha(ctx: Ctx, argv: list[bytes]):
    """EVALSHA sha1 numkeys [key ...] [arg ...]"""
    return _evalsha(ctx, argv, False)


@command("EVALSHA_RO", -3, "readonly " + _EVAL_FLAGS, categories=_CATS, group="scripting", since="7.0.0", key_finder=script_keys)
def evalsha_ro(ctx: Ctx, argv: list[bytes]):
    """EVALSHA_RO sha1 numkeys [key ...] [arg ...]: the script may not write."""
    return _evalsha(ctx, argv, True)


@command("SCRIPT|LOAD", 3, "noscript stale", categories=_CATS, group="scripting", since="2.6.0")
def script_load(ctx: Ctx, argv: list[bytes]):
    """SCRIPT LOAD script: compile and cache; returns the sha1."""
    return engine_of(ctx.server).script_for(argv[2]).sha.encode()


@command("SCRIPT|EXISTS", -3, "noscript", categories=_CATS, group="scripting", since="2.6.0")
def script_exists(ctx: Ctx, argv: list[bytes]):
    """SCRIPT EXISTS sha1 [sha1 ...]"""
    scripts = engine_of(ctx.server).scripts
    return [int(sha.lower().decode("latin-1") in scripts) for sha in argv[2:]]


@command("SCRIPT|FLUSH", -2, "noscript", categories=_CATS, group="scripting", since="2.6.0")
def script_flush(ctx: Ctx, argv: list[bytes]):
    """SCRIPT FLUSH [ASYNC|SYNC]: empty the script cache (both modes free it at once)."""
    if len(argv) > 3 or (len(argv) == 3 and argv[2].lower() not in (b"async", b"sync")):
        raise ReplyError("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
    engine_of(ctx.server).flush_scripts()
    return OK


@command("SCRIPT|KILL", 2, "noscript allow_busy", categories=_CATS, group="scripting", since="2.6.0")
def script_kill(ctx: Ctx, argv: list[bytes]):
    """SCRIPT KILL: stop the running EVAL script, if it has not written."""
    engine_of(ctx.server).runner.kill(is_eval=True)
    return OK


@command("SCRIPT|DEBUG", 3, "noscript", categories=_CATS, group="scripting", since="3.2.0")
def script_debug(ctx: Ctx, argv: list[bytes]):
    """SCRIPT DEBUG YES|SYNC|NO: only NO; Pion has no Lua debugger (LDB)."""
    mode = argv[2].lower()
    if mode == b"no":
        return OK
    if mode in (b"yes", b"sync"):
        raise ReplyError("ERR SCRIPT DEBUG YES/SYNC is not supported: Pion has no Lua debugger")
    raise ReplyError("ERR Use SCRIPT DEBUG YES/SYNC/NO")


@command("SCRIPT|HELP", 2, "loading stale", categories=_CATS, group="scripting", since="5.0.0")
def script_help(ctx: Ctx, argv: list[bytes]):
    """SCRIPT HELP"""
    return [Status(line) for line in SCRIPT_HELP.split("\n")]
