"""Prometheus metrics: ``GET /metrics`` on ``--metrics-port`` (off by default, 127.0.0.1 by default).

The exposition is ``prometheus_client``'s own (``generate_latest`` over a registry holding one
collector). Nothing is counted twice: at each scrape the collector reads the counters the server
already keeps for INFO, PION.STATS and LATENCY HISTOGRAM (``Dispatcher.stats``, the command
histograms of ``pion.server.admin.latency``, the K/V engine's ledgers, the journal's fsync histogram),
plus what each component's ``metrics()`` yields (``pion.server.component``), so metrics cost the
command path nothing. The endpoint is served on the event loop, as every
reader of that state must be; a scrape of a few hundred series takes a fraction of a millisecond.

The endpoint shows command names, counts and sizes (no keys, no values) and listens on loopback
unless ``--metrics-bind`` says otherwise. Off loopback it is protected like the server's own
port: with no password on the server (``requirepass`` or an ACL user with one) the start is
refused unless ``--protected-mode no``; with one, every scrape must send HTTP Basic credentials of
an enabled user (Prometheus's ``basic_auth``), checked against the live user table in constant
time, else ``401``. docs/metrics.md lists the series, an example scrape and a Grafana dashboard.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pion.server.component import Component
from pion.server.durability.wal_journal import WalJournal
from pion.server.errors import StartupError
from pion.server.security.auth import users_of
from pion.server.security.security import is_loopback

if TYPE_CHECKING:
    from pion.server.admin.latency import Histogram
    from pion.server.app import Server

log = logging.getLogger("pion.metrics")

#: command latency buckets, seconds (Redis commands run in microseconds; K/V stores in milliseconds)
COMMAND_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                   0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
#: fsync latency buckets, seconds (tmpfs: microseconds; SSDs: 0.1-10 ms; disks: tens of ms)
FSYNC_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0)
#: the most a request head may be, and how long a scraper may take to send it
MAX_REQUEST = 8192
REQUEST_TIMEOUT = 5.0


def _require_client() -> Any:
    try:
        import prometheus_client
    except ImportError:  # a core dependency; an incomplete install still gets a clear message
        raise StartupError("--metrics-port needs prometheus_client: pip install prometheus_client") from None
    return prometheus_client


class ServerCollector:
    """A ``prometheus_client`` custom collector over the server's own counters."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def describe(self) -> list[Any]:
        return []  # no fixed list: the series depend on what ran (registering must not collect)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        server = self.server
        yield InfoMetricFamily("pion_build", "Pion's version", value={"version": server.version})
        yield GaugeMetricFamily("pion_uptime_seconds", "seconds since the server started",
                                value=time.time() - server.start_time)
        yield from self._commands(CounterMetricFamily)
        yield from self._clients(CounterMetricFamily, GaugeMetricFamily)
        yield from self._keyspace(CounterMetricFamily, GaugeMetricFamily)
        yield from self._kvcache(CounterMetricFamily, GaugeMetricFamily)
        yield from self._wal(CounterMetricFamily, GaugeMetricFamily)
        for component in server.components:
            yield from component.metrics()

    def kvcache(self) -> Iterator[Any]:
        """The K/V families alone (the dashboard's charts sample them every few seconds)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield from self._kvcache(CounterMetricFamily, GaugeMetricFamily)

    def _commands(self, counter: Any) -> Iterator[Any]:
        calls = counter("pion_commands", "commands run, by name", labels=["command"])
        failed = counter("pion_commands_failed", "commands that answered an error while running",
                         labels=["command"])
        rejected = counter("pion_commands_rejected", "commands refused before running (ACL, OOM, "
                           "MISCONF, LOADING, BUSY, arity)", labels=["command"])
        for name, (count, _usec, refused, errors) in sorted(self.server.dispatcher.stats.items()):
            calls.add_metric([name], count)
            failed.add_metric([name], errors)
            rejected.add_metric([name], refused)
        replies = counter("pion_error_replies", "error replies, by prefix (INFO errorstats)", labels=["prefix"])
        for prefix, count in sorted(self.server.error_stats.items()):
            replies.add_metric([prefix], count)
        yield from (calls, failed, rejected, replies)
        latency = _histogram("pion_command_duration_seconds",
                             "command run time, by name (latency-tracking yes)", ["command"],
                             self.server.latency.histograms, COMMAND_BUCKETS)
        yield latency

    def _clients(self, counter: Any, gauge: Any) -> Iterator[Any]:
        server = self.server
        yield gauge("pion_connected_clients", "client connections open now", value=len(server.clients))
        yield gauge("pion_blocked_clients", "clients blocked on a key (BLPOP, XREAD, WAIT, ...)",
                    value=sum(1 for c in server.clients.values() if c.blocked is not None))
        yield counter("pion_connections_received", "connections accepted", value=server.stat_numconnections)
        yield counter("pion_connections_rejected", "connections refused over maxclients",
                      value=server.stat_rejected_conn)

    def _keyspace(self, counter: Any, gauge: Any) -> Iterator[Any]:
        server = self.server
        memory = server.parts.memory
        if memory is not None:
            yield gauge("pion_memory_used_bytes", "INFO used_memory: the dataset estimate under "
                        "maxmemory, else the resident size", value=memory.used_memory())
        yield gauge("pion_memory_max_bytes", "maxmemory (0: no limit)", value=server.settings.maxmemory)
        keys = gauge("pion_keys", "keys, by database", labels=["db"])
        for db in server.dbs:
            if db.data:
                keys.add_metric([str(db.index)], len(db.data))
        yield keys
        yield counter("pion_expired_keys", "keys removed because their TTL passed", value=server.stat_expired)
        yield counter("pion_evicted_keys", "keys evicted under maxmemory", value=server.stat_evicted)

    def _kvcache(self, counter: Any, gauge: Any) -> Iterator[Any]:
        engine = self.server.parts.kvcache
        if engine is None:
            return
        labels = ["tenant"]
        hits = counter("pion_kv_prefix_hits", "KV.PREFIX.LOOKUP hits", labels=labels)
        misses = counter("pion_kv_prefix_misses", "KV.PREFIX.LOOKUP misses", labels=labels)
        tokens = counter("pion_kv_tokens_served", "prefix tokens served by hits", labels=labels)
        served = counter("pion_kv_bytes_served", "K/V payload bytes sent by fetches", labels=labels)
        saved = counter("pion_kv_prefill_saved_seconds", "prefill time the hits avoided (client-measured "
                        "where PREFILL_MS was sent, else estimated)", labels=labels)
        for name, ledger in sorted(engine.ledgers.items()):
            tenant = [name.decode("utf-8", "replace") or "default"]
            counts = ledger.counts
            hits.add_metric(tenant, counts["kvprefix_hits"])
            misses.add_metric(tenant, counts["kvprefix_misses"])
            tokens.add_metric(tenant, counts["kvprefix_tokens_served"])
            served.add_metric(tenant, counts["kvprefix_bytes_served"])
            saved.add_metric(tenant, counts["kvprefix_prefill_us_saved"] / 1e6)
        stored = gauge("pion_kv_stored_bytes", "bytes of K/V rows and SSM state held (what "
                       "kv-maxmemory caps)", labels=labels)
        evictions = counter("pion_kv_evictions", "prefixes evicted under kv-maxmemory", labels=labels)
        for name, space in sorted(engine.spaces.items()):
            tenant = [name.decode("utf-8", "replace") or "default"]
            stored.add_metric(tenant, space.nbytes)
            evictions.add_metric(tenant, space.evictor.evictions)
        yield from (hits, misses, tokens, served, saved, stored, evictions)

    def _wal(self, counter: Any, gauge: Any) -> Iterator[Any]:
        journal = self.server.journal
        if not isinstance(journal, WalJournal):
            return  # appendonly no: there is no log
        yield counter("pion_wal_fsyncs", "log fsyncs (group commit: fewer than records)", value=journal.fsyncs)
        yield counter("pion_wal_write_failures", "failed log or arena writes", value=journal.write_failures)
        yield gauge("pion_wal_bytes", "bytes of the current log", value=journal.log_bytes)
        yield _histogram("pion_wal_fsync_duration_seconds", "how long each log fsync took", [],
                         {"": journal.fsync_latency}, FSYNC_BUCKETS)


def _histogram(name: str, documentation: str, labels: list[str], histograms: dict[str, Histogram],
               bounds: tuple[float, ...]) -> Any:
    """A histogram family from ``pion.server.admin.latency.Histogram``s (log-linear ns buckets, ~6% wide)."""
    from prometheus_client.core import HistogramMetricFamily

    family = HistogramMetricFamily(name, documentation, labels=labels)
    bounds_ns = [int(bound * 1e9) for bound in bounds]
    for key, histogram in sorted(histograms.items()):
        counts = histogram.at_most(bounds_ns)
        buckets = [(repr(bound), count) for bound, count in zip(bounds, counts[:-1], strict=True)] + [("+Inf", counts[-1])]
        family.add_metric([key] if labels else [], buckets, histogram.sum_ns / 1e9)
    return family


class MetricsEndpoint(Component):
    """The HTTP listener of ``/metrics``, on the event loop: a component (started after recovery)."""

    name = "metrics"

    def __init__(self, server: Server, host: str, port: int) -> None:
        client = _require_client()
        self.registry = client.CollectorRegistry(auto_describe=False)
        self.registry.register(ServerCollector(server))
        self.host, self.port = host, port
        self.content_type = client.CONTENT_TYPE_LATEST
        self._generate = client.generate_latest
        self._listener: asyncio.Server | None = None
        self.scrapes = 0
        #: checks ``(user, password)`` of a scrape (None: no authentication, loopback or insecure)
        self.credentials: Any = None

    def render(self) -> bytes:
        """The exposition text, as a scrape gets it."""
        return self._generate(self.registry)

    async def start(self) -> None:
        try:
            self._listener = await asyncio.start_server(self._serve, self.host, self.port, backlog=64,
                                                        limit=MAX_REQUEST)
        except OSError as exc:
            raise StartupError(f"cannot listen for metrics on {self.host}:{self.port}: "
                               f"{exc.strerror or exc}") from None
        log.info("metrics at http://%s:%d/metrics", self.host, self.bound_port)

    @property
    def bound_port(self) -> int:
        if self._listener is None or not self._listener.sockets:
            return 0
        return int(self._listener.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._listener.wait_closed(), 1.0)
            self._listener = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            status, body, kind = self._answer(head)
        except asyncio.LimitOverrunError:
            status, body, kind = "431 Request Header Fields Too Large", b"request too large\n", "text/plain"
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            status, body, kind = "400 Bad Request", b"bad request\n", "text/plain"
        try:
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def _answer(self, head: bytes) -> tuple[str, bytes, str]:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return "400 Bad Request", b"bad request\n", "text/plain"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if self.credentials is not None and not self._authorized(head):
            return "401 Unauthorized", b"unauthorized: send HTTP Basic credentials of a server user\n", "text/plain"
        if target not in (b"/metrics", b"/"):
            return "404 Not Found", b"not found: the metrics are at /metrics\n", "text/plain"
        if method != b"GET":
            return "405 Method Not Allowed", b"only GET\n", "text/plain"
        self.scrapes += 1
        return "200 OK", self.render(), self.content_type

    def _authorized(self, head: bytes) -> bool:
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() != b"authorization":
                continue
            scheme, _, encoded = value.strip().partition(b" ")
            if scheme.lower() != b"basic":
                return False
            try:
                user, sep, password = base64.b64decode(encoded.strip(), validate=True).partition(b":")
            except (binascii.Error, ValueError):
                return False
            return bool(sep) and self.credentials(user.decode("utf-8", "replace"), password)
        return False


def install(server: Server) -> MetricsEndpoint | None:
    """With ``--metrics-port``: the endpoint, opened after recovery and closed at shutdown."""
    settings = server.settings
    if not settings.metrics_port:
        return None
    endpoint = MetricsEndpoint(server, settings.metrics_bind, settings.metrics_port)
    try:
        exposed = not is_loopback(settings.metrics_bind)
    except ValueError:
        raise StartupError(f"metrics-bind: '{settings.metrics_bind}' is not a valid IPv4 or IPv6 address") from None
    if exposed:
        users = users_of(server)
        if not _has_password(users):
            if settings.protected_mode:
                raise StartupError(
                    f"refusing to serve metrics on {settings.metrics_bind} without a password: anyone who can "
                    "reach it could read the server's command names, counts and sizes. Set a password "
                    "(--requirepass-file PATH, PION_REQUIREPASS, or an ACL user with one), then scrape with "
                    "HTTP Basic credentials; or keep --metrics-bind 127.0.0.1; on a network you trust "
                    "completely, start with --protected-mode no.")
            log.warning("metrics on %s: no password protects /metrics (--protected-mode no)", settings.metrics_bind)
        else:
            endpoint.credentials = lambda name, password: _accepts(users, name, password)
    server.parts.metrics = endpoint
    server.add_component(endpoint)
    return endpoint


def _has_password(users: Any) -> bool:
    """Does any enabled user need a password (requirepass sets the default user's)?"""
    return any(user.enabled and not user.nopass and user.passwords for user in users.table.users.values())


def _accepts(users: Any, name: str, password: bytes) -> bool:
    user = users.get(name)
    # a user without a password (nopass) opens no door here: /metrics off loopback needs a real one
    return user is not None and not user.nopass and user.accepts(password)
