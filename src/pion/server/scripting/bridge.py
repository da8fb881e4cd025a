"""The Python side of the ``redis.*`` API and of the C-implemented libraries.

Each function here is what a script calls (lupa exposes it as a callable userdata, a C function
to Lua: a tail call to it keeps the caller's frame, so error positions match Redis's). Errors are
raised as ``LuaRaise`` carrying the Lua error value: a ``{err=...}`` table (``redis.call``) or a
message prefixed with the caller's position (``bad argument`` errors); the prelude's error
handler and ``pcall`` take the value back out. Runs on the loop thread, in the script's greenlet.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import CountedError, ReplyError
from pion.server.scripting.libs import LuaArgError, check_number
from pion.server.scripting.tailcalls import without_tail_calls

if TYPE_CHECKING:
    from pion.server.scripting.runtime import LuaState

log = logging.getLogger("pion.script")

_LOG_LEVELS = (logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING)


class LuaRaise(Exception):  # noqa: N818 - it is a Lua error in flight, not a Python failure
    """Raised by a bridge function: ``value`` is the Lua error value."""

    def __init__(self, value: Any) -> None:
        super().__init__("lua error")
        self.value = value


def _tonumber(value: Any) -> float | None:
    """lua_tonumber: numbers and numeric strings, else None."""
    try:
        return check_number((value,), 1, "")
    except LuaArgError:
        return None


def _trunc(value: float) -> int:
    return int(value) if not (math.isnan(value) or math.isinf(value)) else 0


def _tostring(value: Any) -> bytes | None:
    """lua_tolstring: strings as they are, numbers with %.14g, anything else None."""
    if value.__class__ is bytes:
        return value
    if value.__class__ in (int, float):
        return b"%.14g" % value
    return None


class Bridge:
    """The callables one Lua state receives (``B`` in the prelude)."""

    def __init__(self, state: LuaState) -> None:
        self.state = state

    def error(self, message: str, counted: bool = False) -> LuaRaise:
        return LuaRaise(self.state.to_lua.error(message, counted))

    def positioned(self, message: str) -> LuaRaise:
        """A Lua error message with luaL_where's ``source:line: `` prefix."""
        return LuaRaise(self.state.api.where() + message.encode())

    def wrap(self, fn: Callable[..., tuple]) -> Callable[..., Any]:
        """A library function raising LuaArgError -> one raising a positioned Lua error."""

        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except LuaArgError as exc:
                raise self.positioned(str(exc)) from None

        return call

    def cjson_wrap(self, impl: Any) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            ok, value = impl(*args)
            if not ok:
                raise LuaRaise(self.state.api.where() + value)
            return value

        return call

    @staticmethod
    def unwrap(error: Any) -> Any:
        return error.value if isinstance(error, LuaRaise) else None

    # -- redis.* ------------------------------------------------------------------------------

    def call(self, *args: Any) -> Any:
        """redis.call: ``LuaState.command`` inline (the common case: every argument a string
        and a script running), then the reply converted or the error raised."""
        state = self.state
        run = state.run
        argv: Any = [*args]
        for arg in argv:
            if arg.__class__ is not bytes:  # a number, or a bad argument: the generic conversion
                argv = state.argv(args)
                break
        if not argv or argv.__class__ is ReplyError or run is None:
            reply = state.command(args)  # its errors, in its order
        else:
            reply = run.request(argv)
        if isinstance(reply, ReplyError):
            raise self.error(reply.message, reply.__class__ is CountedError)
        return state.to_lua.convert(reply, run.resp)  # type: ignore[union-attr]

    def pcall(self, *args: Any) -> Any:
        reply = self.state.command(args)
        resp = self.state.run.resp if self.state.run is not None else 2
        return self.state.to_lua.convert(reply, resp)

    # a long argument list arrives as (table, n): lupa takes at most 7,997 arguments per call
    @staticmethod
    def _unpacked(table: Any, n: int) -> tuple:
        return tuple(table[i] for i in range(1, int(n) + 1))

    def call_packed(self, table: Any, n: int) -> Any:
        return self.call(*self._unpacked(table, n))

    def pcall_packed(self, table: Any, n: int) -> Any:
        return self.pcall(*self._unpacked(table, n))

    def acl_check_cmd_packed(self, table: Any, n: int) -> Any:
        return self.acl_check_cmd(*self._unpacked(table, n))

    @staticmethod
    def untail(chunk: bytes) -> bytes:
        """A user chunk's bytecode with its tail calls made plain calls (tailcalls.py)."""
        return without_tail_calls(chunk)

    def acl_check_cmd(self, *args: Any) -> Any:
        argv = self.state.argv(args)
        if isinstance(argv, ReplyError):
            raise self.error(argv.message)
        run = self.state.run
        allowed = self.state.acl(argv, run.client if run is not None else None)
        if allowed is None:
            raise self.error("ERR Invalid command passed to redis.acl_check_cmd()")
        return allowed

    def log(self, *args: Any) -> None:
        if len(args) < 2:
            raise self.error("ERR redis.log() requires two arguments or more.")
        level = _tonumber(args[0])
        if level is None:
            raise self.error("ERR First argument must be a number (log level).")
        level = _trunc(level)
        if not 0 <= level <= 3:
            raise self.error("ERR Invalid debug level.")
        parts = [text for text in map(_tostring, args[1:]) if text is not None]
        log.log(_LOG_LEVELS[level], "%s", b" ".join(parts).decode("utf-8", "replace"))

    def setresp(self, *args: Any) -> None:
        if len(args) != 1:
            raise self.error("ERR redis.setresp() requires one argument.")
        resp = _trunc(_tonumber(args[0]) or 0)
        if resp not in (2, 3):
            raise self.error("ERR RESP version must be 2 or 3.")
        if self.state.run is not None:
            self.state.run.resp = resp

    def set_repl(self, *args: Any) -> None:
        """Accepted: Pion always logs a script's effects (the log is its durability)."""
        if len(args) != 1:
            raise self.error("ERR redis.set_repl() requires two arguments.")
        if _trunc(_tonumber(args[0]) or 0) not in (0, 1, 2, 3):
            raise self.error("ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.")

    def sha1hex(self, *args: Any) -> bytes:
        if len(args) != 1:
            raise self.error("ERR wrong number of arguments")
        return hashlib.sha1(_tostring(args[0]) or b"").hexdigest().encode()

    # -- math.random / math.randomseed (Redis's rand48) ----------------------------------------

    def random(self, *args: Any) -> float:
        r = self.state.rand.random()
        if not args:
            return r
        try:
            if len(args) == 1:
                upper = _trunc(check_number(args, 1, "random"))
                if upper < 1:
                    raise LuaArgError("bad argument #1 to 'random' (interval is empty)")
                return math.floor(r * upper) + 1
            if len(args) == 2:
                lower, upper = _trunc(check_number(args, 1, "random")), _trunc(check_number(args, 2, "random"))
                if lower > upper:
                    raise LuaArgError("bad argument #2 to 'random' (interval is empty)")
                return math.floor(r * (upper - lower + 1)) + lower
        except LuaArgError as exc:
            raise self.positioned(str(exc)) from None
        raise self.positioned("wrong number of arguments")

    def randomseed(self, *args: Any) -> None:
        try:
            self.state.rand.seed(_trunc(check_number(args, 1, "randomseed")))
        except LuaArgError as exc:
            raise self.positioned(str(exc)) from None

    def killed(self) -> bool:
        """The count hook's question (every 100k instructions): also where a long script yields."""
        run = self.state.run
        return run is not None and run.checkpoint()

    def table(self, names: tuple[str, ...]) -> dict[bytes, Any]:
        return {name.encode(): getattr(self, name) for name in names}
