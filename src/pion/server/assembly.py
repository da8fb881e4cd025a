"""The assembler: the one place that knows every part of the server and builds it from Settings.

The start order is written here, top to bottom; each family's ``install`` adds its component
(``pion.server.component``) to the server as it is called, so the components start in this
order and stop in reverse. Security checks refuse an unsafe start before anything is locked or
opened; durability takes the data-directory lock and puts the journal, the arenas and the memory
guard in place (its recovery is the first start-up step, so the keyspace is full before any
other part starts or a listener opens; it closes the log and unlocks last); cluster mode;
security (users, tenants, TLS) next, since tenants count their memory through the journal; then
scripting, the K/V engine, the MoE expert tier, search, embeddings and agent memory, which
register snapshot extensions with durability; replication; durability's final save (after every
engine, so at shutdown it runs before any of them tears its state down); the metrics endpoint
and the dashboard last (they open after recovery and read every part). Admission
(``pion.server.admission``) is handed the security, memory and durability parts here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pion.config import Settings
from pion.kvcache import KVEngine
from pion.server.app import Server
from pion.server.component import Component
from pion.server.context import kv_engine


def make_server(settings: Settings) -> Server:
    """A server with every part wired, not yet started (``await server.start()``)."""
    from pion.server import cluster, dashboard, metrics, replication
    from pion.server.commands.ai import embed as ai_embed
    from pion.server.commands.ai import memory as ai_memory
    from pion.server.commands.moe import experts as moe_experts
    from pion.server.commands.search import admin as search_admin
    from pion.server.commands.search import embed as search_embed
    from pion.server.durability import persistence
    from pion.server.durability.persistence_hooks import FinalSave
    from pion.server.scripting import engine as scripting
    from pion.server.security import security

    tenant_specs = security.check_startup(settings)
    server = Server(settings)
    durability = persistence.install(server)  # first: recovery starts first, the lock goes last
    cluster.install(server)  # cluster-enabled yes: a node that redirects by slot (admission asks it)
    server.admission.security = security.install(server, tenant_specs)
    scripting.install(server)
    install_kvcache(server)
    moe_experts.install(server)
    search_admin.install(server)
    ai_embed.install(server)  # embeddings (AI.EMBED, semantic cache, agent memory): model on first use
    ai_memory.install(server)  # the semantic cache's and agent memory's own indexes, after a restart
    search_embed.install(server)  # FT vector fields the server fills from a text field (EMBED)
    replication.install(server)  # feeds replicas from the journal, follows replicaof (docs/replication.md)
    server.add_component(FinalSave(durability))  # stopped before every engine above (reverse order)
    metrics.install(server)
    dashboard.install(server)  # the page reads what metrics and INFO read (docs/dashboard.md)
    return server


def install_kvcache(server: Server) -> KVEngine:
    """The K/V engine: INFO ``# Pion``, CONFIG RESETSTAT, stale export clean-up, idle staged
    stores, arena crc checks of mapped rows, and its snapshot extension."""
    from pion.kvcache import persist
    from pion.server.commands.kv.export import clean_stale_exports
    from pion.server.commands.kv.stage import abort_idle
    from pion.server.commands.kv.substrates import info_section
    from pion.server.durability.persistence import SnapshotExtension

    kv = kv_engine(server)
    server.add_component(KVCachePart(server, kv, info_section, clean_stale_exports, abort_idle))
    arenas = server.parts.arenas
    if arenas is not None:  # mapped rows are checked against their crc before use
        kv.check_blobs_with(arenas.blob_ok)
    owner = server.parts.persistence
    if owner is not None:
        owner.snapshot_extensions.append(SnapshotExtension(
            name="kvcache", dump=lambda: persist.dump(kv), load=lambda data: persist.load(kv, data)))
    return kv


class KVCachePart(Component):
    """The K/V engine's moments: stale V.EXPORT files removed at start, staged stores whose writer
    went quiet aborted in the cron, exports closed at stop (they may be shared memory), INFO
    ``# Pion`` (kept last), CONFIG RESETSTAT of its ledgers."""

    name = "kvcache"
    info_name = "pion"

    def __init__(self, server: Server, kv: KVEngine, info: Callable[[Server], dict[str, Any]],
                 clean: Callable[[Server], None], abort_idle: Callable[[Server], None]) -> None:
        self.server, self.kv = server, kv
        self._info, self._clean, self._abort_idle = info, clean, abort_idle

    async def start(self) -> None:
        self._clean(self.server)

    async def stop(self) -> None:
        self.kv.close_exports()

    def cron(self) -> None:
        self._abort_idle(self.server)

    def resetstat(self) -> None:
        self.kv.reset_ledgers()

    def info_section(self) -> dict[str, Any]:
        return self._info(self.server)
