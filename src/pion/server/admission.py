"""Admission: whether a command may run now, in one function, in Redis's ``processCommand`` order.

The order a client sees when several refusals apply (each line is one check, first wins):

1. NOAUTH: not authenticated and the command is not ``no_auth``;
2. a ``no_multi`` command inside MULTI;
3. security: the ACL (NOPERM), a tenant's forbidden commands, its quota (-OOM);
   then, on a cluster node, the slot check (-MOVED, -ASK, -CROSSSLOT, -TRYAGAIN, -CLUSTERDOWN);
4. memory: evict under ``maxmemory``, -OOM for a ``denyoom`` command when nothing could go;
5. durability: -MISCONF for a write (and PING) after a failed log write or, with save rules
   and ``stop-writes-on-bgsave-error``, a failed snapshot; then -NOREPLICAS for a write on a
   primary with fewer good replicas than ``min-replicas-to-write``; then -READONLY for a write
   on a read-only replica;
6. the RESP2 subscribed-mode subset;
7. LOADING while the data is being loaded;
8. BUSY while a script runs past ``busy-reply-threshold``.

A pause (CLIENT PAUSE) and MULTI queueing come after admission, in the dispatcher. EXEC, scripts'
``redis.call`` and a script's start ask ``command_refusal`` (3-5, NOREPLICAS included) for each
command they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.protocol import errors
from pion.protocol.errors import ReplyError

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.cluster import ClusterEngine
    from pion.server.durability.memory_guard import MemoryManager
    from pion.server.durability.persistence import Persistence
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec
    from pion.server.replication import Replication
    from pion.server.security.security import Security

#: what a RESP2 connection in subscribed mode may still send
SUBSCRIBED_RESP2 = frozenset({
    b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe", b"ssubscribe",
    b"sunsubscribe", b"ping", b"quit", b"reset",
})


class Admission:
    """The refusal checks, given the parts they ask (the assembler sets them; None: not wired)."""

    def __init__(self, server: Server) -> None:
        self.server = server  # read for two states only: ``loading`` and ``dispatcher.busy``
        self.security: Security | None = None
        self.memory: MemoryManager | None = None
        self.durability: Persistence | None = None
        self.cluster: ClusterEngine | None = None
        self.replication: Replication | None = None

    def refusal(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> ReplyError | None:
        """Why the command a client sent may not run now, or None (Redis's order; module doc)."""
        flags = spec.flags
        if not client.authenticated and "no_auth" not in flags:
            return ReplyError(errors.NOAUTH)
        if client.multi is not None and "no_multi" in flags:
            return ReplyError("ERR Command not allowed inside a transaction")
        refusal = self.command_refusal(client, spec, argv, route=True)
        if refusal is not None:
            return refusal
        if client.proto == 2 and client.subscription_count and argv[0].lower() not in SUBSCRIBED_RESP2:
            return ReplyError(
                f"ERR Can't execute '{spec.full_name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
                "PING / QUIT / RESET are allowed in this context"
            )
        if self.server.loading and "loading" not in flags:
            return ReplyError(errors.LOADING)
        busy = self.server.dispatcher.busy  # set while a script runs past busy-reply-threshold
        if busy is not None:
            return busy(client, spec, argv)
        return None

    def command_refusal(self, client: Client, spec: CommandSpec, argv: list[bytes],
                        route: bool = False) -> ReplyError | None:
        """Security, memory and durability (3-5), also asked for each command EXEC or a script runs;
        ``route``: a command a client sent, which a cluster node may redirect (Redis's order:
        after the ACL, before memory)."""
        if self.security is not None:
            refusal = self.security.refusal(client, spec, argv)
            if refusal is not None:
                return refusal
        if route and self.cluster is not None:
            refusal = self.cluster.refusal(client, spec, argv)
            if refusal is not None:
                return refusal
        flags = spec.flags
        if spec.name == "exec" and client.multi:  # EXEC counts as what it queued (Redis's mstate.cmd_flags)
            flags = flags.union(*(queued.flags for queued, _ in client.multi))
        if self.memory is not None:
            refusal = self.memory.check(flags)
            if refusal is not None:
                return refusal
        if self.durability is not None:
            refusal = self.durability.write_refusal(spec.name, flags)
            if refusal is not None:
                return refusal
        if self.replication is not None:
            refusal = self.replication.good_replicas_refusal(flags)
            if refusal is not None or not route:
                return refusal
            return self.replication.read_only_refusal(flags)
        return None
