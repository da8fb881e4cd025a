"""Build a Server from Settings and run it on uvloop until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging

from pion.config import Settings
from pion.server.app import Server

log = logging.getLogger("pion.server")


class StartupError(Exception):
    """The server refuses to start (a bad setting, a locked or corrupt data dir); the message says why."""


def make_server(settings: Settings) -> Server:
    """The one place that wires the engines onto a core server."""
    # security first: refuse an exposed or misconfigured start before anything is locked or opened
    from pion.server.auth import check_startup
    from pion.server.auth import install as install_security

    tenant_specs = check_startup(settings)
    server = Server(settings)
    # durability first: the data-dir lock, arenas, the log (appendonly), recovery as the first
    # startup hook (before listening), snapshots, maxmemory; other engines find it in engines
    from pion.server.persistence import install as install_persistence

    install_persistence(server)
    # users and tenants (their databases, guard, snapshot extension), TLS
    install_security(server, tenant_specs)
    # Lua scripting: its function libraries are a snapshot extension
    from pion.server.scripting.engine import install as install_scripting

    install_scripting(server)
    # the K/V engine last: it registers a snapshot extension with the persistence engine, if any
    from pion.server.commands.kvcache import install as install_kvcache

    install_kvcache(server)
    # the MoE expert tier, with --moe-cache
    from pion.server.commands.moe_experts import install as install_moe

    install_moe(server)
    # search (FT.*) over the keyspace: key hooks, background scans, its snapshot extension
    from pion.server.commands.search_admin import install as install_search

    install_search(server)
    # embeddings (AI.EMBED, the semantic cache, agent memory): the model loads on first use
    from pion.server.commands.ai_embed import install as install_embedding

    install_embedding(server)
    # the semantic cache's and agent memory's own indexes come back after a restart
    from pion.server.commands.ai_memory import install as install_memory

    install_memory(server)
    # FT indexes whose vector fields the server fills from a text field (VECTOR ... EMBED field)
    from pion.server.commands.search_embed import install as install_auto_embed

    install_auto_embed(server)
    # replication (docs/replication.md): feeds replicas from the journal, follows replicaof
    from pion.server.replication import install as install_replication

    install_replication(server)
    return server


def run_server(settings: Settings) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a hard dependency on Linux
        uvloop = None
    try:
        server = make_server(settings)
        if uvloop is not None:
            uvloop.run(server.serve_forever())
        else:
            asyncio.run(server.serve_forever())
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        log.error("could not start: %s", exc)
        return 1
    return 0
