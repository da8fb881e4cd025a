"""CLUSTER COUNTKEYSINSLOT / GETKEYSINSLOT from the per-slot index (``pion.storage.slot_index``),
kept exact under writes, DEL, RENAME, expiry, FLUSHALL, SWAPDB, MIGRATE and a reload: compared
with a scan of the keyspace after random operations, and through a real cluster node."""

from __future__ import annotations

import random
import time

import redis

from pion.protocol.keyslot import key_slot
from pion.storage.keyspace import Database, now_ms
from tests.support.clusters import PionThreadCluster


def _scan(db: Database, slot: int) -> list[bytes]:
    return sorted(key for key in db.keys() if key_slot(key) == slot)


def test_index_equals_a_scan_after_random_operations():
    rng = random.Random(4)
    db, other = Database(0), Database(1)
    keys = [b"{t%d}k%d" % (i % 7, i) for i in range(60)]
    slots = sorted({key_slot(k) for k in keys})
    db.slot_index()  # built empty, then kept in step
    for step in range(3000):
        key = rng.choice(keys)
        op = rng.random()
        if op < 0.4:
            db.set(key, b"v")
        elif op < 0.55:
            db.delete(key)
        elif op < 0.65 and db.exists(key):
            target = rng.choice(keys)
            entry = db.take(key)
            db.delete(target)
            db.put(target, entry)  # RENAME
        elif op < 0.75 and db.exists(key):
            db.set_expire(key, now_ms() - 1 if rng.random() < 0.5 else now_ms() + 60_000)
        elif op < 0.8:
            db.sweep_expired()
        elif op < 0.81:
            db.flush()
        elif op < 0.82:
            db.swap_contents(other)
        if step % 50 == 0:
            for slot in slots:
                assert sorted(db.keys_in_slot(slot)) == _scan(db, slot), (step, slot)
    assert db.slot_index().total == len(db.data)


def test_index_catches_a_keyspace_filled_around_it():
    db = Database(0)
    db.slot_index()
    db.set(b"a", b"1")
    db.data[b"b"] = b"2"  # a loader writing the dict directly: the total is out of step, rebuilt
    assert db.keys_in_slot(key_slot(b"b")) == [b"b"]


def test_countkeysinslot_through_a_cluster_node(tmp_path):
    cluster = PionThreadCluster(tmp_path, 2, enable_debug_command="yes")
    try:
        a, b = (redis.Redis(port=p) for p in cluster.ports)
        slot = key_slot("{s}")
        assert slot <= 8191  # owned by the first node
        count = lambda node=a: node.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)  # noqa: E731
        keys_of = lambda node=a: sorted(node.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100))  # noqa: E731
        a.mset({f"{{s}}{i}": i for i in range(10)})
        assert count() == 10
        a.delete("{s}0", "{s}1")
        a.rename("{s}2", "{s}renamed")
        a.pexpire("{s}3", 1)
        time.sleep(0.05)
        assert count() == 7 and b"{s}3" not in keys_of() and b"{s}renamed" in keys_of()
        assert len(a.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 3)) == 3
        a.execute_command("DEBUG", "RELOAD")
        assert count() == 7
        b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", a.execute_command("CLUSTER", "MYID"))
        a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", b.execute_command("CLUSTER", "MYID"))
        a.execute_command("MIGRATE", "127.0.0.1", cluster.ports[1], "", 0, 5000, "KEYS", "{s}4", "{s}5")
        assert count() == 5 and count(b) == 2 and keys_of(b) == [b"{s}4", b"{s}5"]
        a.flushall()
        assert count() == 0 and keys_of() == []
        for node in (a, b):
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", b.execute_command("CLUSTER", "MYID"))
    finally:
        cluster.stop()


def test_replicaof_is_refused_in_cluster_mode(pion1):
    node = redis.Redis(port=pion1.ports[0])
    for args in (("127.0.0.1", "1"), ("NO", "ONE")):
        try:
            node.execute_command("REPLICAOF", *args)
        except redis.ResponseError as exc:
            assert str(exc) == "REPLICAOF not allowed in cluster mode."
        else:
            raise AssertionError("REPLICAOF accepted on a cluster node")
