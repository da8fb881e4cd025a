"""The context a handler receives: the client, the server, the current database, and the
propagation API through which a write tells the log what its deterministic effect was."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.kvcache import KVEngine
from pion.kvcache.rows import ARENA_MIN

if TYPE_CHECKING:
    from pion.kvcache import KVSpace
    from pion.kvcache.stats import Ledger
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.storage.arena import ArenaStore
    from pion.storage.keyspace import Database


def kv_engine(server: Server) -> KVEngine:
    """The server's K/V engine (made on first use by a bare server in a unit test)."""
    found = server.parts.kvcache
    if found is None:
        found = server.parts.kvcache = KVEngine()
    return found


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

    # -- the K/V cache's view of this client (the V.*, KV.*, SSM.* and ATTEND families) ----------

    @property
    def kv_engine(self) -> KVEngine:
        """The server's K/V engine."""
        return kv_engine(self.server)

    @property
    def tenant_key(self) -> bytes:
        """The client's tenant as the K/V engine names its space and ledger (b"": the default)."""
        tenant = self.client.tenant
        return tenant.encode() if tenant else b""

    def kv_space(self) -> KVSpace:
        """The client's K/V space: its tenant's own, else the server's default one."""
        return self.kv_engine.space(self.tenant_key)

    def kv_ledger(self) -> Ledger:
        """The client's PION.STATS ledger: its tenant's own, else the server's."""
        return self.kv_engine.ledger_of(self.tenant_key)

    @property
    def kv_budget(self) -> int:
        """``--kv-maxmemory`` for a write's eviction, 0 (none) on replay: the log holds its drops."""
        return 0 if self.replaying else self.server.settings.kv_maxmemory

    def blob_arenas(self, nbytes: int) -> ArenaStore | None:
        """The arena store a live blob of ``nbytes`` goes to, or None: replayed (already mapped),
        too small to be referenced (``kvcache.rows.ARENA_MIN``), or no log to reference it from."""
        if nbytes < ARENA_MIN or self.replaying or not self.server.settings.appendonly:
            return None
        return self.server.parts.arenas

    def charge(self, nbytes: int, what: str) -> None:
        """Refuse (-OOM) ``nbytes`` more the server would hold for this client (a reply, a state
        buffer, an export file) over ``maxmemory`` or the client's tenant quota."""
        if self.replaying:
            return
        memory = self.server.parts.memory
        refusal = memory.admit(self.client, nbytes, what) if memory is not None else None
        if refusal is not None:
            raise refusal

    def log_with(self, evicted: list[list[bytes]], own: list) -> None:
        """A K/V write's record: the eviction drops it caused, then its own deterministic form."""
        self.dirty()
        self.rewrite(*evicted, own)

    @property
    def can_block(self) -> bool:
        """Blocking commands answer at once inside MULTI and scripts, as in Redis."""
        client = self.client
        return client.conn is not None and not client.in_script and client.multi is None and not client.executing
