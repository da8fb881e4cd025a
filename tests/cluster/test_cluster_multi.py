"""MULTI/EXEC, WATCH and SELECT on a cluster node, byte for byte against a real 3-node
redis-server 7.0.15 cluster: EXEC across slots answers a bare ``-CROSSSLOT`` (the transaction
is discarded, not wrapped in ``-EXECABORT``), a queued command of another node's slot answers
``-MOVED`` and EXEC then ``-EXECABORT ... previous errors.``, and a migrating slot's missing key
answers ``-ASK`` at EXEC."""

from __future__ import annotations

import socket

import pytest
import redis

from pion.protocol.keyslot import key_slot
from tests.support.clusters import PionThreadCluster


@pytest.fixture(scope="module")
def pion3(tmp_path_factory):
    """One 3-node Pion cluster for the module (each test leaves its slots as it found them)."""
    cluster = PionThreadCluster(tmp_path_factory.mktemp("pion-cluster"), 3)
    yield cluster
    cluster.stop()


def _encode(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _raw(port: int, commands: list[list[bytes]]) -> bytes:
    """The replies' bytes, one command after the other (each reply read before the next is sent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        out = b""
        for args in commands:
            sock.sendall(_encode(args))
            sock.settimeout(5)
            got = sock.recv(65536)
            sock.settimeout(0.05)  # the rest of a longer reply, if any
            try:
                while chunk := sock.recv(65536):
                    got += chunk
            except TimeoutError:
                pass
            out += got
        return out


class _Side:
    """One cluster seen from its first node: keys it owns in two slots, one another node owns."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.port = ports[0]
        owner = {}
        with redis.Redis(port=self.port) as client:
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                for slot in range(start, end + 1):
                    owner[slot] = primary[1]
            self.ids = {}
            for line in client.execute_command("CLUSTER", "NODES").decode().splitlines():
                fields = line.split()
                self.ids[int(fields[1].split("@")[0].rsplit(":", 1)[1])] = fields[0]
        candidates = [b"k%d" % i for i in range(5000)]
        self.mine = [k for k in candidates if owner[key_slot(k)] == self.port][:2]
        self.other = next(k for k in candidates if owner[key_slot(k)] != self.port)
        assert key_slot(self.mine[0]) != key_slot(self.mine[1])

    def run(self, commands: list[list[bytes]], clean: bool = True) -> bytes:
        if clean:
            with redis.Redis(port=self.port) as client:
                for key in self.mine:
                    client.delete(key)
        reply = _raw(self.port, commands)
        for port in self.ports:  # ports differ between the two clusters
            reply = reply.replace(str(port).encode(), b"PORT%d" % self.ports.index(port))
        return reply

    def setslot(self, slot: int, *how: str) -> None:
        with redis.Redis(port=self.port) as client:
            client.execute_command("CLUSTER", "SETSLOT", slot, *how)


def _cases(side: _Side) -> list[list[list[bytes]]]:
    a, b = side.mine
    other = side.other
    return [
        [[b"MULTI"], [b"SET", a, b"1"], [b"SET", b, b"2"], [b"EXEC"], [b"GET", a], [b"PING"]],
        [[b"HELLO", b"3"], [b"MULTI"], [b"SET", a, b"1"], [b"SET", b, b"2"], [b"EXEC"]],
        [[b"MULTI"], [b"PING"], [b"SET", a, b"1"], [b"GET", b], [b"EXEC"], [b"MULTI"], [b"SET", a, b"x"],
         [b"EXEC"], [b"GET", a]],
        [[b"MULTI"], [b"SET", a, b"1"], [b"SET", other, b"2"], [b"EXEC"], [b"GET", a]],
        [[b"MULTI"], [b"SET", other, b"2"], [b"SET", a, b"2"], [b"EXEC"]],
        [[b"MULTI"], [b"MSET", a, b"1", b, b"2"], [b"EXEC"]],
        [[b"MULTI"], [b"SET", a, b"1"], [b"SET", b, b"2"], [b"DISCARD"], [b"EXEC"]],
        [[b"WATCH", a, b]],
        [[b"WATCH", a], [b"MULTI"], [b"SET", a, b"1"], [b"SET", b, b"1"], [b"EXEC"], [b"EXEC"]],
        [[b"MULTI"], [b"SELECT", b"1"], [b"EXEC"]],
        [[b"SELECT", b"1"], [b"SELECT", b"0"], [b"SELECT", b"x"], [b"SELECT", b"00"]],
        [[b"MULTI"], [b"EVAL", b"return 1", b"2", a, b], [b"EXEC"]],
        [[b"MULTI"], [b"EVAL", b"return redis.call('get', KEYS[1])", b"1", a], [b"EXEC"]],
    ]


def test_multi_exec_replies_equal_redis_cluster(pion3, redis3):
    pion, ref = _Side(pion3.ports), _Side(redis3.ports)
    for got_case, want_case in zip(_cases(pion), _cases(ref), strict=True):
        got, want = pion.run(got_case), ref.run(want_case)
        if got_case[0] == [b"HELLO", b"3"]:  # the version, client id and modules differ; mode must be cluster
            assert b"$4\r\nmode\r\n$7\r\ncluster\r\n" in got
            got, want = got[got.index(b"+OK\r\n"):], want[want.index(b"+OK\r\n"):]  # from MULTI's +OK on
        assert got == want, got_case


def _exec_after_delete(port: int, key: bytes) -> bytes:
    """MULTI + GET key queued while the key exists; another client deletes it; then EXEC."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        out = b""
        for args in ([b"MULTI"], [b"GET", key]):
            sock.sendall(_encode(args))
            out += sock.recv(65536)
        with redis.Redis(port=port) as other:
            other.delete(key)
        sock.sendall(_encode([b"EXEC"]))
        out += sock.recv(65536)
        sock.sendall(_encode([b"PING"]))
        return out + sock.recv(65536)


def test_exec_on_a_migrating_slot_equals_redis(pion3, redis3):
    """A migrating slot: a missing key answers -ASK when queued (EXEC then -EXECABORT); a present
    key queues and runs here; a key deleted between queueing and EXEC makes EXEC answer a bare
    -ASK (the transaction is discarded)."""
    sides = {"pion": _Side(pion3.ports), "redis": _Side(redis3.ports)}
    replies: dict[str, list[bytes]] = {}
    for name, side in sides.items():
        key = side.mine[0]
        slot = key_slot(key)
        present = b"{%s}x" % key
        side.run([[b"SET", present, b"1"]])
        side.setslot(slot, "MIGRATING", side.ids[side.ports[1]])
        try:
            replies[name] = [
                side.run([[b"MULTI"], [b"GET", key], [b"EXEC"], [b"PING"]], clean=False),
                side.run([[b"MULTI"], [b"GET", present], [b"INCR", present], [b"EXEC"]], clean=False),
                _exec_after_delete(side.port, present).replace(str(side.ports[1]).encode(), b"PORT1"),
            ]
        finally:
            side.setslot(slot, "STABLE")
    assert replies["pion"] == replies["redis"]
    assert replies["pion"][0].startswith(b"+OK\r\n-ASK ")
    assert replies["pion"][2].startswith(b"+OK\r\n+QUEUED\r\n-ASK ")


def test_info_server_names_cluster_mode(pion1):
    with redis.Redis(port=pion1.ports[0]) as client:
        assert client.info("server")["redis_mode"] == "cluster"
        assert client.info("cluster")["cluster_enabled"] == 1
