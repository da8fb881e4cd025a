"""Tenant isolation: from tenant B (bob) every read, list, write and evict path against tenant A's
(alice's) keys, channels, K/V sessions and namespaces is refused or finds nothing; admin-only
commands answer -NOPERM; quotas answer -OOM; tenants' data survives a kill -9 and a snapshot."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.conftest import RawConnection
from tests.support.servers import ProcessServer

ADMIN_PW = "adm1n"
TENANTS = ("alice:apw", "bob:bpw:quota=1mb")


def connect(srv, user: str | None, password: str, protocol: int = 2) -> redis.Redis:
    return redis.Redis(port=srv.port, username=user, password=password, protocol=protocol,
                       socket_timeout=10, retry=Retry(NoBackoff(), 0))


@pytest.fixture
def srv(make_server):
    return make_server(requirepass=ADMIN_PW, tenants=TENANTS)


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def trio(request, srv):
    """(admin, alice, bob) clients."""
    clients = (connect(srv, None, ADMIN_PW, request.param), connect(srv, "alice", "apw", request.param),
               connect(srv, "bob", "bpw", request.param))
    yield clients
    for c in clients:
        c.close()


def fill(c) -> None:
    """One key of every type, some with TTLs, in db 0 and db 3."""
    c.set("str", "alice-string")
    c.set("ttl", "x", ex=100)
    c.hset("hash", mapping={"f": "v"})
    c.rpush("list", "a", "b")
    c.sadd("set", "m")
    c.zadd("zset", {"m": 1})
    c.pfadd("hll", "x")
    c.xadd("stream", {"f": "v"})
    c.geoadd("geo", (13.36, 38.11, "palermo"))
    c.setbit("bits", 7, 1)
    c.execute_command("SELECT", 3)
    c.set("db3key", "x")
    c.execute_command("SELECT", 0)


ALICE_KEYS = {b"str", b"ttl", b"hash", b"list", b"set", b"zset", b"hll", b"stream", b"geo", b"bits"}


def norm(keys) -> set[bytes]:
    return {k if isinstance(k, bytes) else k.encode() for k in keys}


# -- keys ------------------------------------------------------------------------------------------


def test_every_read_and_list_path_is_blind_to_another_tenant(trio):
    admin, alice, bob = trio
    fill(alice)
    assert norm(alice.keys("*")) == ALICE_KEYS and alice.dbsize() == len(ALICE_KEYS)
    assert bob.keys("*") == [] and bob.dbsize() == 0 and bob.randomkey() is None
    assert bob.scan(0, count=1000) == (0, []) and list(bob.scan_iter()) == []
    assert admin.keys("*") == [] and admin.dbsize() == 0
    for key in ALICE_KEYS:
        assert bob.exists(key) == 0 and bob.type(key) in (b"none", "none")
        assert bob.dump(key) is None and bob.ttl(key) == -2
    assert bob.get("str") is None and bob.hgetall("hash") in ({}, []) and bob.lrange("list", 0, -1) == []
    assert bob.smembers("set") == set() and bob.zrange("zset", 0, -1) == [] and bob.pfcount("hll") == 0
    assert bob.xrange("stream") == [] and bob.geopos("geo", "palermo") == [None] and bob.getbit("bits", 7) == 0
    for db in range(16):
        bob.execute_command("SELECT", db)
        assert bob.dbsize() == 0
    bob.execute_command("SELECT", 0)
    assert "db0" not in bob.info("keyspace") and "db3" not in bob.info("keyspace")
    assert alice.info("keyspace")["db3"]["keys"] == 1
    assert bob.execute_command("SORT", "list", "BY", "nosort") == []


def test_every_write_path_leaves_the_other_tenant_alone(trio):
    admin, alice, bob = trio
    fill(alice)
    bob.set("str", "bob")
    bob.delete("hash", "list", "set")
    bob.rename("str", "renamed")
    bob.expire("ttl", 1)
    bob.persist("ttl")
    bob.execute_command("SWAPDB", 0, 3)
    bob.set("moved", "x")
    bob.move("moved", 5)
    bob.flushdb()
    bob.flushall()
    bob.execute_command("SELECT", 3)
    bob.flushdb()
    assert alice.get("str") == b"alice-string" and norm(alice.keys("*")) == ALICE_KEYS
    alice.execute_command("SELECT", 3)
    assert alice.get("db3key") == b"x"
    admin.set("adminkey", "1")
    bob.flushall()
    assert admin.get("adminkey") == b"1" and alice.dbsize() == 1


def test_copy_and_move_stay_inside_the_tenant(trio):
    _, alice, bob = trio
    alice.set("src", "v")
    assert alice.execute_command("COPY", "src", "dst", "DB", 2) == 1
    assert alice.move("src", 4)
    for db in (0, 2, 4):
        bob.execute_command("SELECT", db)
        assert bob.dbsize() == 0


def test_watch_and_blocking_do_not_see_another_tenants_writes(trio, srv):
    _, alice, bob = trio
    pipe = alice.pipeline()
    pipe.watch("k")
    bob.set("k", "bob")
    pipe.multi()
    pipe.set("k", "alice")
    assert pipe.execute() == [True]  # bob's write to "his" k did not touch alice's WATCH
    blocked = connect(srv, "alice", "apw")
    start = time.perf_counter()
    bob.lpush("queue", "job")
    assert blocked.blpop(["queue"], timeout=0.3) is None and time.perf_counter() - start >= 0.25
    blocked.close()


def test_a_tenants_client_can_switch_identity_and_reset(srv):
    c = connect(srv, None, ADMIN_PW)
    c.set("k", "admin")
    c.execute_command("AUTH", "alice", "apw")
    assert c.get("k") is None and c.acl_whoami() == "alice"
    c.set("k", "alice")
    c.execute_command("AUTH", ADMIN_PW)
    assert c.get("k") == b"admin"
    c.execute_command("AUTH", "alice", "apw")
    assert c.execute_command("RESET") in (b"RESET", "RESET")
    with pytest.raises(redis.AuthenticationError):
        c.get("k")
    c.close()


def test_hello_auth_selects_the_tenant(srv):
    raw = RawConnection(srv.port)
    raw.cmd("HELLO", "3", "AUTH", "alice", "apw")
    assert b"proto\r\n:3" in raw.read_some()
    raw.cmd("ACL", "WHOAMI")
    assert raw.read_some() == b"$5\r\nalice\r\n"
    raw.close()


# -- admin-only commands ------------------------------------------------------------------------


@pytest.mark.parametrize("command, name", [
    (("CONFIG", "SET", "maxmemory", "1"), "config|set"),
    (("CONFIG", "GET", "requirepass"), "config|get"),
    (("DEBUG", "SLEEP", "0"), "debug"),
    (("SHUTDOWN", "NOSAVE"), "shutdown"),
    (("SAVE",), "save"),
    (("BGSAVE",), "bgsave"),
    (("BGREWRITEAOF",), "bgrewriteaof"),
    (("MONITOR",), "monitor"),
    (("SLOWLOG", "GET"), "slowlog|get"),
    (("CLIENT", "PAUSE", "100"), "client|pause"),
    (("CLIENT", "NO-EVICT", "on"), "client|no-evict"),
    (("MEMORY", "STATS"), "memory|stats"),
    (("ACL", "SETUSER", "bob", "on"), "acl|setuser"),
    (("ACL", "LIST"), "acl|list"),
    (("KV.PREFIX.SAVE",), "kv.prefix.save"),
    (("LATENCY", "LATEST"), "latency|latest"),
])
def test_admin_commands_are_refused_to_tenants(trio, command, name):
    admin, _, bob = trio
    with pytest.raises(redis.exceptions.NoPermissionError) as exc:
        bob.execute_command(*command)
    assert str(exc.value) == f"this user has no permissions to run the '{name}' command"
    entries = admin.acl_log()
    assert any(e["reason"] == "command" and e["object"] == name and e["username"] == "bob" for e in entries)


def test_a_refused_command_in_multi_aborts_the_transaction(srv):
    raw = RawConnection(srv.port)
    raw.cmd("AUTH", "bob", "bpw")
    raw.read_exactly(b"+OK\r\n")
    raw.send(b"MULTI\r\nSET a 1\r\nCONFIG SET maxmemory 1\r\nEXEC\r\n")
    data = raw.read_some()
    assert b"-NOPERM this user has no permissions to run the 'config|set' command" in data
    assert data.endswith(b"-EXECABORT Transaction discarded because of previous errors.\r\n")
    raw.close()


def test_client_list_and_kill_see_only_the_tenants_own_connections(trio, srv):
    admin, alice, bob = trio
    alice_id = alice.client_id()
    bob2 = connect(srv, "bob", "bpw")
    bob2_id = bob2.client_id()
    listed = {int(c["id"]) for c in bob.client_list()}
    assert alice_id not in listed and bob2_id in listed and {c["user"] for c in bob.client_list()} == {"bob"}
    with pytest.raises(redis.ResponseError, match="No such client"):
        bob.execute_command("CLIENT", "KILL", alice.client_info()["addr"])
    assert bob.execute_command("CLIENT", "KILL", "ID", alice_id) == 0
    assert alice.ping()
    assert bob.execute_command("CLIENT", "KILL", "ID", bob2_id) == 1
    assert alice_id in {int(c["id"]) for c in admin.client_list()}
    bob2.close()


# -- pub/sub -------------------------------------------------------------------------------------


def test_channels_patterns_and_keyspace_events_are_per_tenant(trio, srv):
    admin, alice, bob = trio
    admin.config_set("notify-keyspace-events", "KEA")
    spy = connect(srv, "bob", "bpw").pubsub()
    spy.psubscribe("*")
    listener = connect(srv, "alice", "apw").pubsub()
    listener.subscribe("news")
    listener.psubscribe("__keyspace@0__:*")
    assert spy.get_message(timeout=1)["type"] == "psubscribe"
    for _ in range(2):
        assert listener.get_message(timeout=1)["type"] in ("subscribe", "psubscribe")
    assert bob.publish("news", "from bob") == 1  # only bob's own pattern subscriber
    assert alice.publish("news", "from alice") == 1
    assert bob.pubsub_channels() == [] and bob.pubsub_numsub("news") == [(b"news", 0)]
    assert alice.pubsub_numsub("news") == [(b"news", 1)] and admin.pubsub_numpat() == 0
    alice.set("secret", "1")
    got = [listener.get_message(timeout=1) for _ in range(2)]
    assert got[0]["data"] == b"from alice" and got[1]["channel"] == b"__keyspace@0__:secret"
    seen = []
    while (msg := spy.get_message(timeout=0.3)) is not None:
        seen.append(msg["data"])
    assert seen == [b"from bob"]  # no alice message, no alice keyspace event
    spy.close()
    listener.close()


# -- the K/V engine --------------------------------------------------------------------------------


def kv_stats(c) -> dict:
    reply = c.execute_command("PION.STATS")
    return reply if isinstance(reply, dict) else dict(zip(*[iter(reply)] * 2, strict=True))


def test_kv_sessions_namespaces_ssm_state_and_stats_are_per_tenant(trio):
    _, alice, bob = trio
    alice.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16")
    data = np.ones((4, 32), np.float32).tobytes()
    for side in ("_pk", "_pv"):
        alice.execute_command("V.STOREBATCH", "ns" + side, 0, 0, 4, data)
    assert alice.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    alice.execute_command("SSM.PREFIX.STORE", "ns", 0, b"state-blob")
    alice.execute_command("STATE.ALLOC", "buf", 8)
    alice.execute_command("STATE.WRITE", "buf", 0, b"abcd")
    assert bob.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"
    assert b"sessions:0" in bob.execute_command("V.INFO")
    with pytest.raises(redis.ResponseError, match="not found"):
        bob.execute_command("V.FETCH", "ns_pk", 0, "RANGE", 0, 4)
    assert bob.execute_command("SSM.PREFIX.FETCH", "ns", 0) is None
    with pytest.raises(redis.ResponseError):
        bob.execute_command("STATE.READ", "buf", 0, 4)
    bob.execute_command("KV.PREFIX.DROP", "ns")
    assert alice.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"  # bob's DROP touched his own
    assert kv_stats(bob)[b"kvprefix_hits"] == 0 and kv_stats(bob)[b"kvprefix_misses"] >= 1
    bob.execute_command("PION.STATS", "RESET")
    assert kv_stats(alice)[b"kvprefix_hits"] >= 1  # bob's RESET reset only his ledger
    path = alice.execute_command("V.EXPORT", "ns_pk", "ns_pv", 0, 4, 1, 1, 32).decode()
    with pytest.raises(redis.ResponseError, match="session not found"):
        bob.execute_command("V.EXPORT", "ns_pk", "ns_pv", 0, 4, 1, 1, 32)
    for sid in ("ns_pk", "ns_pv"):
        bob.execute_command("V.CREATE", sid, 32, "VQUANT", "fp16")
        bob.execute_command("V.STOREBATCH", sid, 0, 0, 4, data)
    theirs = bob.execute_command("V.EXPORT", "ns_pk", "ns_pv", 0, 4, 1, 1, 32).decode()
    assert os.path.dirname(path) != os.path.dirname(theirs)  # a directory per tenant
    assert os.path.basename(os.path.dirname(path)) == "t-" + b"alice".hex()
    assert os.path.exists(path) and os.path.exists(theirs)  # bob's export swept nothing of alice's


# -- memory ----------------------------------------------------------------------------------------


def test_quota_answers_oom_and_touches_nobody_else(trio):
    _, alice, bob = trio
    alice.set("mine", "x" * 1000)
    blob = "x" * 100_000
    with pytest.raises(redis.exceptions.OutOfMemoryError, match="quota"):
        for i in range(30):
            bob.set(f"k{i}", blob)
    assert bob.get("k0") is not None and bob.dbsize() >= 9  # nothing of bob's was evicted either
    assert bob.delete(*[f"k{i}" for i in range(30)]) >= 9  # reads and deletes still work
    assert bob.set("again", blob)
    assert alice.get("mine") == b"x" * 1000 and alice.set("more", blob)
    info = bob.info("memory")
    assert info["maxmemory"] == 1024 * 1024 and 0 < info["used_memory"] < 1024 * 1024


def test_admin_eviction_never_takes_tenant_data(trio):
    admin, alice, _ = trio
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.config_set("maxmemory", "2mb")
    for i in range(20):
        alice.set(f"t{i}", "y" * 200_000)  # 4 MB of tenant data: not the admin's budget
    for i in range(40):
        admin.set(f"a{i}", "z" * 100_000)
    assert alice.dbsize() == 20
    assert admin.dbsize() < 40  # the admin's own keys were evicted to fit


# -- persistence -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_tenant_data_survives_kill9_and_snapshot(tmp_path):
    flags = ("--requirepass", ADMIN_PW, "--tenant", "alice:apw", "--tenant", "bob:bpw", "--appendfsync", "always")
    proc = ProcessServer(tmp_path / "data", *flags).start()
    try:
        alice = connect(proc, "alice", "apw")
        fill(alice)
        alice.execute_command("SSM.PREFIX.STORE", "ns", 0, b"blob")
        connect(proc, "bob", "bpw").set("str", "bob")
        proc.kill9()
        proc.start()
        alice, bob = connect(proc, "alice", "apw"), connect(proc, "bob", "bpw")
        assert norm(alice.keys("*")) == ALICE_KEYS and alice.get("str") == b"alice-string"
        assert bob.get("str") == b"bob" and bob.dbsize() == 1
        assert alice.execute_command("SSM.PREFIX.FETCH", "ns", 0) == b"blob"
        assert bob.execute_command("SSM.PREFIX.FETCH", "ns", 0) is None
        connect(proc, None, ADMIN_PW).save()  # the tenants' keys go into the snapshot, the log is cut
        alice.set("after-save", "1")
        proc.kill9()
        proc.start()
        alice = connect(proc, "alice", "apw")
        assert alice.get("str") == b"alice-string" and alice.get("after-save") == b"1"
        alice.execute_command("SELECT", 3)
        assert alice.get("db3key") == b"x"
        assert connect(proc, None, ADMIN_PW).dbsize() == 0
    finally:
        proc.stop()


def test_tenant_data_survives_a_restart(tmp_path):
    flags = ("--requirepass", ADMIN_PW, "--tenant", "alice:apw")
    proc = ProcessServer(tmp_path / "data", *flags).start()
    try:
        connect(proc, "alice", "apw").set("k", "v")
        proc.kill9()
        proc.start()
        assert connect(proc, "alice", "apw").get("k") == b"v"
        proc.stop()
        proc.extra = ["--requirepass", ADMIN_PW]  # alice forgotten: her logged data must not be dropped
        with pytest.raises(RuntimeError, match="exited with 1"):
            proc.start(timeout=20)
        assert "start with the same --tenant list" in proc.log()
    finally:
        proc.stop()


def test_debug_reload_brings_back_every_tenants_keys_once(make_server):
    srv = make_server(requirepass=ADMIN_PW, tenants=TENANTS, enable_debug_command="yes")
    admin, alice = connect(srv, None, ADMIN_PW), connect(srv, "alice", "apw")
    alice.rpush("list", "a", "b")
    alice.sadd("set", "x")
    admin.set("k", "v")
    assert admin.execute_command("DEBUG", "RELOAD") == b"OK"
    assert alice.lrange("list", 0, -1) == [b"a", b"b"] and alice.smembers("set") == {b"x"}
    assert admin.get("k") == b"v" and alice.dbsize() == 2
