"""One sandboxed Lua 5.1 state (lupa): the EVAL state or the FUNCTION state.

``LuaState`` builds the state from the prelude, gives it the Python bridge (``redis.call`` goes to
the running ``ScriptRun``, which runs the command through the dispatcher), compiles scripts,
and runs them: ``execute`` returns the script's reply already converted, or the error reply in
Redis's format (``... script: <sha>, on @user_script:1.``). Python objects never reach user code:
the bridge lives in upvalues and attribute access to Python objects is refused.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from lupa import lua51

from pion.protocol.errors import ReplyError
from pion.server.scripting.bridge import Bridge
from pion.server.scripting.cjson_lua import CJSON
from pion.server.scripting.convert import ToLua, ToReply, error_class, error_reply
from pion.server.scripting.libs import make_bit, make_struct
from pion.server.scripting.msgpack_lib import make_cmsgpack
from pion.server.scripting.prelude import PRELUDE

if TYPE_CHECKING:
    from pion.server.scripting.busy import ScriptRun

_LUA_MAX = 0x7FFFFFFF
#: KEYS plus ARGV up to this many go to Lua as call arguments (lupa refuses past 7,997)
SHORT_CALL = 7900
_API = ("call", "pcall", "acl_check_cmd", "call_packed", "pcall_packed", "acl_check_cmd_packed", "untail",
        "log", "setresp", "set_repl", "sha1hex", "random", "randomseed", "killed", "unwrap", "cjson_wrap")


def _deny_attributes(obj: Any, name: Any, is_setting: bool) -> Any:
    raise AttributeError("access to Python attributes is not allowed from scripts")


class Rand48:
    """Redis's redisLrand48/redisSrand48: one sequence for the whole server, as in Redis."""

    def __init__(self) -> None:
        self.state = 0x1234ABCD330E

    def random(self) -> float:
        self.state = (0x5DEECE66D * self.state + 0xB) & 0xFFFFFFFFFFFF
        return ((self.state >> 17) % _LUA_MAX) / _LUA_MAX

    def seed(self, value: float) -> None:
        seed = int(value) & 0xFFFFFFFF
        self.state = ((seed & 0xFFFFFFFF) << 16) | 0x330E


class LuaState:
    """A Lua state in ``mode`` "eval" or "function", with Redis's globals and API."""

    def __init__(self, mode: str, rand: Rand48, version: str, version_num: int, acl: Any) -> None:
        self.mode = mode
        self.rand = rand
        self.acl = acl
        #: the script running now
        self.run: ScriptRun | None = None
        self.lua = lua51.LuaRuntime(
            encoding=None, register_eval=False, register_builtins=False,
            unpack_returned_tuples=True, attribute_filter=_deny_attributes,
        )
        self.to_lua = ToLua(self.lua)
        bridge = Bridge(self)
        names = self.lua.table_from(bridge.table(_API))
        names[b"now"] = time.monotonic
        for lib, functions in ((b"bit", make_bit()), (b"struct", make_struct()), (b"cmsgpack", make_cmsgpack(self.lua))):
            names[lib] = self.lua.table_from({k: bridge.wrap(v) if callable(v) else v for k, v in functions.items()})
        loader = self.lua.eval(b"function(src, name) return assert(loadstring(src, name)) end")
        prelude = loader(PRELUDE.encode(), b"=pion")
        self.api = prelude(names, mode.encode(), version.encode(), version_num, CJSON.encode())
        self.to_reply = ToReply(self.api)
        self._run_fn = self.api.run
        self._run_va = self.api.run_va
        self._error_fields = self.api.error_fields

    # -- redis.call (in the script's greenlet) ------------------------------------------------

    def command(self, args: tuple) -> Any:
        """Validate the arguments and have the running script's server run the command."""
        argv = self.argv(args)
        if argv.__class__ is ReplyError:
            return argv
        if self.run is None:
            return ReplyError("ERR redis.call/pcall can only be called inside a script invocation")
        return self.run.request(argv)

    @staticmethod
    def argv(args: tuple) -> list[bytes] | ReplyError:
        if not args:
            return ReplyError("ERR Please specify at least one argument for this redis lib call")
        argv = []
        for arg in args:
            cls = arg.__class__
            if cls is bytes:
                argv.append(arg)
            elif cls is int or cls is float:
                argv.append(b"%.17g" % arg)
            else:
                return ReplyError("ERR Lua redis lib command arguments must be strings or integers")
        return argv

    # -- compiling and running ------------------------------------------------------------------

    def compile(self, body: bytes, chunkname: bytes) -> tuple[Any, str | None]:
        """The compiled chunk, or (None, Lua's error message)."""
        result = self.api.compile(body, chunkname)
        fn, err = result if isinstance(result, tuple) else (result, None)
        if fn is None:
            return None, (err or b"").decode("utf-8", "replace")
        return fn, None

    def table(self, items: list[bytes]) -> Any:
        return self.lua.table_from(items)

    def execute(self, run: ScriptRun, fn: Any, keys: list[bytes], args: list[bytes]) -> Any:
        """Run ``fn`` for ``run``; returns the reply (or the error reply)."""
        self.run = run
        try:
            if len(keys) + len(args) <= SHORT_CALL:  # the tables made in Lua from the arguments
                result = self._run_va(fn, run.kind == "function", len(keys), *keys, *args)
            else:  # lupa takes at most 7,997 arguments per call: tables made from the lists
                result = self._run_fn(fn, self.lua.table_from(keys), self.lua.table_from(args), run.kind == "function")
            ok, value = result if isinstance(result, tuple) else (result, None)
            if ok:
                return self.to_reply.convert(value, run.resp)
            if lua51.lua_type(value) == "table":
                return error_reply(self._error_fields(value), run.name, error_class(value))
            return ReplyError(f"ERR Error running script {run.name}, {str(value)[:100]}")
        finally:
            self.run = None

    def load_library(self, fn: Any, deadline: float) -> tuple[bool, Any]:
        """Run a library's body in the load environment; (True, registered) or (False, message)."""
        result = self.api.load_library(fn, deadline)
        ok, value = result
        if ok:
            entries = []
            for entry in value.values():
                flags = [flag.decode() for flag in entry[b"flags"].values()]
                desc = entry[b"desc"]
                entries.append((entry[b"name"], entry[b"fn"], flags, desc))
            return True, entries
        message = self._error_fields(value)[0] if lua51.lua_type(value) == "table" else None
        return False, message.decode("utf-8", "replace") if isinstance(message, bytes) else "ERR unknown error"


def _sha1(data: bytes) -> bytes:
    return hashlib.sha1(data).hexdigest().encode()


def sha1hex(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()
