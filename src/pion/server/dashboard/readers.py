"""What the page shows, read where the metrics endpoint and INFO read it.

One source: the K/V counters, memory, keys and clients come from the metrics endpoint's own
collector (``pion.server.metrics.ServerCollector``, the families a scrape gets), the memory,
replication and cluster panels from INFO's section readers (``server.info_sections``) and
CLUSTER INFO's fields, the search panel from FT.INFO's reader, the slow log from SLOWLOG's
entries. Nothing here counts anything of its own.

A ``Viewer`` is who looks: ``tenant`` None is a user of the main keyspace, who sees every K/V
space (the server's own is ``default``, as in the metrics' ``tenant`` label) and the whole
server; a tenant sees its own space, memory and indexes only, never another's nor the
server-wide panels (replication, cluster, slow log: @admin in Redis, refused to tenants).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pion.server.metrics import ServerCollector
from pion.server.pubsub import TENANT_SHIFT

if TYPE_CHECKING:
    from pion.server.app import Server

DEFAULT_SPACE = "default"
SLOWLOG_SHOWN = 50


@dataclass(frozen=True, slots=True)
class Viewer:
    user: str
    tenant: str | None

    def sees(self, space: str) -> bool:
        return self.tenant is None or space == self.tenant


def space_name(raw: bytes) -> str:
    """A K/V space's name as the metrics label it (b"" is the server's own: ``default``)."""
    return raw.decode("utf-8", "replace") or DEFAULT_SPACE


def _by_space(family: Any) -> dict[str, float]:
    return {s.labels.get("tenant", DEFAULT_SPACE): s.value for s in family.samples
            if not s.name.endswith("_created")}


def kv_families(server: Server) -> dict[str, dict[str, float]]:
    """The metrics endpoint's K/V families, by name, each ``{space: value}``."""
    return {family.name: _by_space(family) for family in ServerCollector(server).kvcache()}


def kv_counters(server: Server) -> dict[str, tuple[int, int, int]]:
    """The history's sample: per space, cumulative (hits, misses, µs of prefill saved)."""
    kv = kv_families(server)
    hits, misses = kv.get("pion_kv_prefix_hits", {}), kv.get("pion_kv_prefix_misses", {})
    saved = kv.get("pion_kv_prefill_saved_seconds", {})
    spaces = set(hits) | set(misses) | set(saved)
    return {space: (int(hits.get(space, 0)), int(misses.get(space, 0)), round(saved.get(space, 0.0) * 1e6))
            for space in spaces}


def overview(server: Server, viewer: Viewer) -> dict[str, Any]:
    """The header and the cards: the K/V cache's hits and budget, memory, the server."""
    kv = kv_families(server)
    engine = server.parts.kvcache
    spaces: list[dict[str, Any]] = []
    for raw, space in sorted(engine.spaces.items()) if engine is not None else ():
        name = space_name(raw)
        if not viewer.sees(name):
            continue

        def get(family: str, name: str = name) -> float:
            return kv.get(family, {}).get(name, 0.0)

        spaces.append({
            "space": name, "prefixes": len(space.registry.prefixes), "pinned": len(space.evictor.pinned),
            "hits": int(get("pion_kv_prefix_hits")), "misses": int(get("pion_kv_prefix_misses")),
            "tokens_served": int(get("pion_kv_tokens_served")), "bytes_served": int(get("pion_kv_bytes_served")),
            "prefill_saved_s": get("pion_kv_prefill_saved_seconds"),
            "stored_bytes": int(get("pion_kv_stored_bytes")), "evictions": int(get("pion_kv_evictions")),
        })
    total: dict[str, Any] = {key: sum(s[key] for s in spaces) for key in
             ("prefixes", "pinned", "hits", "misses", "tokens_served", "bytes_served", "prefill_saved_s",
              "stored_bytes", "evictions")}
    lookups = total["hits"] + total["misses"]
    total["hit_rate"] = total["hits"] / lookups if lookups else None
    return {
        "viewer": {"user": viewer.user, "tenant": viewer.tenant},
        "server": _server(server, viewer),
        "kv": {**total, "budget_bytes": server.settings.kv_maxmemory, "spaces": spaces},
        "memory": _memory(server, viewer),
        "time": time.time(),
    }


