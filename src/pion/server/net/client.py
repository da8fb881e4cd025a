"""Per-connection state that commands read and change (the connection object owns the socket)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pion.server.app import Server


class Client:
    """One client's session. Replies are sent through ``conn`` (None while replaying the log)."""

    __slots__ = (
        "id", "server", "conn", "addr", "laddr", "name", "lib_name", "lib_ver", "db_index",
        "proto", "user", "authenticated", "tenant", "created", "last_interaction", "last_cmd",
        "multi", "multi_error", "dirty_cas", "watched", "watched_expired", "subscriptions",
        "patterns", "shard_subscriptions", "reply_mode", "blocked", "flags", "no_evict", "dbs",
        "no_touch", "closing", "commands_processed", "executing", "in_script", "fd", "ctx", "tracking",
        "acl_verdict", "slot",
    )

    def __init__(self, client_id: int, server: Server, conn: Any = None, addr: str = "", laddr: str = "") -> None:
        self.id = client_id
        self.server = server
        self.conn = conn
        self.addr = addr
        self.laddr = laddr
        self.name = b""
        self.lib_name = b""
        self.lib_ver = b""
        self.db_index = 0
        #: the databases this client sees: the server's, or its tenant's own
        self.dbs = server.dbs
        self.proto = 2
        self.user = "default"
        self.authenticated = not server.requires_auth
        self.tenant: str | None = None
        self.created = time.time()
        self.last_interaction = self.created
        self.last_cmd = "NULL"
        self.multi: list[tuple[Any, list[bytes]]] | None = None
        self.multi_error = False
        self.dirty_cas = False
        self.watched: list[tuple[Any, bytes]] = []  # (Database, key)
        self.watched_expired: set[tuple[int, bytes]] = set()  # (Database.id, key)
        self.subscriptions: set[bytes] = set()
        self.patterns: set[bytes] = set()
        self.shard_subscriptions: set[bytes] = set()
        self.reply_mode = "on"  # on | off | skip
        self.blocked: Any = None  # a BlockRequest while blocked
        self.flags: set[str] = set()
        self.no_evict = False
        self.no_touch = False
        self.closing = False
        self.commands_processed = 0
        self.executing = False
        self.in_script = False
        #: (the user object, whether its ACL can refuse nothing): Security.admits_all's cache, valid
        #: while that object is the user's (ACL SETUSER and ACL LOAD put a new object in its place)
        self.acl_verdict: tuple[Any, bool] | None = None
        self.fd = -1
        self.ctx: Any = None
        #: CLIENT TRACKING settings while tracking is on (``pion.server.tracking``), else None
        self.tracking: Any = None
        #: the hash slot of the running command's keys on a cluster node, -1 for none (Redis's
        #: ``c->slot``): set by the router, read by CLUSTER SLOT-STATS's counters
        self.slot = -1

    @property
    def db(self):
        return self.dbs[self.db_index]

    @property
    def subscription_count(self) -> int:
        return len(self.subscriptions) + len(self.patterns) + len(self.shard_subscriptions)

    def touch_watched(self, db: Any, key: bytes) -> None:
        """A watched key changed. A key that was already expired at WATCH time and is now
        deleted counts as unchanged (Redis 7's rule for stale keys)."""
        slot = (db.id, key)
        if slot in self.watched_expired:
            if key not in db.data:
                self.watched_expired.discard(slot)
                return
        self.dirty_cas = True

    def swapped_watched(self, db: Any, key: bytes, existed: bool, present: bool, stale: bool) -> None:
        """SWAPDB replaced the contents under a watched key. No logical change (Redis's
        touchAllWatchedKeysInDb): a stale key replaced by nothing or by another stale key, or a
        missing key replaced by a stale one (which then counts as stale when watched)."""
        slot = (db.id, key)
        if slot in self.watched_expired:
            if not present:
                self.watched_expired.discard(slot)
                return
            if stale:
                return
        elif not existed and stale:
            self.watched_expired.add(slot)
            return
        self.dirty_cas = True

    def send(self, reply: Any) -> None:
        """Deliver an out-of-order reply (blocked-client wake-up, pub/sub push)."""
        if self.conn is not None:
            self.conn.send_reply(reply)
