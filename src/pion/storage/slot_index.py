"""The keys of each Redis Cluster hash slot, for CLUSTER COUNTKEYSINSLOT / GETKEYSINSLOT.

Redis keeps per-slot key lists on a cluster node so those commands (which ``redis-cli --cluster
reshard`` runs in a loop) do not scan the keyspace. Here a ``Database`` builds a ``SlotIndex`` on
the first such call (cluster mode only: a standalone server never builds one and pays nothing)
and then keeps it in step in ``set``/``_remove``; ``flush`` drops it. A keyspace changed around
those methods (a snapshot load, a replica's full sync replaces or refills databases) is caught by
the total no longer matching the keyspace's size, and the index is rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pion.protocol.keyslot import key_slot


class SlotIndex:
    """slot -> its keys (insertion ordered); ``total`` counts them all."""

    __slots__ = ("slots", "total")

    def __init__(self, keys: Iterable[bytes] = ()) -> None:
        self.slots: dict[int, dict[bytes, None]] = {}
        self.total = 0
        for key in keys:
            self.add(key)

    def add(self, key: bytes) -> None:
        slot = key_slot(key)
        members = self.slots.get(slot)
        if members is None:
            members = self.slots[slot] = {}
        if key not in members:
            members[key] = None
            self.total += 1

    def discard(self, key: bytes) -> None:
        slot = key_slot(key)
        members = self.slots.get(slot)
        if members is not None and members.pop(key, 0) is None:
            self.total -= 1
            if not members:
                del self.slots[slot]

    def keys(self, slot: int) -> Iterator[bytes]:
        return iter(self.slots.get(slot, ()))
