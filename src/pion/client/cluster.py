"""The prompt cache over many nodes: ``pion+cluster://h1:p1,h2:p2,...`` (Pion nodes with
``cluster-enabled yes``) and ``redis+cluster://...`` (a real Redis or Valkey Cluster).

``ClusterNodes`` keeps one connection pool per node and the slot map (``CLUSTER SLOTS`` from
any node that answers). ``PionClusterClient`` stands in for ``PionClient`` in the prompt cache:
a pipeline goes whole to the node owning the slot of its first key (a prompt cache pipeline
touches one namespace, and a cluster namespace carries a hash tag, ``{ns}``, so its sessions
``{ns}_pk``/``{ns}_pv`` share that slot); a redirect or a stale map refreshes the map and
retries once; ``KV.PREFIX.MATCH`` asks every node (one round trip each) and keeps the best.

A node that does not answer is marked down for ``retry_after`` seconds: its prefixes are
misses (``NodeDown``, a ``PionConnectionError``, so the prompt cache warns once and recomputes),
never a wait on every request and never someone else's rows.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence

from pion.client.client import PionClient
from pion.client.errors import CorruptReply, PionConnectionError, PionError
from pion.protocol.keyslot import SLOTS, hash_tag, key_slot

SCHEMES = ("pion+cluster", "pions+cluster", "redis+cluster", "rediss+cluster")
_REDIRECTS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


class NodeDown(PionConnectionError):
    """The node owning this key does not answer (or answered nothing within the timeout)."""


def is_cluster_url(url: str) -> bool:
    return urllib.parse.urlsplit(url).scheme in SCHEMES


def parse_cluster_url(url: str) -> tuple[str, list[tuple[str, int]], str | None, str | None]:
    """``(node scheme, [(host, port), ...], username, password)`` of a cluster URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"not a cluster URL: {url!r} (want one of {', '.join(SCHEMES)})")
    scheme = parts.scheme.split("+")[0]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":") if userinfo else ("", "", "")
    default = 1974 if scheme.startswith("pion") else 6379
    nodes = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:
            host, port = port, ""
        nodes.append((host or "127.0.0.1", int(port) if port else default))
    if not nodes:
        raise ValueError(f"no nodes in {url!r}")
    return (scheme, nodes, urllib.parse.unquote(user) or None,
            urllib.parse.unquote(password) if userinfo else None)


def tagged(ns: str) -> str:
    """The namespace with a hash tag (``{ns}``) unless it has one: its keys then share a slot."""
    return ns if hash_tag(ns.encode()) != ns.encode() else "{" + ns + "}"


class ClusterNodes:
    """Connection pools per node, the slot map, and which nodes are down."""

    def __init__(self, url: str, *, socket_timeout: float = 60.0, connect_timeout: float = 1.0,
                 retry_after: float = 2.0) -> None:
        self.url = url
        self.scheme, self.seeds, self.username, self.password = parse_cluster_url(url)
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.retry_after = retry_after
        self.clients: dict[tuple[str, int], PionClient] = {}
        self.owner: list[tuple[str, int] | None] = [None] * SLOTS
        self.down_until: dict[tuple[str, int], float] = {}
        #: how many lookups were misses because their node was down
        self.down_misses = 0
        self._lock = threading.Lock()
        self.refresh()

    def client(self, addr: tuple[str, int]) -> PionClient:
        found = self.clients.get(addr)
        if found is None:
            with self._lock:
                found = self.clients.get(addr)
                if found is None:
                    scheme = {"pion": "redis", "pions": "rediss"}.get(self.scheme, self.scheme)
                    found = self.clients[addr] = PionClient(
                        f"{scheme}://{addr[0]}:{addr[1]}", socket_timeout=self.socket_timeout,
                        socket_connect_timeout=self.connect_timeout, username=self.username,
                        password=self.password)
        return found

    def refresh(self) -> None:
        """Read the slot map from the first node that answers (seeds first, then known nodes)."""
        candidates = list(dict.fromkeys([*self.seeds, *self.clients]))
        last: Exception | None = None
        for addr in candidates:
            if self.is_down(addr):
                continue
            try:
                slots = self.client(addr).execute("CLUSTER", "SLOTS")
            except PionConnectionError as exc:
                self.mark_down(addr)
                last = exc
                continue
            except PionError as exc:
                last = exc
                continue
            owner: list[tuple[str, int] | None] = [None] * SLOTS
            for entry in slots:
                start, end, master = int(entry[0]), int(entry[1]), entry[2]
                host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
                node = (host or addr[0], int(master[1]))
                for slot in range(start, end + 1):
                    owner[slot] = node
            self.owner = owner
            return
        if not any(self.owner):
            raise PionConnectionError(f"no node of {self.url} answered CLUSTER SLOTS: {last}")

    def is_down(self, addr: tuple[str, int]) -> bool:
        until = self.down_until.get(addr)
        return until is not None and time.monotonic() < until

    def mark_down(self, addr: tuple[str, int]) -> None:
        self.down_until[addr] = time.monotonic() + self.retry_after

    def node_for(self, key: str | bytes) -> tuple[str, int]:
        addr = self.owner[key_slot(key)]
        if addr is None:
            raise NodeDown(f"no node serves the slot of {key!r}")
        if self.is_down(addr):
            self.down_misses += 1
            raise NodeDown(f"cluster node {addr[0]}:{addr[1]} is down (retrying in {self.retry_after:g} s)")
        return addr

    def masters(self) -> list[tuple[str, int]]:
        return list(dict.fromkeys(a for a in self.owner if a is not None))

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _is_redirect(reply) -> bool:
    return isinstance(reply, PionError) and str(reply).split(" ", 1)[0] in _REDIRECTS


