"""``maxmemory``: keep the dataset estimate current, evict by policy, refuse with -OOM.

The estimate (``pion.storage.memory``) is updated from the keys of every logged write (the
journal's observers see them all), so no scan is needed per command. Before each command, if
the estimate is over ``maxmemory``, keys are evicted by the policy until it is under (at most a
few milliseconds per command, as Redis's eviction tenacity); if it is still over, commands
flagged ``denyoom`` get ``-OOM``. Each eviction is logged as ``DEL`` so replay stays exact.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.storage.memory import Accounting, Evictor

if TYPE_CHECKING:
    from pion.server.app import Server

#: spend at most this long evicting before one command
EVICTION_BUDGET = 0.005
_RESCAN = frozenset({b"flushall", b"flushdb", b"swapdb"})


class MemoryManager:
    """``server.engines["memory"]``: INFO's ``used_memory`` and the eviction guard."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.accounting = Accounting(len(server.dbs))
        self.evictor = Evictor()
        self.evictions = 0

    def used_memory(self) -> int:
        """Dataset estimate: keys, values, and the arena bytes values hold views of."""
        return self.accounting.used

    def rescan(self) -> None:
        self.accounting.rescan(self.server.dbs)

    def observe(self, effects: list[tuple[int, list[bytes]]]) -> None:
        """A journal observer: refresh the estimate of every key a write touched."""
        server = self.server
        table = server.table
        dbs = server.dbs
        update = self.accounting.update
        for db_index, argv in effects:
            if db_index >= len(dbs):
                continue  # a tenant's database: its quota is counted by pion.server.tenants
            name = argv[0]
            spec = table.by_name.get(name) or table.by_name.get(bytes(name).lower())
            if spec is None:
                continue
            if spec.subcommands:
                if len(argv) < 2:
                    continue
                spec = spec.subcommands.get(bytes(argv[1]).lower(), spec)
            positions = spec.key_positions(argv)
            if not positions:
                if bytes(name).lower() in _RESCAN:
                    self.rescan()
                continue
            db = dbs[db_index]
            for position in positions:
                update(db, argv[position])
            if spec.name in ("move", "copy"):  # the key may land in another database
                moved = argv[1] if spec.name == "move" else argv[2]
                for other in dbs:
                    if other is not db:
                        update(other, moved)

    # -- the guard ------------------------------------------------------------------------------

    def over_limit(self) -> bool:
        limit = self.server.settings.maxmemory
        return bool(limit) and self.accounting.used > limit

    def check(self, spec: Any) -> ReplyError | None:
        """Evict if over the limit; -OOM for a command that may grow memory if still over."""
        if not self.over_limit():
            return None
        self.evict()
        if self.over_limit() and "denyoom" in spec.flags:
            return ReplyError(errors.OOM)
        return None

    def evict(self) -> int:
        """Evict by policy until under the limit or the time budget is spent; returns the count."""
        server = self.server
        settings = server.settings
        policy = settings.maxmemory_policy
        if policy == "noeviction":
            return 0
        started = time.perf_counter()
        count = 0
        dispatcher = server.dispatcher
        while self.over_limit():
            choice = self.evictor.choose(server.dbs, policy, settings.maxmemory_samples)
            if choice is None:
                break
            db_index, key = choice
            db = server.dbs[db_index]
            db.delete(key)
            self.accounting.update(db, key)
            server.stat_evicted += 1
            dispatcher.pending.append((db_index, [b"DEL", key]))
            if server.notify_flags:
                server.pubsub.notify_keyspace_event("e", "evicted", key, db_index)
            count += 1
            if count % 16 == 0 and time.perf_counter() - started > EVICTION_BUDGET:
                break
        if count and dispatcher.depth == 0:
            dispatcher.finish_command(None)
        self.evictions += count
        return count
