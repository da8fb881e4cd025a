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
STRUCTURE_REFRESH = 256
_RESCAN = frozenset({b"flushall", b"flushdb", b"swapdb"})


class MemoryManager:
    """``server.parts.memory``: INFO's ``used_memory`` and the eviction guard."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.accounting = Accounting(len(server.dbs))
        self.evictor = Evictor()
        self.evictions = 0
        #: per-key accounting runs only while maxmemory is set (it costs ~1 us per write)
        self.active = False
        self._kinds: dict[bytes, tuple[int, Any]] = {}
        self._journal: Any = None
        #: engines whose memory is not in the keyspace (search indexes) add theirs here
        self.extra_bytes: list[Any] = []
        #: bytes of the keyspaces' own structures outside the per-key estimates (the SCAN and
        #: sampling tables), refreshed every STRUCTURE_REFRESH writes
        self.structures = 0
        self._writes = 0

    def used_memory(self) -> int:
        """Dataset estimate (keys, values, arena bytes values hold views of, the keyspaces' SCAN
        tables) while maxmemory is set; otherwise the process's resident size."""
        if self.active:
            return self.accounting.used + self.structures + sum(extra() for extra in self.extra_bytes)
        from pion.server.admin.info import rss_bytes

        return rss_bytes()

    def follow_settings(self, journal: Any) -> None:
        """Start (with one full scan) or stop per-key accounting as maxmemory is set or cleared."""
        want = bool(self.server.settings.maxmemory)
        if journal is not self._journal and self._journal is not None and self.observe in self._journal.observers:
            self._journal.observers.remove(self.observe)
            self.active = False
        self._journal = journal
        if want and not self.active:
            self.rescan()
            journal.observers.append(self.observe)
            self.active = True
        elif not want and self.active:
            journal.observers.remove(self.observe)
            self.active = False
            self.accounting = Accounting(len(self.server.dbs))

    def rescan(self) -> None:
        self.accounting.rescan(self.server.dbs)
        self.refresh_structures()

    def refresh_structures(self) -> None:
        self.structures = sum(db.scan_table.nbytes() for db in self.server.dbs if db.scan_table is not None)

    def observe(self, effects: list[tuple[int, list[bytes]]]) -> None:
        """A journal observer: refresh the estimate of every key a write touched."""
        self._writes += 1
        if not self._writes % STRUCTURE_REFRESH:
            self.refresh_structures()
        dbs = self.server.dbs
        update = self.accounting.update
        kinds = self._kinds
        for db_index, argv in effects:
            if db_index >= len(dbs):
                continue  # a tenant's database (server-wide id): its quota is counted by pion.server.security.tenants
            kind = kinds.get(argv[0])
            if kind is None:
                kind = kinds[argv[0]] = self._kind(argv[0])
            code, spec = kind
            if code == 0:
                update(dbs[db_index], argv[1])
            elif code == 1:
                self._update_general(dbs, db_index, spec, argv)
            elif code == 2:
                self.rescan()

    def _kind(self, name: Any) -> tuple[int, Any]:
        """0: one key at argv[1]; 1: look the keys up; 2: rescan (FLUSH*/SWAPDB); 3: no keys."""
        table = self.server.table
        raw = bytes(name)
        spec = table.by_name.get(raw) or table.by_name.get(raw.lower())
        if raw.lower() in _RESCAN:
            return 2, spec
        if spec is None:
            return 3, None
        if not spec.subcommands and spec.key_finder is None and spec.first_key == spec.last_key == 1 \
                and spec.name not in ("move", "copy"):
            return 0, spec
        return 1, spec

    def _update_general(self, dbs: list[Any], db_index: int, spec: Any, argv: list[bytes]) -> None:
        update = self.accounting.update
        if spec.subcommands:
            if len(argv) < 2:
                return
            spec = spec.subcommands.get(bytes(argv[1]).lower(), spec)
        db = dbs[db_index]
        for position in spec.key_positions(argv):
            update(db, argv[position])
        if spec.name in ("move", "copy") and len(argv) > 2:  # the key may land in another database
            moved = argv[1] if spec.name == "move" else argv[2]
            for other in dbs:
                if other is not db:
                    update(other, moved)

    # -- replies -------------------------------------------------------------------------------

    def held_output(self) -> int:
        """Bytes of replies the transports still hold for clients past their high-water mark."""
        held = self.server.held_output
        return sum(held.values()) if held else 0

    def admit(self, client: Any, nbytes: int, what: str = "reply") -> ReplyError | None:
        """-OOM for ``nbytes`` the server is about to hold for a client (a K/V fetch reply
        rendered before it is sent, a STATE buffer, an export file) that, with the data and the
        replies other clients have not read yet, would pass ``maxmemory``, or the client's tenant
        quota: such bytes are memory as surely as a key is."""
        limit = self.server.settings.maxmemory
        if limit:
            used = self.used_memory()
            held = self.held_output()
            if used + held + nbytes > limit:
                return ReplyError(f"OOM command not allowed when used memory > 'maxmemory' (a {nbytes}-byte "
                                  f"{what}; {used} bytes of data and {held} of unsent replies are held)")
        tenants = self.server.parts.tenants
        if tenants is not None and client is not None and client.tenant is not None:
            return tenants.charge(client, nbytes, f"the {what}")
        return None

    # -- the guard ------------------------------------------------------------------------------

    def over_limit(self) -> bool:
        limit = self.server.settings.maxmemory
        return bool(limit) and self.accounting.used + self.structures > limit

    def check(self, flags: Any) -> ReplyError | None:
        """Evict if over the limit; -OOM for a command that may grow memory (``denyoom`` among
        its ``flags``; a command spec's flags, or what an EXEC queued) if still over."""
        limit = self.server.settings.maxmemory
        if not limit or self.accounting.used + self.structures <= limit:  # not over_limit(), inline: asked for every command
            return None
        evicted = self.evict()
        # still over after evicting some within the time budget: the command runs and the next
        # ones go on evicting (Redis's EVICT_RUNNING); -OOM only when nothing could be evicted
        if self.over_limit() and not evicted and "denyoom" in getattr(flags, "flags", flags):
            return ReplyError(errors.OOM)
        return None

    def evict(self) -> int:
        """Evict by policy until under the limit or the time budget is spent; returns the count."""
        server = self.server
        settings = server.settings
        policy = settings.maxmemory_policy
        if policy == "noeviction" or server.slices.active:  # a query in slices holds eviction (server/slices.py)
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
