"""Authentication: the users (the default user of ``requirepass`` and the ``--tenant`` users),
AUTH/HELLO credential checks, the cost of a failed guess and the ACL log. What the server shows
of credentials is ``pion.server.redaction``; the checks that refuse an unsafe start and the
wiring of users, tenants and TLS are ``pion.server.security.security``.

A failed AUTH holds the connection's replies for a delay that doubles with each recent failure
from the same connection or address (25 ms up to 2 s), queued behind the address's other pending
guesses (and a successful AUTH from that address waits its turn too; past QUEUE_MAX seconds of
queued answers the address's AUTHs are refused without being checked): the event loop keeps
serving everyone else, while a guesser learns one answer per delay per source address, however
many connections it opens, pipelined or inside MULTI. Passwords are kept only as
SHA-256 digests (what ACL GETUSER shows) and compared in constant time; they are never logged.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.security.acl_users import User, UserTable

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client

log = logging.getLogger("pion.auth")

#: the first failure's delay; each further recent failure doubles it, up to FAIL_DELAY_MAX
FAIL_DELAY = 0.025
FAIL_DELAY_MAX = 2.0
#: failures from an address are forgotten after this long without another one
FAIL_WINDOW = 60.0
#: seconds of answers one address may have queued; past it its AUTHs are refused unevaluated
QUEUE_MAX = 10.0
QUEUE_FULL = "ERR too many failed AUTH attempts from this address; try again in {:.0f} s"
MAX_TRACKED_HOSTS = 10000
NO_PASSWORD_ERR = ("ERR AUTH <password> called without any password configured for the default user. "
                   "Are you sure your configuration is correct?")


def digest(password: bytes) -> bytes:
    return hashlib.sha256(password).digest()


class Users:
    """``server.parts.acl``: the ACL users (``pion.server.security.acl_users``), the failure counters
    and the ACL log. The default user takes ``requirepass`` as its password; each ``--tenant`` is a
    user bound to its own keyspace (``User.tenant``)."""

    def __init__(self, server: Server) -> None:
        from pion.server.security.acl_check import catalog_of

        self.server = server
        self.table = UserTable(catalog_of(server.table))
        #: host -> [recent failures, time of the last one]
        self.failures: OrderedDict[str, list[float]] = OrderedDict()
        self.log = AclLog(server)
        self.set_default_password(server.settings.requirepass)

    @property
    def users(self) -> dict[str, User]:
        """Every user by name (CLIENT KILL USER, ACL USERS)."""
        return self.table.users

    @property
    def tenants(self) -> dict[str, User]:
        return {name: user for name, user in self.table.users.items() if user.tenant is not None}

    @property
    def default(self) -> User:
        return self.table.default

    def get(self, name: str) -> User | None:
        return self.table.users.get(name)

    def add_tenant(self, name: str, password_digest: bytes, quota: int, rules: list[bytes]) -> User:
        """A ``--tenant`` user: on, its password, all keys and channels of its own keyspace, and
        the commands a tenant may run (``rules``, from ``tenants.tenant_rules``)."""
        user = self.table.set_user(name, [b"on", b"#" + password_digest.hex().encode(), b"~*", b"&*", *rules])
        user.tenant, user.quota = name, quota
        return user

    def set_default_password(self, password: str) -> None:
        """requirepass: Redis's ACLUpdateDefaultUserPassword (``resetpass`` then ``>pw`` or ``nopass``)."""
        default = self.table.default
        default.apply(b"resetpass", self.table.catalog)
        default.apply(b">" + password.encode() if password else b"nopass", self.table.catalog)

    @property
    def open_to_all(self) -> bool:
        """New connections start authenticated as default: it is on and needs no password."""
        default = self.table.default
        return default.enabled and default.nopass

    def note_failure(self, client: Client) -> tuple[int, float]:
        """Count a failed AUTH: ``(recent failures of this connection or address, seconds its
        reply waits)``. The wait queues behind the address's other pending guesses, so many
        connections from one source learn one answer per delay, not one each."""
        conn = client.conn
        mine = getattr(conn, "auth_failures", 0) + 1
        if conn is not None:
            conn.auth_failures = mine
        return self.note_host_failure(_host_of(client), mine)

    def note_host_failure(self, host: str, mine: int = 0) -> tuple[int, float]:
        """``note_failure`` by address alone (the dashboard's logins: one HTTP request a guess);
        ``mine``: the failures the caller counted on its own connection."""
        now = time.monotonic()
        entry = self.failures.pop(host, None)
        if entry is None or now - entry[1] > FAIL_WINDOW:
            entry = [0.0, now, now]  # failures, time of the last one, when its last held reply leaves
        entry[0] += 1
        entry[1] = now
        self.failures[host] = entry
        while len(self.failures) > MAX_TRACKED_HOSTS:
            self.failures.popitem(last=False)
        count = max(mine, int(entry[0]))
        delay = min(FAIL_DELAY * 2 ** min(count - 1, 16), FAIL_DELAY_MAX)
        entry[2] = max(now, entry[2]) + delay
        return count, entry[2] - now

    def queued(self, client: Client) -> float:
        """Seconds a successful AUTH waits: behind the pending failed guesses of its address (else
        the one right guess among many concurrent ones would be answered at once)."""
        return self.queued_host(_host_of(client))

    def queued_host(self, host: str) -> float:
        """``queued`` by address alone."""
        entry = self.failures.get(host)
        now = time.monotonic()
        if entry is None or now - entry[1] > FAIL_WINDOW:
            return 0.0
        return max(0.0, entry[2] - now)


