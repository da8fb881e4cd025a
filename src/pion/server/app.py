"""The server: owns the databases, clients, dispatcher, pub/sub hub, blocking manager and
journal, wires the keyspace hooks to them, and runs the listeners and the periodic cron.

All mutable state lives on the event loop thread: a single writer, as in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from pion import __version__
from pion.config import Settings
from pion.server import fastlane
from pion.server.admin.info import add_section_before, default_info_sections, note_startup_memory
from pion.server.admin.latency import LatencyMonitor, install_latency
from pion.server.admin.slowlog import SlowLog
from pion.server.admission import Admission
from pion.server.blocking import BlockingManager
from pion.server.commands import load_table
from pion.server.component import Component
from pion.server.context import Ctx
from pion.server.dispatch import Dispatcher
from pion.server.durability.journal import Journal
from pion.server.net.client import Client
from pion.server.net.connection import Connection
from pion.server.parts import Parts
from pion.server.pause import ClientPause
from pion.server.pubsub import PubSubHub
from pion.server.redaction import monitor_argv
from pion.server.slices import Slices
from pion.server.tracking import Tracking
from pion.storage.keyspace import Database
from pion.vector.vset import kernel as vset_kernel

log = logging.getLogger("pion.server")

class Server:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.version = __version__
        self.start_time = time.time()
        self.run_id = os.urandom(20).hex()
        self.dbs = [self._make_db(i) for i in range(settings.databases)]
        self.clients: dict[int, Client] = {}
        self._next_client_id = 0
        self.table = load_table()
        self.dispatcher = Dispatcher(self, self.table)
        #: the hottest commands of a plain client, checked once per batch (pion.server.fastlane)
        self.lane = fastlane.lane_class()(self)
        self.blocking = BlockingManager(self)
        self.pubsub = PubSubHub(self)
        self.slowlog: SlowLog | None = SlowLog(self)
        self.journal: Journal = Journal()
        self.monitors: dict[int, Client] = {}
        #: connections whose unsent replies passed the transport's high-water mark -> bytes; what
        #: big replies still hold counts against maxmemory and quotas (MemoryManager.admit_reply)
        self.held_output: dict[Any, int] = {}
        #: CLIENT TRACKING: who read which key, invalidations on every change (Database.signal)
        self.tracking = Tracking(self)
        #: MONITOR lines waiting for the replies of the commands they show: (writer, line)
        self._monitor_lines: list[tuple[Any, str]] = []
        #: whether a command may run now (auth, ACL, memory, durability, loading, busy): one place
        self.admission = Admission(self)
        self.loading = False
        #: log records replayed at the last load (KV.PREFIX.INFO wal_replayed)
        self.replayed_records = 0
        self.dirty = 0
        self.stat_numcommands = 0
        self.stat_numconnections = 0
        self.stat_rejected_conn = 0
        self.stat_rejected = 0
        self.stat_failed = 0
        self.stat_expired = 0
        self.stat_evicted = 0
        self.stat_keyspace_hits = 0
        self.stat_keyspace_misses = 0
        self.paused_until = 0.0
        #: SHUTDOWN's choice (SAVE, NOSAVE or neither), read by durability's final save
        self.shutdown_mode = "default"
        self.pause = ClientPause(self)
        #: budget-bound queries in slices and the commands parked behind them (server/slices.py)
        self.slices = Slices(self, self.table)
        #: INFO sections by name, in INFO's order; engines add sections or replace the defaults
        self.info_sections: dict[str, Callable[[Server], dict[str, object]]] = default_info_sections()
        #: error prefix (ERR, WRONGTYPE, ...) -> count, for INFO errorstats
        self.error_stats: dict[str, int] = {}
        self.latency: LatencyMonitor = install_latency(self)  # LATENCY events, INFO latencystats
        #: pure checks of a CONFIG SET, run before anything (a listener, a hook) is changed
        self.config_checks: list[Callable[[Server, Settings, Settings], str | None]] = []
        #: DEBUG subcommands an engine provides (RELOAD, ...): lower-case name -> handler(ctx, argv)
        self.debug_hooks: dict[str, Callable[..., Any]] = {}
        #: called with (db, key) on every key signal (live search indexing)
        self.key_hooks: list[Callable[[Database, bytes], Any]] = []
        #: called with (db, "flush" | "swap") when a database was emptied or swapped whole
        self.reset_hooks: list[Callable[[Database, str], Any]] = []
        #: the optional parts (durability, security, engines, scale-out), typed, set by their installers
        self.parts = Parts()
        #: the parts on the component protocol (pion.server.component), in start order: started
        #: in order, stopped in reverse, their cron, CONFIG SET, CONFIG RESETSTAT and INFO moments
        self.components: list[Component] = []
        #: tenant name -> its own databases (ids unique server-wide, see Database.id)
        self.tenant_dbs: dict[str, list[Database]] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._stopping: asyncio.Event | None = None
        self._cron_task: asyncio.Task[None] | None = None
        self.replay_client = self._make_replay_client()
        self._obuf: tuple[Settings, dict[str, tuple[int, int, int]]] | None = None

    # -- construction helpers ------------------------------------------------------------

    def _make_db(self, index: int, db_id: int | None = None) -> Database:
        """A database wired to the server (tenants' databases pass their server-wide ``db_id``)."""
        db = Database(index, db_id)
        db.on_signal = self._on_key_signal
        db.on_expired = self._on_key_expired
        db.on_new = self._on_key_new
        db.on_reset = self._on_db_reset
        db.apply_settings(self.settings)
        return db

    @property
    def settings(self) -> Settings:
        return self._settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        """CONFIG SET swaps in new settings; the keyspaces follow maxmemory-policy (LRU/LFU)."""
        self._settings = value
        #: ``notify-keyspace-events`` (an attribute: every write asks it, often twice)
        self.notify_flags: str = value.notify_keyspace_events
        for dbs in [getattr(self, "dbs", ()), *getattr(self, "tenant_dbs", {}).values()]:
            for db in dbs:
                db.apply_settings(value)
        dispatcher = getattr(self, "dispatcher", None)
        if dispatcher is not None:
            dispatcher.apply_settings(value)

    def add_component(self, component: Component) -> None:
        """A part on the component protocol: started in the order added, stopped in reverse, its
        INFO section placed (``pion.server.component``)."""
        self.components.append(component)
        sections = self.info_sections
        name = component.info_name
        if name is not None:
            answer = lambda srv, part=component: part.info_section()  # noqa: E731
            if name in sections or component.info_before is None:
                sections[name] = answer  # a default's place, or the end
            else:
                add_section_before(sections, component.info_before, name, answer)
        for extended in component.info_extends:
            base = sections.get(extended)
            if base is not None:
                sections[extended] = lambda srv, base=base, part=component, name=extended: {
                    **base(srv), **part.info_extra(name)}

    def _make_replay_client(self) -> Client:
        client = Client(0, self)
        client.authenticated = True
        client.ctx = Ctx(client, self)
        return client

    @property
    def requires_auth(self) -> bool:
        """New connections must AUTH: the default user is off or has a password (ACL)."""
        users = self.parts.acl
        return not users.open_to_all if users is not None else bool(self.settings.requirepass)

    # -- keyspace hooks ------------------------------------------------------------------

    def _on_key_signal(self, db: Database, key: bytes) -> None:
        tracking = self.tracking
        if tracking.table or tracking.prefixes:
            tracking.invalidate(db, key)
        if self.blocking.waiting:
            self.blocking.on_key_signal(db.id, key)
        for hook in self.key_hooks:
            hook(db, key)

    def _on_db_reset(self, db: Database, how: str) -> None:
        for hook in self.reset_hooks:
            hook(db, how)

    def _on_key_new(self, db: Database, key: bytes) -> None:
        """The 'n' keyspace event (not part of 'A'), fired when a command creates a key."""
        if "n" in self.notify_flags and not db.loading:
            self.pubsub.notify_keyspace_event("n", "new", key, db.id)

    def _on_key_expired(self, db: Database, key: bytes) -> None:
        """An expired key was removed: log a DEL so replay does not depend on the clock."""
        self.stat_expired += 1
        self.dirty += 1
        self.dispatcher.pending.append((db.id, [b"DEL", key]))
        if self.notify_flags:
            self.pubsub.notify_keyspace_event("x", "expired", key, db.id)  # the id finds a tenant's hub
        if self.dispatcher.depth == 0 and not self.loading:
            self.dispatcher.finish_command(None)

    # -- clients ---------------------------------------------------------------------------

    def replay_target(self, db_id: int) -> Client:
        """Point the replay client at the database a log record names (its ``Database.id``)."""
        client = self.replay_client
        for dbs in self.all_db_lists():
            for db in dbs:
                if db.id == db_id:
                    client.dbs, client.db_index = dbs, db.index
                    # a tenant's K/V commands replay into its own space
                    client.tenant = next((name for name, own in self.tenant_dbs.items() if own is dbs), None)
                    return client
        raise KeyError(f"the log names database id {db_id}, which this server does not have")

    def all_db_lists(self) -> list[list[Database]]:
        """The default databases and each tenant's (tenants add theirs to ``tenant_dbs``)."""
        return [self.dbs, *self.tenant_dbs.values()]

    def next_client_id(self) -> int:
        self._next_client_id += 1
        return self._next_client_id

    def accept_client(self, client: Client) -> bool:
        if len(self.clients) >= self.settings.maxclients:
            self.stat_rejected_conn += 1
            return False
        self.clients[client.id] = client
        self.stat_numconnections += 1
        return True

    def drop_client(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        self.monitors.pop(client.id, None)
        self.blocking.disconnect(client)
        self.pubsub.drop_client(client)
        self.drop_watches(client)
        if client.tracking is not None:
            self.tracking.drop_client(client)

    def drop_watches(self, client: Client) -> None:
        """UNWATCH: forget every key this client watches."""
        for db, key in client.watched:
            watchers = db.watchers.get(key)
            if watchers is not None:
                watchers.discard(client)
                if not watchers:
                    del db.watchers[key]
        client.watched = []
        client.watched_expired = set()
        client.dirty_cas = False

    def output_limits(self, client: Client | None) -> tuple[int, int, int]:
        """(hard bytes, soft bytes, soft seconds) of client-output-buffer-limit for this client's
        class (``normal 0 0 0``, ``pubsub 32mb 8mb 60`` by default, as Redis)."""
        cached = self._obuf
        if cached is None or cached[0] is not self.settings:  # by class, once per settings object
            limits = {name: (hard, soft, seconds)
                      for name, hard, soft, seconds in self.settings.client_output_buffer_limit}
            cached = self._obuf = (self.settings, limits)
        kind = "pubsub" if client is not None and client.subscription_count else "normal"
        return cached[1].get(kind, (0, 0, 0))

    def feed_monitors(self, client: Client, argv: list[bytes]) -> None:
        """Queue a MONITOR line; it leaves after the reply of the command it shows (Redis writes
        both in the same beforeSleep, the writer's first): ``_deliver_monitor_lines``."""
        argv = monitor_argv(argv)  # AUTH, HELLO AUTH, MIGRATE AUTH, CONFIG SET requirepass: redacted
        line = "%.6f [%d %s] %s" % (
            time.time(),
            client.db_index,
            client.addr or "lua",
            " ".join(_quote(a) for a in argv),
        )
        self._monitor_lines.append((client, line))
        if len(self._monitor_lines) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._deliver_monitor_lines)
            except RuntimeError:
                self._deliver_monitor_lines()

    def _deliver_monitor_lines(self) -> None:
        """After the running commands answered: send the queued lines, each held until the write
        it shows is durable (as the writer's own reply is)."""
        from pion.protocol.resp import Status

        lines, self._monitor_lines = self._monitor_lines, []
        for writer, line in lines:
            conn = getattr(writer, "conn", None)
            seq = conn.pending_seq if conn is not None else 0
            for monitor in list(self.monitors.values()):
                if monitor is writer or monitor.conn is None:
                    continue
                monitor.conn.pending_seq = max(monitor.conn.pending_seq, seq)
                monitor.send(Status(line))

    # -- running ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the parts in order (durability's recovery first), then open the listeners."""
        self._stopping = asyncio.Event()
        for component in self.components:
            await component.start()
        loop = asyncio.get_running_loop()
        settings = self.settings
        if settings.port:
            hosts = list(settings.bind) or ["127.0.0.1"]
            server = await loop.create_server(lambda: Connection(self), hosts, settings.port, reuse_address=True, backlog=511)
            self._servers.append(server)
        if settings.tls_port:
            from pion.server.net.tls import listen_tls

            self.parts.tls_listener = await listen_tls(self, list(settings.bind) or ["127.0.0.1"])
            self._servers.append(self.parts.tls_listener)
        if settings.unixsocket:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(settings.unixsocket)
            server = await loop.create_unix_server(lambda: Connection(self), settings.unixsocket, backlog=511)
            if settings.unixsocketperm:
                os.chmod(settings.unixsocket, settings.unixsocketperm)
            self._servers.append(server)
        self._cron_task = loop.create_task(self._cron())
        note_startup_memory(self)  # INFO used_memory_startup: what the data is not

    @property
    def bound_port(self) -> int:
        """The TCP port actually bound (useful with ``--port 0`` in tests)."""
        for server in self._servers:
            for sock in server.sockets:
                name = sock.getsockname()
                if isinstance(name, tuple):
                    return int(name[1])
        return 0

    async def serve_forever(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_shutdown)
        log.info("Pion %s ready to accept connections on port %d", self.version, self.bound_port)
        log.info("%s", fastlane.implementation())  # which request path runs (PION_PURE=1: pure Python)
        log.info("%s", vset_kernel.describe())  # which graph code the vector sets run (PION_PURE=1: pure Python)
        assert self._stopping is not None
        await self._stopping.wait()
        await self.stop()

    def request_shutdown(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    async def stop(self) -> None:
        log.info("shutting down")
        for server in self._servers:
            server.close()
        if self._cron_task is not None:
            self._cron_task.cancel()
        for client in list(self.clients.values()):
            if client.conn is not None and client.conn.transport is not None:
                client.conn.transport.close()
        for component in reversed(self.components):
            try:
                await component.stop()
            except Exception:  # one part failing to stop must not keep the log from its flush
                log.exception("stopping %s failed", component.name)
        self.journal.close()
        if self.settings.unixsocket:
            with contextlib.suppress(OSError):
                os.unlink(self.settings.unixsocket)
        self._servers.clear()

    async def _cron(self) -> None:
        """Active expiry, idle-client timeouts and the hooks, ``hz`` times a second."""
        while True:
            await asyncio.sleep(1.0 / max(self.settings.hz, 1))
            try:
                self.cron_once()
            except Exception:  # the cron must never die; log and go on
                log.exception("cron failed")

    def cron_once(self) -> None:
        if self.dispatcher.busy is not None:
            return  # a script runs past busy-reply-threshold: no expiry, no save rules meanwhile
        now = int(time.time() * 1000)
        for dbs in self.all_db_lists():
            for db in dbs:
                db.lru_clock = now  # the access stamp OBJECT IDLETIME reads
        # a query in slices holds active expiry (server/slices.py): its keys must not go meanwhile
        if not self.loading and self.active_expire_enabled and not self.paused_until and not self.slices.active:
            started = time.perf_counter()
            for dbs in self.all_db_lists():
                for db in dbs:
                    if db.expires:
                        db.sweep_expired()
            self.dispatcher.latency_sample("expire-cycle", time.perf_counter() - started)
        if self.settings.timeout:
            cutoff = time.time() - self.settings.timeout
            for client in list(self.clients.values()):
                if (
                    client.last_interaction < cutoff
                    and client.blocked is None
                    and not client.subscription_count
                    and client.conn is not None
                ):
                    client.conn.close_soon()
                    client.conn.flush()
        self.tracking.cron(self)
        for component in self.components:
            component.cron()

    active_expire_enabled = True


def _quote(arg: bytes) -> str:
    out = ['"']
    for byte in arg:
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append("\\x%02x" % byte)
    out.append('"')
    return "".join(out)
