"""A cluster node's view of the cluster: the nodes, who owns each of the 16384 slots, the slots
being migrated or imported, and the config file (Redis's ``nodes.conf`` format) that holds it.

There is no cluster bus. Each node is the authority for its own slots; it learns the others'
by asking them ``CLUSTER NODES`` over their client port (``pion.server.cluster.peers``), and a
conflict (two nodes claiming a slot during a reshard) goes to the higher config epoch, as in
Redis. Every change is written to the config file at once (write, fsync, rename), so a node
that restarts comes back with the topology it had.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from pion.protocol.keyslot import SLOTS

#: how long a FORGET keeps a node from being learned again from a peer (Redis: 60 s)
FORGET_TTL = 60.0


@dataclass(slots=True)
class Node:
    id: str
    host: str
    port: int
    cport: int = 0
    epoch: int = 0
    myself: bool = False
    #: no answer yet from a node we met (its id is a placeholder until it tells us its own)
    handshake: bool = False
    #: the last poll failed (shown as ``fail?`` in CLUSTER NODES)
    unreachable: bool = False
    ping_sent: int = 0
    pong_recv: int = 0
    slots: set[int] = field(default_factory=set)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}@{self.cport or self.port + 10000}"

    def flag_text(self) -> str:
        flags = (["myself"] if self.myself else []) + ["master"]
        if self.unreachable and not self.myself:
            flags.append("fail?")
        if self.handshake:
            flags.append("handshake")
        return ",".join(flags)


def new_node_id() -> str:
    return os.urandom(20).hex()


def slot_ranges(slots: set[int] | list[int]) -> list[tuple[int, int]]:
    """Sorted slots as (start, end) runs."""
    out: list[tuple[int, int]] = []
    for slot in sorted(slots):
        if out and out[-1][1] == slot - 1:
            out[-1] = (out[-1][0], slot)
        else:
            out.append((slot, slot))
    return out


class ClusterState:
    def __init__(self, path: str, host: str, port: int) -> None:
        self.path = path
        self.owner: list[Node | None] = [None] * SLOTS
        self.nodes: dict[str, Node] = {}
        self.migrating: dict[int, str] = {}  # slot -> target node id
        self.importing: dict[int, str] = {}  # slot -> source node id
        self.current_epoch = 0
        self.forgotten: dict[str, float] = {}
        self.require_full_coverage = True
        #: CLUSTER SLOT-STATS's counters (pion.server.cluster.slot_stats), set by the engine
        self.counters: Any = None
        if not self._load():
            self.myself = Node(new_node_id(), host, port, myself=True)
            self.nodes[self.myself.id] = self.myself
            self.save()
        self.myself.host, self.myself.port = host, port  # the address may change between runs

    # -- slots -------------------------------------------------------------------------------

    def assign(self, slot: int, node: Node) -> None:
        old = self.owner[slot]
        if old is node:
            return
        if old is not None:
            old.slots.discard(slot)
        self.owner[slot] = node
        node.slots.add(slot)
        if self.counters is not None:  # as Redis's clusterAddSlot: the new owner's counters start at 0
            self.counters.reset_slot(slot)

    def unassign(self, slot: int) -> None:
        old = self.owner[slot]
        if old is not None:
            old.slots.discard(slot)
        self.owner[slot] = None

    def assigned(self) -> int:
        return sum(len(n.slots) for n in self.nodes.values())

    def is_ok(self) -> bool:
        """``cluster_state:ok``: every slot has an owner (or full coverage is not required)."""
        return not self.require_full_coverage or self.assigned() == SLOTS

    def bump_epoch(self) -> None:
        """Give myself a config epoch above every known one (a slot I take wins conflicts)."""
        top = max([self.current_epoch, *(n.epoch for n in self.nodes.values())])
        if self.myself.epoch < top or self.myself.epoch == 0:
            self.current_epoch = top + 1
            self.myself.epoch = self.current_epoch

    # -- nodes -------------------------------------------------------------------------------

    def find(self, node_id: str) -> Node | None:
        return self.nodes.get(node_id)

    def add_node(self, node: Node) -> Node:
        self.nodes[node.id] = node
        return node

    def remove_node(self, node: Node) -> None:
        for slot in list(node.slots):
            self.unassign(slot)
        for table in (self.migrating, self.importing):
            for slot in [s for s, nid in table.items() if nid == node.id]:
                del table[slot]
        self.nodes.pop(node.id, None)

    def rename(self, node: Node, new_id: str) -> None:
        """A handshake node told us its real id."""
        self.nodes.pop(node.id, None)
        node.id = new_id
        node.handshake = False
        self.nodes[new_id] = node

    def forget(self, node: Node) -> None:
        self.remove_node(node)
        self.forgotten[node.id] = time.monotonic() + FORGET_TTL

    def is_forgotten(self, node_id: str) -> bool:
        until = self.forgotten.get(node_id)
        if until is None:
            return False
        if until < time.monotonic():
            del self.forgotten[node_id]
            return False
        return True

    def reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every other node and every slot; HARD also takes a new id."""
        for node in [n for n in self.nodes.values() if not n.myself]:
            self.remove_node(node)
        for slot in list(self.myself.slots):
            self.unassign(slot)
        self.migrating.clear()
        self.importing.clear()
        if hard:
            self.nodes.pop(self.myself.id)
            self.myself.id = new_node_id()
            self.nodes[self.myself.id] = self.myself
            self.current_epoch = self.myself.epoch = 0
        self.save()

    # -- the config file ---------------------------------------------------------------------

    def node_line(self, node: Node) -> str:
        parts = [node.id, node.address, node.flag_text(), "-", str(node.ping_sent),
                 str(0 if node.myself else node.pong_recv), str(node.epoch),
                 "disconnected" if node.unreachable and not node.myself else "connected"]
        parts += [f"{a}-{b}" if a != b else str(a) for a, b in slot_ranges(node.slots)]
        if node.myself:
            parts += [f"[{s}->-{t}]" for s, t in sorted(self.migrating.items())]
            parts += [f"[{s}-<-{f}]" for s, f in sorted(self.importing.items())]
        return " ".join(parts)

    def nodes_text(self) -> str:
        """CLUSTER NODES: one line per node, as Redis writes them."""
        ordered = sorted(self.nodes.values(), key=lambda n: (not n.myself, n.id))
        return "".join(self.node_line(n) + "\n" for n in ordered)

    def save(self) -> None:
        text = self.nodes_text() + f"vars currentEpoch {self.current_epoch} lastVoteEpoch 0\n"
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def _load(self) -> bool:
        try:
            with open(self.path, encoding="utf-8") as src:
                lines = src.read().splitlines()
        except FileNotFoundError:
            return False
        myself = None
        for line in lines:
            words = line.split()
            if not words:
                continue
            if words[0] == "vars":
                pairs = dict(zip(words[1::2], words[2::2], strict=False))
                self.current_epoch = int(pairs.get("currentEpoch", 0))
                continue
            node, claims = parse_node_line(words)
            self.nodes[node.id] = node
            for item in claims:
                self._load_claim(node, item)
            if node.myself:
                myself = node
        if myself is None:
            raise ValueError(f"cluster config file {self.path} names no 'myself' node")
        self.myself = myself
        return True

    def _load_claim(self, node: Node, item: str) -> None:
        if item.startswith("["):
            body = item.strip("[]")
            if "->-" in body:
                slot, target = body.split("->-")
                self.migrating[int(slot)] = target
            elif "-<-" in body:
                slot, source = body.split("-<-")
                self.importing[int(slot)] = source
            return
        start, _, end = item.partition("-")
        for slot in range(int(start), int(end or start) + 1):
            self.assign(slot, node)


def parse_node_line(words: list[str]) -> tuple[Node, list[str]]:
    """A CLUSTER NODES / nodes.conf line: the node and its slot items (ranges, [migrations])."""
    if len(words) < 8:
        raise ValueError(f"malformed cluster node line: {' '.join(words)!r}")
    addr = words[1].split(",")[0]
    hostport, _, cport = addr.partition("@")
    host, _, port = hostport.rpartition(":")
    flags = set(words[2].split(","))
    node = Node(words[0], host, int(port or 0), int(cport or 0), epoch=int(words[6]),
                myself="myself" in flags, handshake="handshake" in flags)
    return node, words[8:]
