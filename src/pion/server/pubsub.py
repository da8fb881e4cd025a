"""The pub/sub hub: channel, pattern and shard-channel subscriptions, and delivery.

Messages are pushed to each subscriber's connection (a RESP3 push, or an array in RESP2).
Keyspace notifications are published through the same hub.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.protocol.resp import Push
from pion.storage.glob import glob_match

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.client import Client


class PubSubHub:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.channels: dict[bytes, dict[int, Client]] = {}
        self.patterns: dict[bytes, dict[int, Client]] = {}
        self.shard_channels: dict[bytes, dict[int, Client]] = {}

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
            return receivers
        for pattern, clients in list(self.patterns.items()):
            if glob_match(pattern, channel):
                for client in list(clients.values()):
                    client.send(Push([b"pmessage", pattern, channel, message]))
                    receivers += 1
        return receivers

    def notify_keyspace_event(self, event_type: str, event: str, key: bytes, db_index: int) -> None:
        """Publish ``__keyspace@db__:key`` / ``__keyevent@db__:event`` as notify-keyspace-events asks."""
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
