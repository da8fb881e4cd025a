"""The scripting engine of one server: the two Lua states, the EVAL script cache, the function
libraries and the runner; what the EVAL/FCALL handlers call.

``server.parts.scripting``. Libraries persist (FUNCTION LOAD/DELETE/FLUSH/RESTORE are logged
writes; a snapshot carries them as the ``functions`` extension, in FUNCTION DUMP's format); the
script cache does not, as in Redis.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ReplyError
from pion.server.admin.info import REDIS_VERSION
from pion.server.component import Component
from pion.server.scripting.busy import Runner, ScriptRun
from pion.server.scripting.functions import Function, Libraries, parse_shebang
from pion.server.scripting.runtime import LuaState, Rand48, sha1hex

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.context import Ctx

SCRIPT_FLAGS = ("no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys")
#: bodies remembered by ``ScriptingEngine.script_for`` (beyond it the map starts again)
BODIES_LIMIT = 1024
RO_WITH_WRITES = "ERR Can not execute a script with write flag using *_ro command."


@dataclass(slots=True)
class Script:
    sha: str
    fn: Any
    #: shebang flags; None for a script without shebang (Redis's compatibility mode)
    flags: frozenset[str] | None


def script_flags(body: bytes) -> tuple[frozenset[str] | None, int]:
    """EVAL's shebang: (flags or None, length of the shebang line); raises ReplyError."""
    if not body.startswith(b"#!"):
        return None, 0
    if b"\n" not in body:
        raise ReplyError("ERR Invalid script shebang")
    engine, options, end = parse_shebang(body)
    if engine != "lua":
        raise ReplyError(f"ERR Unexpected engine in script shebang: #!{engine}")
    flags: set[str] = set()
    for option in options:
        if not option.startswith("flags="):
            raise ReplyError(f"ERR Unknown lua shebang option: {option}")
        for flag in filter(None, option[6:].split(",")):
            if flag not in SCRIPT_FLAGS:
                raise ReplyError(f"ERR Unexpected flag in script shebang: {flag}")
            flags.add(flag)
    return frozenset(flags), end


def _version_num(version: str) -> int:
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    return (major << 16) | (minor << 8) | patch


