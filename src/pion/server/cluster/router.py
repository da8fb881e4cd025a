"""The slot check every command passes on a cluster node: serve it here, or answer ``-MOVED``,
``-ASK``, ``-CROSSSLOT``, ``-TRYAGAIN`` or ``-CLUSTERDOWN`` exactly as Redis's getNodeByQuery.

Key positions come from the command table (first/last/step, or the command's key finder for
movable keys). Pion's own K/V commands (``KV.PREFIX.*``, ``V.*``, ``SSM.PREFIX.*``,
``STATE.*``) declare no keys in the table (COMMAND INFO shows none, as before), so this module
names their key positions itself: the namespace or session id, hashed with Redis's rules. A
prefix's namespace ``{ns}`` and its sessions ``{ns}_pk``/``{ns}_pv`` then share one slot
(docs/scale-out.md, "K/V keys and hash tags").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pion.protocol.errors import ReplyError
from pion.protocol.keyslot import key_slot

if TYPE_CHECKING:
    from pion.server.cluster.state import ClusterState, Node
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec

CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
DOWN_UNBOUND = "CLUSTERDOWN Hash slot not served"
DOWN_STATE = "CLUSTERDOWN The cluster is down"
TRYAGAIN = "TRYAGAIN Multiple keys request during rehashing of slot"

class Redirect(ReplyError):
    """A refusal of Redis's clusterRedirectClient (-MOVED, -ASK, -CROSSSLOT, -TRYAGAIN,
    -CLUSTERDOWN): refusing EXEC, it discards the transaction and is answered as it is, not
    wrapped in -EXECABORT as the other refusals of EXEC are (Redis's processCommand)."""

    __slots__ = ()
    discards_bare = True

_FIRST = (1,)
#: Pion's K/V commands: lower-case name -> positions of their keys (the namespace or session id)
PION_KEYS: dict[str, tuple[int, ...] | str] = {
    **{name: _FIRST for name in (
        "kv.prefix.register", "kv.prefix.lookup", "kv.prefix.manifest", "kv.prefix.blocks",
        "kv.prefix.membership", "kv.prefix.owner", "kv.prefix.pin", "kv.prefix.unpin",
        "kv.prefix.publish", "kv.prefix.abort", "kv.prefix.export", "ssm.prefix.store",
        "ssm.prefix.fetch", "ssm.prefix.drop", "state.alloc", "state.write", "state.read", "state.free",
        "v.create", "v.storebatch", "v.fetch", "v.snapshot", "v.restore", "v.commit", "v.truncate",
        "v.drop", "v.export")},
    "kv.prefix.drop": "all",  # KV.PREFIX.DROP ns [ns ...]
    "v.info": "optional",  # V.INFO [sid]
}


def command_keys(spec: CommandSpec, argv: list[bytes]) -> list[bytes]:
    """The keys ``argv`` names (empty for a keyless command or one whose arguments are bad:
    the command itself then answers the error)."""
    extra = PION_KEYS.get(spec.full_name)
    if extra is not None:
        if extra == "all":
            return argv[1:]
        if extra == "optional":
            return argv[1:2]
        return [argv[i] for i in extra if i < len(argv)]  # type: ignore[union-attr]
    try:
        return [argv[i] for i in spec.key_positions(argv) if i < len(argv)]
    except Exception:  # noqa: BLE001 - a bad numkeys and the like: the handler reports it
        return []


class Router:
    """Answers, for one command (or an EXEC's queued ones), where it must run."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        #: ``(client, key) -> bool``: does this node hold K/V unit ``key`` (a namespace, a session)
        #: for the client's space; set by ``install``. A migrating slot's K/V command runs here
        #: while its namespace is here and is sent on (-ASK) once KV.PREFIX.MIGRATE moved it.
        self.kv_holds: Callable[[Client, bytes], bool] | None = None

    def refusal(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> ReplyError | None:
        name = spec.full_name
        flags = client.flags
        client.slot = -1
        if name == "asking":
            return None
        asking = "asking" in flags
        if asking and client.multi is None and name != "exec":
            flags.discard("asking")  # ASKING covers the next command only (or a whole MULTI)
        if name == "exec":
            if client.multi is None:
                return None
            flags.discard("asking")
            commands = client.multi
        else:
            commands = [(spec, argv)]
        return self._check(client, commands, asking or "asking" in spec.flags, name == "migrate")

    def _check(self, client: Client, commands, asking: bool, is_migrate: bool) -> ReplyError | None:
        state = self.state
        slot = -1
        node: Node | None = None
        migrating = importing = multiple = False
        missing = 0
        db = client.dbs[client.db_index]
        for spec, argv in commands:
            kv = spec.full_name in PION_KEYS
            for key in command_keys(spec, argv):
                this = key_slot(key)
                if slot < 0:
                    slot = this
                    node = state.owner[slot]
                    if node is None:
                        return Redirect(DOWN_UNBOUND)
                    migrating = node.myself and slot in state.migrating
                    importing = slot in state.importing
                elif this != slot:
                    return Redirect(CROSSSLOT)
                else:
                    multiple = True
                if (migrating or importing) and not self._holds(client, db, key, kv):
                    missing += 1
        if slot < 0:
            return None
        client.slot = slot  # Redis's c->slot, also for a refused command (CLUSTER SLOT-STATS counts by it)
        if not state.is_ok():
            return Redirect(DOWN_STATE)
        if (migrating or importing) and is_migrate:
            return None
        if migrating and missing:
            target = state.find(state.migrating[slot])
            if target is not None:
                return Redirect(f"ASK {slot} {target.host}:{target.port}")
        if importing and asking:
            if multiple and missing:
                return Redirect(TRYAGAIN)
            return None
        assert node is not None
        if not node.myself:
            return Redirect(f"MOVED {slot} {node.host}:{node.port}")
        return None

    def _holds(self, client: Client, db, key: bytes, kv: bool) -> bool:
        if not kv:
            return db.exists(key)
        return self.kv_holds is not None and self.kv_holds(client, key)
