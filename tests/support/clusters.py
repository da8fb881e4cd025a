"""Clusters for tests: N Pion nodes (threads, or processes for kill -9) or N real redis-server
7.0.15 nodes, each owning an even share of the 16384 slots, joined with CLUSTER ADDSLOTSRANGE
and CLUSTER MEET as an operator would, and waited on until every node agrees."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import redis

from pion.config import settings_from_pairs
from tests.support.servers import ProcessServer, RedisServer, ThreadServer, free_port, make_settings

SLOTS = 16384


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is valid and free too."""
    while True:
        port = free_port()
        if port + 10000 >= 65536:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def slot_ranges(count: int) -> list[tuple[int, int]]:
    """Even shares, as ``redis-cli --cluster create`` splits them."""
    per = SLOTS / count
    return [(round(i * per), round((i + 1) * per) - 1) for i in range(count)]


def join(ports: list[int], timeout: float = 60.0, password: str | None = None) -> None:
    """ADDSLOTSRANGE on each node, MEET from the first to the others, then wait for agreement."""
    clients = [redis.Redis(port=p, password=password, socket_timeout=10) for p in ports]
    try:
        for client, (start, end) in zip(clients, slot_ranges(len(ports)), strict=True):
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", start, end)
        for port in ports[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        wait_agreed(clients, timeout)
    finally:
        for client in clients:
            client.close()


def wait_agreed(clients: list[redis.Redis], timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while True:
        views = []
        for client in clients:
            info = client.execute_command("CLUSTER", "INFO")
            info = info.decode() if isinstance(info, bytes) else str(info)
            slots = client.execute_command("CLUSTER", "SLOTS")
            views.append(("cluster_state:ok" in info, sorted((s[0], s[1], s[2][1]) for s in slots)))
        if all(ok for ok, _ in views) and all(v[1] == views[0][1] for v in views) and sum(e - s + 1 for s, e, _ in views[0][1]) == SLOTS \
                and len({port for _, _, port in views[0][1]}) == len(clients):
            return
        if time.time() > deadline:
            raise TimeoutError(f"cluster did not agree: {views}")
        time.sleep(0.2)


def pion_settings(datadir: Path, **extra: str):
    pairs = [("cluster-enabled", "yes"), *((k.replace("_", "-"), v) for k, v in extra.items())]
    return settings_from_pairs(pairs, base=make_settings(datadir))


class _Nodes:
    nodes: list

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class PionThreadCluster(_Nodes):
    """N Pion nodes in threads of this process."""

    def __init__(self, root: Path, count: int, **extra: str) -> None:
        self.nodes: list[ThreadServer] = []
        for i in range(count):
            datadir = root / f"node{i}"
            datadir.mkdir(parents=True)
            self.nodes.append(ThreadServer(pion_settings(datadir, port=str(cluster_port()), **extra)).start())
        join(self.ports, password=extra.get("requirepass"))


class PionProcessCluster(_Nodes):
    """N ``pion-server --cluster-enabled yes`` processes (for kill -9)."""

    def __init__(self, root: Path, count: int, *extra: str) -> None:
        self.nodes = [ProcessServer(root / f"node{i}", "--cluster-enabled", "yes", *extra, port=cluster_port())
                      for i in range(count)]
        for node in self.nodes:
            node.start()
        join(self.ports)


class RedisCluster(_Nodes):
    """N real redis-server nodes (``--cluster-enabled yes``), no persistence. Full coverage is not
    required, so the nodes left keep serving their slots when one is killed (no replicas)."""

    def __init__(self, root: Path, count: int) -> None:
        self.nodes = [RedisServer(root / f"redis{i}", "--cluster-enabled", "yes", "--cluster-config-file",
                                  str(root / f"redis{i}" / "nodes.conf"), "--cluster-node-timeout", "1000",
                                  "--cluster-require-full-coverage", "no") for i in range(count)]
        for node in self.nodes:
            node.port = cluster_port()
            node.start()
        join(self.ports)

    def kill9(self, index: int) -> None:
        proc = self.nodes[index].proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.stop()
