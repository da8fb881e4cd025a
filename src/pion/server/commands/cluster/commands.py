"""Cluster commands: CLUSTER <subcommand>, READONLY, READWRITE and ASKING.

With ``cluster-enabled yes`` they run on the node's cluster engine (``pion.server.cluster``);
otherwise each is refused as a Redis 7 server with ``cluster-enabled no`` refuses them, so that
COMMAND lists what Redis lists and clients probing for a cluster (``CLUSTER INFO``, ``CLUSTER
SLOTS``) get the answer they know how to read.
"""

from __future__ import annotations

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.context import Ctx
from pion.server.registry import command

DISABLED = "ERR This instance has cluster support disabled"
_ADMIN = "@admin @slow @dangerous"

#: Redis 7.0's CLUSTER subcommands: name -> (arity, flags, categories)
SUBCOMMANDS = {
    "addslots": (-3, "admin stale no_async_loading", _ADMIN),
    "addslotsrange": (-4, "admin stale no_async_loading", _ADMIN),
    "bumpepoch": (2, "admin stale no_async_loading", _ADMIN),
    "count-failure-reports": (3, "admin stale", _ADMIN),
    "countkeysinslot": (3, "stale", "@slow"),
    "delslots": (-3, "admin stale no_async_loading", _ADMIN),
    "delslotsrange": (-4, "admin stale no_async_loading", _ADMIN),
    "failover": (-2, "admin stale no_async_loading", _ADMIN),
    "flushslots": (2, "admin stale no_async_loading", _ADMIN),
    "forget": (3, "admin stale no_async_loading", _ADMIN),
    "getkeysinslot": (4, "stale", "@slow"),
    "help": (2, "loading stale", "@slow"),
    "info": (2, "stale", "@slow"),
    "keyslot": (3, "stale", "@slow"),
    "links": (2, "stale", "@slow"),
    "meet": (-4, "admin stale no_async_loading", _ADMIN),
    "myid": (2, "stale", "@slow"),
    "nodes": (2, "stale", "@slow"),
    "replicas": (3, "admin stale", _ADMIN),
    "replicate": (3, "admin stale no_async_loading", _ADMIN),
    "reset": (-2, "admin noscript stale", _ADMIN),
    "saveconfig": (2, "admin stale no_async_loading", _ADMIN),
    "set-config-epoch": (3, "admin stale no_async_loading", _ADMIN),
    "setslot": (-4, "admin stale no_async_loading", _ADMIN),
    "shards": (2, "stale", "@slow"),
    "slaves": (3, "admin stale", _ADMIN),
    "slots": (2, "stale", "@slow"),
}


def cluster_disabled(ctx: Ctx, argv: list[bytes]):
    """CLUSTER <subcommand> [argument ...] -- the cluster topology and resharding commands

    Refused unless this server is a cluster node (``cluster-enabled yes``).
    """
    engine = ctx.server.parts.cluster
    if engine is None:
        raise ReplyError(DISABLED)
    from pion.server.cluster import admin

    return admin.run(engine, ctx, argv)


for _name, (_arity, _flags, _cats) in SUBCOMMANDS.items():
    command(f"CLUSTER|{_name.upper()}", _arity, _flags, categories=_cats, group="cluster", since="3.0.0")(
        cluster_disabled)


@command("CLUSTER|SLOT-STATS", -4, "loading stale", categories="@slow", group="cluster", since="8.2.0")
def cluster_slot_stats(ctx: Ctx, argv: list[bytes]):
    """CLUSTER SLOT-STATS SLOTSRANGE start-slot end-slot | ORDERBY metric [LIMIT limit] [ASC|DESC]

    Per-slot key-count, and cpu-usec and network bytes with ``cluster-slot-stats-enabled yes``
    (pion.server.cluster.slot_stats). Refused unless this server is a cluster node.
    """
    engine = ctx.server.parts.cluster
    if engine is None:
        raise ReplyError(DISABLED)
    from pion.server.cluster.slot_stats import slot_stats

    return slot_stats(engine, ctx, argv)


@command("READONLY", 1, "loading stale fast", categories="@fast @connection", group="cluster", since="3.0.0")
@command("READWRITE", 1, "loading stale fast", categories="@fast @connection", group="cluster", since="3.0.0")
@command("ASKING", 1, "fast", categories="@fast @connection", group="cluster", since="3.0.0")
def cluster_connection(ctx: Ctx, argv: list[bytes]):
    """READONLY | READWRITE | ASKING -- per-connection cluster flags

    ASKING lets the next command run on a slot this node is importing; READONLY/READWRITE are
    accepted (there are no replicas to read from). Refused unless this is a cluster node.
    """
    if ctx.server.parts.cluster is None:
        raise ReplyError(DISABLED)
    flags = ctx.client.flags
    word = argv[0].lower()
    if word == b"asking":
        flags.add("asking")
    elif word == b"readonly":
        flags.add("readonly")
    else:
        flags.discard("readonly")
    return OK


@command("RESTORE-ASKING", -4, "write denyoom asking", keys=(1, 1, 1), categories="@keyspace @write @slow @dangerous",
         group="server", since="3.0.0")
def restore_asking(ctx: Ctx, argv: list[bytes]):
    """RESTORE-ASKING key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]

    RESTORE as MIGRATE sends it to a cluster node: it runs on a slot the node is importing.
    """
    from pion.server.commands.core.objects import restore

    return restore(ctx, argv)
