"""Client-side caching: CLIENT TRACKING's table of who read which key, and the invalidation
messages a write sends, as Redis 7's tracking.c.

Default mode remembers the keys of each read-only command a tracking client runs (OPTIN: only
after CLIENT CACHING YES; OPTOUT: unless CLIENT CACHING NO); the first change of such a key
sends every client that read it one invalidation and forgets them. BCAST mode remembers nothing:
each change of a key under one of the client's prefixes is collected and broadcast once per loop
turn. Every write path reaches ``invalidate`` because it hangs off ``Database.signal`` (commands,
scripts, transactions, expiry, eviction); FLUSHALL/FLUSHDB call ``flushed``, which sends a null
invalidation. RESP3 clients get ``>2 invalidate [keys]`` pushes; a RESP2 client redirects to a
connection subscribed in RESP2, which gets messages on ``__redis__:invalidate``. An invalidation
for the client that is running the command goes out after that command's reply (``pending``).
Tenants never see each other's keys: the table and the prefixes are kept per keyspace owner.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pion.protocol.resp import Push
from pion.server.pubsub import TENANT_SHIFT

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec
    from pion.storage.keyspace import Database

CHANNEL = b"__redis__:invalidate"
_SKIP_REMEMBER = frozenset({"eval_ro", "evalsha_ro", "fcall_ro"})


class TrackingState:
    """One client's CLIENT TRACKING settings (``client.tracking`` while it is on)."""

    __slots__ = ("redirect", "bcast", "optin", "optout", "noloop", "prefixes", "caching", "broken")

    def __init__(self) -> None:
        self.redirect = 0
        self.bcast = self.optin = self.optout = self.noloop = False
        self.prefixes: list[bytes] = []
        #: CLIENT CACHING YES/NO was given for the next command (or transaction)
        self.caching = False
        self.broken = False

    def flags(self) -> list[bytes]:
        """CLIENT TRACKINGINFO's flags after ``on``."""
        named = [(b"bcast", self.bcast), (b"optin", self.optin), (b"caching-yes", self.optin and self.caching),
                 (b"optout", self.optout), (b"caching-no", self.optout and self.caching),
                 (b"noloop", self.noloop), (b"broken_redirect", self.broken)]
        return [name for name, on in named if on]


def owner_of(db_id: int) -> int:
    """The keyspace owner of a database: 0 for the main one, a tenant's number otherwise."""
    return db_id >> TENANT_SHIFT


