"""The server's parts as typed fields (``server.parts``), filled in by the assembler.

Each part is ``None`` until the module that owns it installs it, and stays ``None`` where it is
not configured (no data directory: no ``persistence``, ``memory`` or ``arenas``; no
``cluster-enabled``: no ``cluster``; no ``--metrics-port``: no ``metrics``; no
``--dashboard-port``: no ``dashboard``). A command that needs an absent part answers the error
its module always answered; nothing looks a part up by name.
A few parts are made on first use by their own module (``kvcache``, ``attention``, ``acl``,
``tls``), so a server built without the assembler (tests) still has them when asked.

Only types are imported here (under ``TYPE_CHECKING``): this module is a leaf of the core, and
every wing may import it without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio
    import ssl

    from pion.attention.engine import AttentionEngine
    from pion.embedding.service import Embedder
    from pion.kvcache import KVEngine
    from pion.moe import ExpertTier
    from pion.server.cluster import ClusterEngine
    from pion.server.commands.search.embed import AutoEmbedder
    from pion.server.dashboard.part import Dashboard
    from pion.server.durability.memory_guard import MemoryManager
    from pion.server.durability.persistence import Persistence
    from pion.server.metrics import MetricsEndpoint
    from pion.server.replication import Replication
    from pion.server.scripting.engine import ScriptingEngine
    from pion.server.security.auth import Users
    from pion.server.security.tenants import Tenants
    from pion.storage.arena import ArenaStore
    from pion.vector.engine import SearchEngine


@dataclass(eq=False)
class Parts:
    """Every optional part of one server, by what it is (see the module docstring)."""

    # durability (pion.server.durability): only with a data directory
    persistence: Persistence | None = None
    memory: MemoryManager | None = None
    arenas: ArenaStore | None = None
    # security (pion.server.security, pion.server.net.tls)
    acl: Users | None = None
    tenants: Tenants | None = None
    tls: ssl.SSLContext | None = None
    tls_listener: asyncio.AbstractServer | None = None
    # engines and the command families that own them
    scripting: ScriptingEngine | None = None
    kvcache: KVEngine | None = None
    attention: AttentionEngine | None = None
    moe: ExpertTier | None = None
    search: SearchEngine | None = None
    #: MODULE LIST's entries, as Redis 8 reports its bundled modules: vector sets (always built in,
    #: Redis's ``vectorset`` module, version 1); search adds ``search`` and ``ReJSON`` when installed
    modules: list[dict[bytes, Any]] = field(default_factory=lambda: [
        {b"name": b"vectorset", b"ver": 1, b"path": b"", b"args": []}])
    embedding: Embedder | None = None
    auto_embed: AutoEmbedder | None = None
    #: agent memory's counters (INFO), made when its commands are installed
    agent_memory: dict[str, int] | None = None
    # scale-out and observation
    cluster: ClusterEngine | None = None
    replication: Replication | None = None
    metrics: MetricsEndpoint | None = None
    dashboard: Dashboard | None = None