class PionClusterClient:
    """What ``PionPromptCache`` needs of ``PionClient``, over Pion cluster nodes."""

    def __init__(self, url: str, **options) -> None:
        self.url = url
        self.nodes = ClusterNodes(url, **options)

    tag = staticmethod(tagged)

    def _on_node(self, key, run, asking=None):
        """``run(client)`` on the node owning ``key``; once more after a refresh on a redirect.
        ``asking(client)``: the same with ``ASKING`` before each command, sent to the node an
        ``-ASK`` names (a slot being migrated whose key already moved): the map stays as it is."""
        for attempt in (0, 1):
            addr = self.nodes.node_for(key)
            try:
                replies = run(self.nodes.client(addr))
            except PionConnectionError as exc:
                self.nodes.mark_down(addr)
                raise NodeDown(f"cluster node {addr[0]}:{addr[1]} does not answer: {exc}") from exc
            except PionError as exc:
                if attempt or not _is_redirect(exc):
                    raise
                target = _ask_target([exc])
                if target is not None and asking is not None:
                    return self._asking(target, asking)
                self.nodes.refresh()
                continue
            listed = replies if isinstance(replies, list) else []
            if attempt or not any(_is_redirect(r) for r in listed):
                return replies
            target = _ask_target(listed)
            if target is not None and asking is not None:
                return self._asking(target, asking)
            self.nodes.refresh()
        return replies

    def _asking(self, addr: tuple[str, int], asking):
        if self.nodes.is_down(addr):
            raise NodeDown(f"cluster node {addr[0]}:{addr[1]} is down (retrying in {self.nodes.retry_after:g} s)")
        try:
            return asking(self.nodes.client(addr))
        except PionConnectionError as exc:
            self.nodes.mark_down(addr)
            raise NodeDown(f"cluster node {addr[0]}:{addr[1]} does not answer: {exc}") from exc

    def pipeline_execute(self, commands: Iterable[Sequence], *, fast: bool = False) -> list:
        commands = list(commands)
        key = _first_key(commands)
        return self._on_node(key, lambda c: c.pipeline_execute(commands, fast=fast),
                             lambda c: c.pipeline_execute(_asking_each(commands), fast=fast)[1::2])

    def execute(self, *args):
        def asking(client):
            reply = client.pipeline_execute([("ASKING",), args])[1]
            if isinstance(reply, PionError):
                raise reply
            return reply

        return self._on_node(args[1], lambda c: c.execute(*args), asking)

    def kv_match_tokens(self, block_size: int, hash_blob: bytes, tokens: bytes, seed: bytes | None = None):
        """Every node's best stored prefix (one round trip each); the one holding the most tokens."""
        best = None
        for addr in self.nodes.masters():
            if self.nodes.is_down(addr):
                continue
            try:
                found = self.nodes.client(addr).kv_match_tokens(block_size, hash_blob, tokens, seed)
            except PionConnectionError:
                self.nodes.mark_down(addr)
                continue
            if found is not None and (best is None or found[1] > best[1]):
                best = found
        return best

    def kv_drop(self, *namespaces) -> int:
        return sum(int(self.execute("KV.PREFIX.DROP", ns)) for ns in namespaces)

    def ssm_drop(self, sid, layer: int | None = None) -> None:
        self.execute("SSM.PREFIX.DROP", sid, *([layer] if layer is not None else []))

    def kv_manifest(self, ns) -> bytes | None:
        return self.execute("KV.PREFIX.MANIFEST", ns)

    def close(self) -> None:
        self.nodes.close()

    def __getattr__(self, name: str):
        """Any other ``PionClient`` method whose first argument is a namespace or session id
        (``kv_lookup``, ``kv_blocks``, ``v_fetch_range``, ...) runs on the node owning it."""
        if name.startswith("_") or not callable(getattr(PionClient, name, None)):
            raise AttributeError(name)

        def routed(key, *args, **kwargs):
            return self._on_node(key, lambda client: getattr(client, name)(key, *args, **kwargs))

        return routed


def _asking_each(commands: list[Sequence]) -> list[Sequence]:
    """``ASKING`` before each command (it covers only the next one), for the node an -ASK named."""
    return [part for command in commands for part in (("ASKING",), command)]


def _ask_target(replies) -> tuple[str, int] | None:
    """The node of the first ``-ASK slot host:port`` among ``replies``, if any."""
    for reply in replies:
        words = str(reply).split(" ") if isinstance(reply, PionError) else []
        if len(words) == 3 and words[0] == "ASK":
            host, _, port = words[2].rpartition(":")
            return host, int(port)
    return None


def _first_key(commands: list[Sequence]):
    for command in commands:
        if len(command) > 1 and str(command[0]).upper() not in ("ASKING", "MULTI"):
            return command[1]
    raise CorruptReply("a cluster pipeline needs a command with a key")