def _host_of(client: Client) -> str:
    return client.addr.rsplit(":", 1)[0]


def users_of(server: Server) -> Users:
    found = server.parts.acl
    if found is None:
        found = server.parts.acl = Users(server)
    return found


def authenticate(server: Server, client: Client, user: bytes | None, password: bytes) -> None:
    """AUTH / HELLO AUTH: select ``user`` (None: the one-argument form) or raise Redis's error."""
    users = users_of(server)
    if user is None and users.default.nopass:
        raise ReplyError(NO_PASSWORD_ERR)
    name = "default" if user is None else user.decode("utf-8", "replace")
    found = users.get(name)
    wait = users.queued(client)
    if wait > QUEUE_MAX:  # not even checked: the address has guessed enough for now
        if client.conn is not None and hasattr(client.conn, "hold"):
            client.conn.hold(FAIL_DELAY_MAX)  # and not answered at once either (no busy loop)
        raise ReplyError(QUEUE_FULL.format(wait - QUEUE_MAX + 1))
    if found is not None and found.accepts(password):
        if wait and client.conn is not None and hasattr(client.conn, "hold"):
            client.conn.hold(wait)  # in line behind the guesses before it
        become(server, client, found)
        return
    _failed(server, users, client, name)
    raise ReplyError(errors.WRONGPASS)


def become(server: Server, client: Client, user: User) -> None:
    """Switch the connection to ``user``; changing tenant drops what belonged to the old view."""
    if client.tenant != user.tenant:
        server.pubsub.drop_client(client)
        server.drop_watches(client)
        server.monitors.pop(client.id, None)
        client.dbs = server.tenant_dbs[user.tenant] if user.tenant is not None else server.dbs
        client.db_index = min(client.db_index, len(client.dbs) - 1)
    client.user = user.name
    client.tenant = user.tenant
    client.authenticated = True


def _failed(server: Server, users: Users, client: Client, name: str) -> None:
    count, delay = users.note_failure(client)
    shown = printable(name)
    users.log.add(client, "auth", "AUTH", shown)
    if count <= 10 or count & (count - 1) == 0:  # every failure at first, then at powers of two
        log.warning("AUTH failed for user '%s' from %s (%d recent failures from this client or address; "
                    "its replies are delayed %.3f s)", shown, client.addr or "?", count, delay)
    if client.conn is not None and hasattr(client.conn, "hold"):
        client.conn.hold(delay)


def printable(text: str, limit: int = 64) -> str:
    """A user-supplied name safe for a log line: printable ASCII, bounded."""
    cleaned = "".join(ch if 32 < ord(ch) < 127 else "?" for ch in text[:limit])
    return cleaned + ("..." if len(text) > limit else "")


# -- the ACL log ----------------------------------------------------------------------------------


class AclLog:
    """ACL LOG: failed AUTHs and refused commands, newest first, similar entries grouped (60 s)."""

    GROUP_WINDOW_MS = 60000

    def __init__(self, server: Server) -> None:
        self.server = server
        self.entries: list[dict[str, Any]] = []
        self.next_id = 0

    def add(self, client: Client, reason: str, obj: str, username: str) -> None:
        from pion.server.net.client_info import client_line

        context = "lua" if client.in_script else ("multi" if client.executing or client.multi is not None
                                                  else "toplevel")
        info = client_line(client, obj.lower()) if client.conn is not None else ""
        self.record(reason, context, obj, username, info)

    def record(self, reason: str, context: str, obj: str, username: str, info: str) -> None:
        """An entry from where there is no client (the dashboard's logins), or from ``add``."""
        now = int(time.time() * 1000)
        for entry in self.entries:
            if (entry["reason"], entry["context"], entry["object"], entry["username"]) == (reason, context, obj, username) \
                    and now - entry["updated"] < self.GROUP_WINDOW_MS:
                entry["count"] += 1
                entry["updated"] = now
                entry["client-info"] = info
                return
        self.entries.insert(0, {"count": 1, "reason": reason, "context": context, "object": obj,
                                "username": username, "created": now, "updated": now, "client-info": info,
                                "entry-id": self.next_id})
        self.next_id += 1
        limit = self.server.settings.acllog_max_len
        del self.entries[max(limit, 0):]

    def reply(self, count: int | None) -> list[dict[bytes, Any]]:
        now = int(time.time() * 1000)
        chosen = self.entries if count is None else self.entries[:count]
        return [{
            b"count": e["count"], b"reason": e["reason"].encode(), b"context": e["context"].encode(),
            b"object": e["object"].encode(), b"username": e["username"].encode(),
            b"age-seconds": (now - e["created"]) / 1000.0, b"client-info": e["client-info"].encode(),
            b"entry-id": e["entry-id"], b"timestamp-created": e["created"], b"timestamp-last-updated": e["updated"],
        } for e in chosen]
