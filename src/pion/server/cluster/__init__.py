"""Redis Cluster's client protocol on a Pion node (``cluster-enabled yes``).

A node owns slot ranges and redirects the rest (``pion.server.cluster.router``), answers the
CLUSTER topology and resharding commands (``admin``), keeps its view in ``cluster-config-file``
(``state``) and learns the other nodes by polling them over their client ports (``peers``):
no cluster bus, no replicas, no failover (docs/scale-out.md says what that means).

``install`` runs in ``make_server`` when the setting is on: the slot check becomes one step of
admission (``pion.server.admission``), INFO gets its ``cluster`` section and the poller starts with the listeners.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pion.server.cluster.router import Router
from pion.server.cluster.state import ClusterState
from pion.server.component import Component

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec


def enabled(settings: Any) -> bool:
    return bool(settings.cluster_enabled)


def _my_address(settings: Any) -> tuple[str, int]:
    host = settings.cluster_announce_ip
    if not host:
        binds = [b for b in settings.bind if b not in ("*", "0.0.0.0", "::", "-::*")] if settings.bind else []
        host = binds[0].lstrip("-") if binds else "127.0.0.1"
    port = settings.cluster_announce_port or settings.port
    return host, port


class ClusterEngine:
    """``server.parts.cluster``: the state, the router and the peer poller."""

    def __init__(self, server: Server) -> None:
        from pion.server.cluster.peers import PeerPoller
        from pion.server.cluster.slot_stats import SlotCounters

        settings = server.settings
        path = settings.cluster_config_file or "nodes.conf"
        if not os.path.isabs(path):
            path = os.path.join(settings.dir, path)
        host, port = _my_address(settings)
        self.state = ClusterState(path, host, port)
        self.state.require_full_coverage = settings.cluster_require_full_coverage
        self.router = Router(self.state)
        self.poller = PeerPoller(server, self.state)
        #: CLUSTER SLOT-STATS's cpu/network counters, kept while cluster-slot-stats-enabled is on
        #: (``Dispatcher.slot_stats`` is this object then); a slot given to a node starts at zero
        self.counters = self.state.counters = SlotCounters()
        self._pokes: set = set()

    def message_stats(self) -> dict[str, int]:
        return {"cluster_stats_messages_sent": 0, "cluster_stats_messages_received": 0}

    def poke(self) -> None:
        """A node was met: poll now rather than at the next round."""
        import asyncio

        poller = self.poller
        if poller.task is not None:
            task = asyncio.get_running_loop().create_task(poller.poll_once())
            self._pokes.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(self._pokes.discard)

    def refusal(self, client: Client, spec: CommandSpec, argv: list[bytes]):
        return self.router.refusal(client, spec, argv)


def _kv_holds(server: Server, client: Client, key: bytes) -> bool:
    """Does the client's K/V space hold ``key`` as a prefix, a V-store session or SSM state?"""
    engine = server.parts.kvcache
    if engine is None:
        return False
    space = engine.space(client.tenant.encode() if client.tenant else b"")
    return (space.registry.get(key) is not None or space.vstore.get(key) is not None
            or key in space.ssm.sessions)


def install(server: Server) -> ClusterEngine | None:
    """Make this server a cluster node when ``cluster-enabled yes``; None otherwise."""
    if not enabled(server.settings):
        return None
    engine = server.parts.cluster = ClusterEngine(server)
    engine.router.kv_holds = lambda client, key: _kv_holds(server, client, key)
    server.admission.cluster = engine  # the slot check: after the ACL, before memory
    server.add_component(ClusterPart(engine))
    server.dispatcher.apply_settings(server.settings)  # cluster-slot-stats-enabled can count now
    return engine


class ClusterPart(Component):
    """The cluster bus poller (started after recovery, stopped at shutdown), INFO ``# Cluster``
    (``cluster_enabled:1``) and ``redis_mode:cluster`` in ``# Server``."""

    name = "cluster"
    info_name = "cluster"
    info_extends = ("server",)

    def __init__(self, engine: ClusterEngine) -> None:
        self.engine = engine

    async def start(self) -> None:
        self.engine.poller.start()

    async def stop(self) -> None:
        await self.engine.poller.stop()

    def resetstat(self) -> None:
        self.engine.counters.reset()  # CONFIG RESETSTAT clears CLUSTER SLOT-STATS's counters

    def info_section(self) -> dict[str, Any]:
        return {"cluster_enabled": 1}

    def info_extra(self, section: str) -> dict[str, Any]:
        return {"redis_mode": "cluster"}
