"""The reply shapes of the topology commands, as Redis 7.0 builds them: CLUSTER SLOTS, SHARDS,
INFO (COUNTKEYSINSLOT/GETKEYSINSLOT read the database's per-slot index, ``Database.keys_in_slot``)."""

from __future__ import annotations

from typing import Any

from pion.protocol.keyslot import SLOTS
from pion.protocol.resp import Verbatim
from pion.server.cluster.state import ClusterState, Node, slot_ranges


def slots_reply(state: ClusterState) -> list[Any]:
    """CLUSTER SLOTS: ``[start, end, [host, port, id, {}?]]`` per run of slots, in slot order."""
    out: list[Any] = []
    start = 0
    owner = state.owner
    while start < SLOTS:
        node = owner[start]
        end = start
        while end + 1 < SLOTS and owner[end + 1] is node:
            end += 1
        if node is not None:
            out.append([start, end, [node.host, node.port, node.id, []]])
        start = end + 1
    for entry in out:
        entry[2].pop()  # Redis 7.0 sends [host, port, id] (the metadata map is 7.2+)
    return out


def _node_map(node: Node) -> dict[str, Any]:
    return {"id": node.id, "port": node.port, "ip": node.host, "endpoint": node.host, "role": "master",
            "replication-offset": 0, "health": "fail" if node.unreachable and not node.myself else "online"}


def shards_reply(state: ClusterState) -> list[Any]:
    """CLUSTER SHARDS: one map per master, ``{slots: [start, end, ...], nodes: [{...}]}``."""
    nodes = sorted(state.nodes.values(), key=lambda n: (min(n.slots) if n.slots else SLOTS, n.id))
    out = []
    for node in nodes:
        flat = [bound for run in slot_ranges(node.slots) for bound in run]
        out.append({"slots": flat, "nodes": [_node_map(node)]})
    return out


def info_reply(state: ClusterState, stats: dict[str, int]) -> Verbatim:
    """CLUSTER INFO's text."""
    return Verbatim("".join(f"{k}:{v}\r\n" for k, v in info_fields(state, stats).items()))


def info_fields(state: ClusterState, stats: dict[str, int]) -> dict[str, object]:
    """CLUSTER INFO's fields (the dashboard shows them too)."""
    assigned = state.assigned()
    masters = sum(1 for n in state.nodes.values() if n.slots)
    pfail = sum(len(n.slots) for n in state.nodes.values() if n.unreachable and not n.myself)
    fields = {
        "cluster_state": "ok" if state.is_ok() else "fail",
        "cluster_slots_assigned": assigned, "cluster_slots_ok": assigned - pfail, "cluster_slots_pfail": pfail,
        "cluster_slots_fail": 0, "cluster_known_nodes": len(state.nodes), "cluster_size": masters,
        "cluster_current_epoch": state.current_epoch, "cluster_my_epoch": state.myself.epoch,
        **stats, "total_cluster_links_buffer_limit_exceeded": 0,
    }
    return fields
