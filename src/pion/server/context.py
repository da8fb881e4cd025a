"""The context a handler receives: the client, the server, the current database, and the
propagation API through which a write tells the log what its deterministic effect was."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.storage.keyspace import Database


class Ctx:
    """One per client, reused for every command it runs.

    By default a write command that changed the keyspace (``server.dirty`` moved) is logged as
    its own argv. A handler whose argv is not deterministic calls ``rewrite`` (SPOP -> SREM,
    EXPIRE -> PEXPIREAT) or ``propagate`` to log extra commands; ``no_propagate`` logs nothing.
    """

    __slots__ = ("client", "server", "effects", "rewritten")

    def __init__(self, client: Client, server: Server) -> None:
        self.client = client
        self.server = server
        self.effects: list[list[bytes]] | None = None
        self.rewritten = False

    @property
    def db(self) -> Database:
        client = self.client
        return client.dbs[client.db_index]

    def rewrite(self, *argvs: list[bytes]) -> None:
        """Log these commands instead of the argv the client sent."""
        self.effects = list(argvs)
        self.rewritten = True

    def propagate(self, argv: list[bytes]) -> None:
        """Log one more command in addition to (or, after ``rewrite``, among) the effects."""
        if self.effects is None:
            self.effects = []
            self.rewritten = True
        self.effects.append(argv)

    def no_propagate(self) -> None:
        self.effects = []
        self.rewritten = True

    @property
    def replaying(self) -> bool:
        """The command is the log's, replayed at start or by DEBUG RELOAD: already durable."""
        return bool(self.server.loading) or self.client is self.server.replay_client

    def write_seq(self) -> int:
        """The journal sequence this command's record will get (0 while replaying: already durable)."""
        return 0 if self.replaying else self.server.journal.seq + 1

    def hold_until_durable(self, seq: int) -> None:
        """Keep this client's reply back until the journal has made ``seq`` durable."""
        conn = self.client.conn
        if conn is not None and seq > self.server.journal.durable_seq:
            conn.pending_seq = max(conn.pending_seq, seq)

    def dirty(self, count: int = 1) -> None:
        """Count a change to the keyspace (drives logging, save rules and INFO)."""
        self.server.dirty += count

    def notify(self, event_type: str, event: str, key: bytes) -> None:
        """Keyspace notification (``notify-keyspace-events``); a no-op unless enabled."""
        if self.server.notify_flags:
            self.server.pubsub.notify_keyspace_event(event_type, event, key, self.db.id)  # id: a tenant's hub

    @property
    def can_block(self) -> bool:
        """Blocking commands answer at once inside MULTI and scripts, as in Redis."""
        client = self.client
        return client.conn is not None and not client.in_script and client.multi is None and not client.executing
