"""The pub/sub hub: channel, pattern and shard-channel subscriptions, and delivery.

Messages are pushed to each subscriber's connection (a RESP3 push, or an array in RESP2).
Keyspace notifications are published through the same hub.

Tenants (``pion.server.security.tenants``) each get a hub of their own, so their channels, patterns and
keyspace events never meet another tenant's or the default user's. A tenant's hub is found from
its databases' server-wide ids (``Database.id >> TENANT_SHIFT`` is non-zero for a tenant), so
callers that only know a database id (expiry, keyspace events) reach the right hub.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.protocol.resp import Push
from pion.storage.glob import glob_match

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client


#: a tenant database's id is ``(owner << TENANT_SHIFT) | index``; the default databases' owner is 0
TENANT_SHIFT = 16


class PubSubHub:
    def __init__(self, server: Server, tenant: bool = False) -> None:
        self.server = server
        #: a tenant's hub routes nothing further (only the root hub has ``tenant_hubs``)
        self.tenant = tenant
        self.channels: dict[bytes, dict[int, Client]] = {}
        self.patterns: dict[bytes, dict[int, Client]] = {}
        self.shard_channels: dict[bytes, dict[int, Client]] = {}
        #: tenant owner number -> that tenant's hub (only on the server's root hub)
        self.tenant_hubs: dict[int, PubSubHub] = {}

    # -- tenants -----------------------------------------------------------------------------

    def for_db(self, db_id: int) -> PubSubHub:
        """The hub of the database with this server-wide id: a tenant's own, or this one."""
        owner = db_id >> TENANT_SHIFT
        if not owner or self.tenant:
            return self
        hub = self.tenant_hubs.get(owner)
        if hub is None:
            hub = self.tenant_hubs[owner] = PubSubHub(self.server, tenant=True)
        return hub

    def for_client(self, client: Client) -> PubSubHub:
        """The hub a client's PUBLISH/SUBSCRIBE/PUBSUB use (its tenant's)."""
        return self.for_db(client.dbs[0].id)

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(self, client: Client, channel: bytes, shard: bool = False) -> bool:
        table = self.shard_channels if shard else self.channels
        mine = client.shard_subscriptions if shard else client.subscriptions
        if channel in mine:
            return False
        mine.add(channel)
        table.setdefault(channel, {})[client.id] = client
        return True

    def unsubscribe(self, client: Client, channel: bytes, shard: bool = False) -> bool:
        table = self.shard_channels if shard else self.channels
        mine = client.shard_subscriptions if shard else client.subscriptions
        if channel not in mine:
            return False
        mine.discard(channel)
        _drop(table, channel, client.id)
        return True

    def psubscribe(self, client: Client, pattern: bytes) -> bool:
        if pattern in client.patterns:
            return False
        client.patterns.add(pattern)
        self.patterns.setdefault(pattern, {})[client.id] = client
        return True

    def punsubscribe(self, client: Client, pattern: bytes) -> bool:
        if pattern not in client.patterns:
            return False
        client.patterns.discard(pattern)
        _drop(self.patterns, pattern, client.id)
        return True

    def drop_client(self, client: Client) -> None:
        hub = self.for_client(client)
        if hub is not self:
            hub.drop_client(client)
            return
        for channel in list(client.subscriptions):
            self.unsubscribe(client, channel)
        for channel in list(client.shard_subscriptions):
            self.unsubscribe(client, channel, shard=True)
        for pattern in list(client.patterns):
            self.punsubscribe(client, pattern)

    # -- delivery ----------------------------------------------------------------------------

    def publish(self, channel: bytes, message: bytes, shard: bool = False) -> int:
        """Deliver to channel subscribers then pattern subscribers; returns the receiver count."""
        receivers = 0
        table = self.shard_channels if shard else self.channels
        kind = b"smessage" if shard else b"message"
        for client in list(table.get(channel, {}).values()):
            client.send(Push([kind, channel, message]))
            receivers += 1
        if shard:
            counters = self.server.dispatcher.slot_stats
            if counters is not None and receivers:  # CLUSTER SLOT-STATS: each subscriber's message
                counters.add_shard_messages(table.get(channel, {}).values(), Push([kind, channel, message]), channel)
            return receivers
        for pattern, clients in list(self.patterns.items()):
            if glob_match(pattern, channel):
                for client in list(clients.values()):
                    client.send(Push([b"pmessage", pattern, channel, message]))
                    receivers += 1
        return receivers

    def notify_keyspace_event(self, event_type: str, event: str, key: bytes, db_index: int) -> None:
        """Publish ``__keyspace@db__:key`` / ``__keyevent@db__:event`` as notify-keyspace-events asks.

        ``db_index`` may be a ``Database.id``: a tenant's database publishes in its tenant's hub."""
        if db_index >> TENANT_SHIFT and not self.tenant:
            self.for_db(db_index).notify_keyspace_event(event_type, event, key, db_index & ((1 << TENANT_SHIFT) - 1))
            return
        flags = self.server.notify_flags
        if event_type not in flags and not ("A" in flags and event_type in "g$lshzxetd"):
            return
        if "K" in flags:
            self.publish(b"__keyspace@%d__:%s" % (db_index, key), event.encode())
        if "E" in flags:
            self.publish(b"__keyevent@%d__:%s" % (db_index, event.encode()), key)


def _drop(table: dict[bytes, dict[int, Client]], name: bytes, client_id: int) -> None:
    clients = table.get(name)
    if clients is not None:
        clients.pop(client_id, None)
        if not clients:
            del table[name]