def _server(server: Server, viewer: Viewer) -> dict[str, Any]:
    fields = server.info_sections["server"](server)
    out: dict[str, Any] = {"version": fields.get("pion_version", server.version),
                           "uptime_s": int(str(fields.get("uptime_in_seconds", 0)))}
    if viewer.tenant is None:
        out["role"] = server.info_sections["replication"](server).get("role", "master")
        out["connected_clients"] = len(server.clients)
    else:
        out["connected_clients"] = sum(1 for c in server.clients.values() if c.tenant == viewer.tenant)
    return out


def _memory(server: Server, viewer: Viewer) -> dict[str, Any]:
    if viewer.tenant is not None:  # what the tenant's INFO memory says (pion.server.security.tenants)
        tenants = server.parts.tenants
        if tenants is None or viewer.tenant not in tenants.specs:
            return {}
        return {"used_bytes": tenants.used(viewer.tenant), "max_bytes": tenants.specs[viewer.tenant].quota,
                "policy": "noeviction"}
    info = server.info_sections["memory"](server)
    stats = server.info_sections["stats"](server)
    keys = sum(len(db.data) for db in server.dbs)  # INFO keyspace's keys=, summed
    return {"used_bytes": info["used_memory"], "max_bytes": info["maxmemory"], "rss_bytes": info["used_memory_rss"],
            "peak_bytes": info["used_memory_peak"], "policy": info["maxmemory_policy"],
            "evicted_keys": stats["evicted_keys"], "expired_keys": stats["expired_keys"], "keys": keys}


def search(server: Server, viewer: Viewer) -> dict[str, Any]:
    """The search indexes the viewer's databases hold: FT.INFO's docs, vectors and progress."""
    from pion.server.commands.search.admin import percent_indexed

    engine = server.parts.search
    if engine is None:
        return {"enabled": False, "indexes": []}
    tenants = server.parts.tenants
    owners = tenants.by_owner if tenants is not None else {}
    rows = []
    for (db_id, name), index in sorted(engine.indexes.items(), key=lambda item: (item[0][0], item[0][1])):
        if index.hidden:
            continue
        owner = db_id >> TENANT_SHIFT
        space = DEFAULT_SPACE if owner == 0 else owners.get(owner, "?")
        if not viewer.sees(space):
            continue
        rows.append({"space": space, "db": db_id & ((1 << TENANT_SHIFT) - 1), "name": name, "docs": len(index),
                     "vectors": sum(len(field) for field in index.vectors.values()),
                     "indexing": bool(index.indexing), "percent_indexed": percent_indexed(index),
                     "failures": index.failures, "memory_bytes": index.memory_bytes()})
    return {"enabled": True, "indexes": rows}


def replication(server: Server) -> dict[str, Any]:
    """INFO replication's fields, and CLUSTER INFO's on a cluster node (a main-keyspace user only)."""
    out: dict[str, Any] = {"replication": _plain(server.info_sections["replication"](server)),
                           "cluster": _plain(server.info_sections["cluster"](server))}
    cluster = server.parts.cluster
    if cluster is not None:
        from pion.server.cluster.replies import info_fields

        out["cluster"].update(_plain(info_fields(cluster.state, cluster.message_stats())))
    return out


def slowlog(server: Server) -> dict[str, Any]:
    """SLOWLOG GET's newest entries (credentials already hidden by the slow log itself)."""
    log = server.slowlog
    entries = list(log.entries)[:SLOWLOG_SHOWN] if log is not None else []
    return {
        "threshold_us": server.settings.slowlog_log_slower_than, "max_len": server.settings.slowlog_max_len,
        "length": len(log.entries) if log is not None else 0,
        "entries": [{"id": e[0], "time": e[1], "usec": e[2],
                     "command": " ".join(_shown(bytes(a)) for a in e[3]),
                     "client": bytes(e[4]).decode("utf-8", "replace"),
                     "name": bytes(e[5] or b"").decode("utf-8", "replace")} for e in entries],
    }


def _shown(arg: bytes) -> str:
    """An argument as text; binary ones (a K/V blob's head) escaped as redis-cli shows them."""
    text = arg.decode("utf-8", "replace")
    if "\ufffd" in text or any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return arg.decode("latin-1").encode("unicode_escape").decode("ascii")
    return text


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready values (INFO's fields are ints, floats and strings; anything else as text)."""
    return {key: value if isinstance(value, int | float | str) else str(value) for key, value in fields.items()}