class ScriptingEngine:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.rand = Rand48()
        self._eval: LuaState | None = None
        self._function: LuaState | None = None
        self.scripts: dict[str, Script] = {}
        #: a script's body -> its cached script: EVAL of a known body skips the SHA1 (an entry
        #: counts only while ``scripts`` still holds that script: SCRIPT FLUSH empties it)
        self._by_body: dict[bytes, Script] = {}
        self.libraries = Libraries(lambda: self.function_state)
        self.runner = Runner(server)

    def _state(self, mode: str) -> LuaState:
        return LuaState(mode, self.rand, REDIS_VERSION, _version_num(REDIS_VERSION), self._acl_allows)

    @property
    def eval_state(self) -> LuaState:
        if self._eval is None:
            self._eval = self._state("eval")
        return self._eval

    @property
    def function_state(self) -> LuaState:
        if self._function is None:
            self._function = self._state("function")
        return self._function

    def _acl_allows(self, argv: list[bytes], client: Any) -> bool | None:
        """redis.acl_check_cmd: None for an unknown command, else whether the script's caller's
        ACL user may run ``argv`` (command, keys and channels, as ACLCheckAllUserCommandPerm)."""
        spec = self.server.dispatcher.lookup(argv)
        if isinstance(spec, ReplyError):
            return None
        security = self.server.admission.security
        if security is None or client is None:
            return True
        from pion.server.security import acl_check

        user = security.users.table.users.get(client.user)
        if user is None or acl_check.is_unrestricted(user):
            return True
        return acl_check.check(security.users, user, spec, argv)[0] == acl_check.OK

    # -- EVAL -------------------------------------------------------------------------------------

    def script_for(self, body: bytes) -> Script:
        """The cached script for ``body``, compiling (and caching) it first; raises ReplyError."""
        known = self._by_body.get(body)
        if known is not None and self.scripts.get(known.sha) is known:
            return known
        sha = sha1hex(body)
        script = self.scripts.get(sha)
        if script is None:
            flags, end = script_flags(body)
            fn, error = self.eval_state.compile(body[end:], b"@user_script")
            if fn is None:
                raise ReplyError(f"ERR Error compiling script (new function): {error}")
            script = self.scripts[sha] = Script(sha, fn, flags)
        by_body = self._by_body
        if len(by_body) >= BODIES_LIMIT:
            by_body.clear()  # bounded: a client sending ever new bodies cannot grow it
        by_body[bytes(body)] = script
        return script

    def flush_scripts(self) -> None:
        """SCRIPT FLUSH: the cache emptied (and the bodies that found its scripts)."""
        self.scripts.clear()
        self._by_body.clear()

    def run_script(self, ctx: Ctx, script: Script, keys: list[bytes], args: list[bytes], ro: bool, argv: list[bytes]) -> Any:
        flags = script.flags
        read_only = ro or (flags is not None and "no-writes" in flags)
        allow_oom = flags is not None and "allow-oom" in flags
        if flags is not None:
            self._check_start(ctx, flags, ro)
        run = ScriptRun("eval", script.sha, argv, ctx.client, read_only, allow_oom, keys)
        run.cross_slot = flags is not None and "allow-cross-slot-keys" in flags
        if run.cross_slot:
            ctx.client.slot = -1  # counts on no slot, even one its KEYS named (CLUSTER SLOT-STATS)
        state = self.eval_state
        return self.runner.execute(ctx, run, lambda: state.execute(run, script.fn, keys, args))

    # -- FCALL -------------------------------------------------------------------------------------

    def run_function(self, ctx: Ctx, function: Function, keys: list[bytes], args: list[bytes], ro: bool, argv: list[bytes]) -> Any:
        flags = frozenset(function.flags)
        self._check_start(ctx, flags, ro)
        run = ScriptRun("function", function.name, argv, ctx.client, ro or "no-writes" in flags, "allow-oom" in flags, keys)
        run.cross_slot = "allow-cross-slot-keys" in flags
        if run.cross_slot:
            ctx.client.slot = -1
        state = self.function_state
        return self.runner.execute(ctx, run, lambda: state.execute(run, function.fn, keys, args))

    def _check_start(self, ctx: Ctx, flags: frozenset[str], ro: bool) -> None:
        """What Redis checks before a script with flags runs: *_ro, then MISCONF and OOM."""
        if "no-writes" in flags:
            return
        if ro:
            raise ReplyError(RO_WITH_WRITES)
        spec = ctx.server.table.get(b"eval")
        if spec is None:
            return
        extra = {"write"} if "allow-oom" in flags else {"write", "denyoom"}
        refusal = self.server.admission.command_refusal(
            ctx.client, dataclasses.replace(spec, flags=spec.flags | extra), [b"eval"])
        if refusal is not None:
            raise refusal

    # -- persistence ------------------------------------------------------------------------------

    def dump_libraries(self) -> bytes:
        return self.libraries.dump()

    def load_libraries(self, data: bytes) -> None:
        self.libraries.restore(data, "flush")


def engine_of(server: Server) -> ScriptingEngine:
    engine = server.parts.scripting
    if engine is None:
        engine = install(server)
    return engine


def install(server: Server) -> ScriptingEngine:
    """Wire scripting onto a server: the engine, its stop (``ScriptingPart``), the snapshot extension."""
    existing = server.parts.scripting
    if existing is not None:
        return existing
    engine = server.parts.scripting = ScriptingEngine(server)
    server.add_component(ScriptingPart(server, engine))
    persistence = server.parts.persistence
    if persistence is not None:
        from pion.server.durability.persistence import SnapshotExtension

        persistence.snapshot_extensions.append(
            SnapshotExtension(name="functions", dump=engine.dump_libraries, load=engine.load_libraries)
        )
    return engine


class ScriptingPart(Component):
    """Scripting's one moment: at stop, a detached script (even one that wrote) is stopped at its
    next hook."""

    name = "scripting"

    def __init__(self, server: Server, engine: ScriptingEngine) -> None:
        self.server, self.engine = server, engine

    async def stop(self) -> None:
        self.engine.runner.shutdown(self.server)