def overlaps(a: bytes, b: bytes) -> bool:
    """Redis's stringCheckPrefix: one is a prefix of the other."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


class Tracking:
    """``server.tracking``: the tracking table, the BCAST prefixes and pending invalidations."""

    def __init__(self, server: Server) -> None:
        self.server = server
        #: (owner, key) -> ids of the clients that read it
        self.table: dict[tuple[int, bytes], set[int]] = {}
        self.items = 0
        self.clients = 0
        #: owner -> prefix -> [client ids, {key: id of the client that changed it last}]
        self.prefixes: dict[int, dict[bytes, list[Any]]] = {}
        #: the client whose command is running (NOLOOP, and invalidations held until its reply)
        self.current: Client | None = None
        self.pending: list[tuple[Client, bytes | None]] = []
        self._broadcast_scheduled = False
        self._limit_source: Any = None
        self._max_keys = 1000000

    @property
    def active(self) -> bool:
        """Whether a keyspace change can concern anyone (cheap test on every write)."""
        return bool(self.table or self.prefixes)

    # -- CLIENT TRACKING ON/OFF --------------------------------------------------------------------

    def enable(self, client: Client, redirect: int, bcast: bool, optin: bool, optout: bool, noloop: bool,
               prefixes: list[bytes]) -> None:
        """enableTracking: flags replaced, prefixes added to the ones already there."""
        state = client.tracking
        if state is None:
            state = client.tracking = TrackingState()
            self.clients += 1
        state.broken = state.bcast = state.optin = state.optout = state.noloop = False
        state.redirect = redirect
        if bcast:
            state.bcast = True
            owner = owner_of(client.dbs[0].id)
            table = self.prefixes.setdefault(owner, {})
            for prefix in prefixes or [b""]:
                if prefix not in state.prefixes:
                    state.prefixes.append(prefix)
                table.setdefault(prefix, [set(), {}])[0].add(client.id)
        state.optin, state.optout, state.noloop = optin, optout, noloop

    def disable(self, client: Client) -> None:
        state = client.tracking
        if state is None:
            return
        owner = owner_of(client.dbs[0].id)
        table = self.prefixes.get(owner, {})
        for prefix in state.prefixes:
            entry = table.get(prefix)
            if entry is not None:
                entry[0].discard(client.id)
                if not entry[0]:
                    del table[prefix]
        if not table:
            self.prefixes.pop(owner, None)
        client.tracking = None
        self.clients -= 1

    # -- reads -------------------------------------------------------------------------------

    def after_command(self, client: Client, spec: CommandSpec, argv: list[bytes], caller: Client | None = None) -> None:
        """A command ran for a tracking client: remember its keys if it only read."""
        if client.tracking is None or "readonly" not in spec.flags or spec.name in _SKIP_REMEMBER:
            return
        self.remember(client, [argv[pos] for pos in spec.key_positions(argv) if pos < len(argv)])

    def remember(self, client: Client, keys: list[bytes]) -> None:
        """``client`` read ``keys``: tell it when they change (default mode, OPTIN/OPTOUT as set).
        A script that calls a read command also gets its declared keys remembered, as Redis 7.0
        does (Runner.call); the keys its commands read are remembered too, as Redis 7.2 does."""
        state = client.tracking
        if state is None or state.bcast:
            return
        if (state.optin and not state.caching) or (state.optout and state.caching):
            return
        owner = owner_of(client.dbs[client.db_index].id)
        table = self.table
        for key in keys:
            readers = table.setdefault((owner, bytes(key)), set())
            if client.id not in readers:
                readers.add(client.id)
                self.items += 1
        self._limit()

    def command_done(self, client: Client, spec: CommandSpec) -> None:
        """CLIENT CACHING lasts for the next command, or the next transaction (resetClient)."""
        state = client.tracking
        if state is not None and state.caching and client.multi is None and (spec.container or spec.name) != "client":
            state.caching = False

    def cron(self, server: Server) -> None:
        """tracking-table-max-keys lowered by CONFIG SET is enforced here too, as Redis's
        serverCron does, not only at the next read."""
        if self.table:
            self._limit()

    def _limit(self) -> None:
        """tracking-table-max-keys: past it, forget keys (telling their readers) until under."""
        settings = self.server.settings
        if self._limit_source is not settings:
            self._limit_source, self._max_keys = settings, settings.tracking_table_max_keys
        limit = self._max_keys
        while limit and len(self.table) > limit:
            slot = next(iter(self.table))
            self._invalidate_slot(slot, for_eviction=True)

    # -- writes ------------------------------------------------------------------------------

    def invalidate(self, db: Database, key: bytes) -> None:
        """A key changed (Database.signal): tell its readers and the BCAST prefixes over it."""
        owner = owner_of(db.id)
        prefixes = self.prefixes.get(owner)
        if prefixes:
            writer = self.current.id if self.current is not None else 0
            for prefix, entry in prefixes.items():
                if key.startswith(prefix):
                    entry[1][key] = writer
                    if not self._broadcast_scheduled:
                        self._schedule_broadcast()
        if (owner, key) in self.table:
            self._invalidate_slot((owner, key))

    def _invalidate_slot(self, slot: tuple[int, bytes], for_eviction: bool = False) -> None:
        readers = self.table.pop(slot)
        self.items -= len(readers)
        clients = self.server.clients
        for client_id in readers:
            target = clients.get(client_id)
            if target is None or target.tracking is None or target.tracking.bcast:
                continue
            if not for_eviction and target is self.current:
                if target.tracking.noloop:
                    continue
                self.pending.append((target, slot[1]))
            else:
                self.send(target, [slot[1]])

    def flushed(self, client: Client) -> None:
        """FLUSHALL/FLUSHDB: every tracking client of that keyspace gets a null invalidation."""
        owner = owner_of(client.dbs[0].id)
        self.table = {slot: ids for slot, ids in self.table.items() if slot[0] != owner}
        self.items = sum(len(ids) for ids in self.table.values())
        for target in list(self.server.clients.values()):
            if target.tracking is None or owner_of(target.dbs[0].id) != owner:
                continue
            if target is self.current:
                self.pending.append((target, None))
            else:
                self.send(target, None)

    def send_pending(self) -> None:
        """After the running command's reply: the invalidations it caused for its own client."""
        pending, self.pending = self.pending, []
        for target, key in pending:
            if target.conn is not None and target.tracking is not None:
                self.send(target, None if key is None else [key])

    # -- delivery ------------------------------------------------------------------------------

    def send(self, target: Client, keys: list[bytes] | None) -> None:
        """sendTrackingMessage: to the client itself in RESP3, or to its redirect target."""
        state = target.tracking
        if state is None:
            return
        if state.redirect:
            redirected = self.server.clients.get(state.redirect)
            if redirected is None:
                state.broken = True
                if target.proto == 3:
                    target.send(Push([b"tracking-redir-broken", state.redirect]))
                return
            if redirected.proto == 3:
                redirected.send(Push([b"invalidate", keys]))
            elif redirected.subscription_count:
                redirected.send(Push([b"message", CHANNEL, keys]))
            return
        if target.proto == 3:
            target.send(Push([b"invalidate", keys]))

    def _schedule_broadcast(self) -> None:
        self._broadcast_scheduled = True
        try:
            asyncio.get_running_loop().call_soon(self.broadcast)
        except RuntimeError:
            self._broadcast_scheduled = False

    def broadcast(self) -> None:
        """trackingBroadcastInvalidationMessages: one message per prefix and client, once a turn."""
        self._broadcast_scheduled = False
        clients = self.server.clients
        for prefixes in self.prefixes.values():
            for ids, keys in prefixes.values():
                if not keys:
                    continue
                changed, keys_now = dict(keys), list(keys)
                keys.clear()
                for client_id in ids:
                    target = clients.get(client_id)
                    if target is None or target.tracking is None:
                        continue
                    wanted = keys_now
                    if target.tracking.noloop:
                        wanted = [k for k in keys_now if changed[k] != client_id]
                    if wanted:
                        self.send(target, wanted)

    def drop_client(self, client: Client) -> None:
        """A connection closed: it tracks nothing any more (its table entries are skipped)."""
        self.disable(client)
        self.pending = [item for item in self.pending if item[0] is not client]

    def info(self) -> dict[str, int]:
        return {"tracking_clients": self.clients, "tracking_total_keys": len(self.table),
                "tracking_total_items": self.items,
                "tracking_total_prefixes": sum(len(p) for p in self.prefixes.values())}
