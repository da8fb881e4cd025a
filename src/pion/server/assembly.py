"""The assembler: the one place that knows every part of the server and builds it from Settings.

The start order is written here, top to bottom: security checks refuse an unsafe start before
anything is locked or opened; durability takes the data-directory lock and puts the journal,
the arenas and the memory guard in place (its recovery is the first start-up hook, so the
keyspace is full before any listener opens); security (users, tenants, TLS) next, since tenants
count their memory through the journal; then scripting, the K/V engine, the MoE expert tier,
search, embeddings and agent memory, which register snapshot extensions with durability; the metrics endpoint last (it opens
after recovery and reads every part). Shutdown runs the hooks in the same order, after the
listeners closed (``Server.stop``).
Admission (``pion.server.admission``) is handed the security, memory and durability parts here.
"""

from __future__ import annotations

from pion.config import Settings
from pion.kvcache import KVEngine
from pion.server.app import Server
from pion.server.context import kv_engine


def make_server(settings: Settings) -> Server:
    """A server with every part wired, not yet started (``await server.start()``)."""
    from pion.server import cluster, metrics, replication
    from pion.server.commands import ai_embed, ai_memory, moe_experts, search_admin, search_embed
    from pion.server.durability import persistence
    from pion.server.scripting import engine as scripting
    from pion.server.security import security

    tenant_specs = security.check_startup(settings)
    server = Server(settings)
    persistence.install(server)
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
    metrics.install(server)
    return server


def install_kvcache(server: Server) -> KVEngine:
    """The K/V engine: INFO ``# Pion``, CONFIG RESETSTAT, stale export clean-up, idle staged
    stores, arena crc checks of mapped rows, and its snapshot extension."""
    from pion.kvcache import persist
    from pion.server.commands.kv_export import clean_stale_exports
    from pion.server.commands.kv_stage import abort_idle
    from pion.server.commands.kv_substrates import info_section
    from pion.server.durability.persistence import SnapshotExtension

    kv = kv_engine(server)
    server.info_sections["pion"] = info_section
    server.resetstat_hooks.append(lambda srv: kv.reset_ledgers())
    server.startup_hooks.append(clean_stale_exports)
    server.cron_hooks.append(abort_idle)  # staged stores whose writer went quiet
    server.shutdown_hooks.append(lambda srv: kv.close_exports())  # V.EXPORT files (may be shared memory)
    arenas = server.parts.arenas
    if arenas is not None:  # mapped rows are checked against their crc before use
        kv.check_blobs_with(arenas.blob_ok)
    owner = server.parts.persistence
    if owner is not None:
        owner.snapshot_extensions.append(SnapshotExtension(
            name="kvcache", dump=lambda: persist.dump(kv), load=lambda data: persist.load(kv, data)))
    return kv
