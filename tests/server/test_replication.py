"""Replication between Pion processes: full and partial resync, the stream, WAIT, ROLE, INFO,
read-only replicas, kill -9 of either side, promotion, masterauth, and the K/V engine's rows,
prefixes, manifests and staged stores on the replica."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import redis
from tests.support.servers import ProcessServer

DIM, TOKENS = 64, 32


def wait_until(check, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def link_up(r: redis.Redis) -> bool:
    return r.info("replication").get("master_link_status") == "up"


def store_prefix(r: redis.Redis, ns: str, layers: int = 2, seed: int = 0) -> dict:
    """A staged K/V store (register, rows, recurrent state, publish), as the prompt cache does."""
    rng = np.random.default_rng(seed)
    manifest = json.dumps({"n_layers": layers, "token_count": TOKENS, "state_layers": [0]})
    r.execute_command("KV.PREFIX.REGISTER", ns, DIM, "fp32", "PREFILL_MS", 100, "MANIFEST", manifest, "STAGE", "t1")
    rows = {}
    for layer in range(layers):
        for side in ("_pk", "_pv"):
            data = rng.standard_normal((TOKENS, DIM)).astype(np.float32)
            r.execute_command("V.STOREBATCH", ns + side, layer, 0, TOKENS, data.tobytes(), "TOKEN", "t1")
            rows[(side, layer)] = data
    r.execute_command("SSM.PREFIX.STORE", ns, 0, b"state-" + ns.encode() * 100, "TOKEN", "t1")
    assert r.execute_command("KV.PREFIX.PUBLISH", ns, "t1") == b"OK"
    return {"rows": rows, "manifest": manifest.encode()}


def check_prefix(r: redis.Redis, ns: str, stored: dict) -> None:
    assert r.execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT"
    assert r.execute_command("KV.PREFIX.MANIFEST", ns) == stored["manifest"]
    for (side, layer), data in stored["rows"].items():
        got = r.execute_command("V.FETCH", ns + side, layer, "RANGE", 0, TOKENS, "FMT", "RAW")
        assert np.frombuffer(got, dtype=np.float32).reshape(TOKENS, DIM).tobytes() == data.tobytes()
    assert r.execute_command("SSM.PREFIX.FETCH", ns, 0) == b"state-" + ns.encode() * 100


def fill(r: redis.Redis, prefix: str, n: int) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.set(f"{prefix}:{i}", i)
    pipe.execute()


@pytest.fixture
def cluster(tmp_path):
    started: list[ProcessServer] = []

    def start(name: str, *extra: str, port: int | None = None) -> ProcessServer:
        srv = ProcessServer(tmp_path / name, *extra, port=port).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def test_full_then_stream_then_wait_and_read_only(cluster):
    primary = cluster("a")
    rp = redis.Redis(port=primary.port, socket_timeout=30)
    # before the replica exists: strings (one over the arena threshold), containers, TTLs, K/V
    rp.set("s", "v")
    rp.set("big", b"B" * (3 * 1024 * 1024))
    rp.hset("h", mapping={"f1": "1", "f2": "2"})
    rp.rpush("l", *range(10))
    rp.zadd("z", {"a": 1, "b": 2})
    rp.set("ttl", "x", px=600_000)
    rp.select(3)
    rp.set("db3", "three")
    rp.select(0)
    before = store_prefix(rp, "ns-before")
    fill(rp, "k", 2000)
    replica = cluster("b", "--replicaof", "127.0.0.1", str(primary.port))
    rr = redis.Redis(port=replica.port, socket_timeout=30)
    wait_until(lambda: link_up(rr), what="the replica's link")
    # after the full sync: the stream, including a MULTI/EXEC and K/V rows
    with rp.pipeline(transaction=True) as pipe:
        pipe.incr("counter").lpush("l", "head").execute()
    after = store_prefix(rp, "ns-after", seed=1)
    rp.delete("s")
    assert rp.wait(1, 10_000) == 1
    assert rr.get("s") is None and rr.get("big") == b"B" * (3 * 1024 * 1024)
    assert rr.hgetall("h") == {b"f1": b"1", b"f2": b"2"}
    assert rr.lrange("l", 0, -1) == [b"head"] + [str(i).encode() for i in range(10)]
    assert rr.zrange("z", 0, -1, withscores=True) == [(b"a", 1.0), (b"b", 2.0)]
    assert 0 < rr.pttl("ttl") <= 600_000 and rr.get("counter") == b"1"
    assert redis.Redis(port=replica.port, db=3).get("db3") == b"three"
    assert rr.dbsize() == rp.dbsize() and rr.get("k:1999") == b"1999"
    check_prefix(rr, "ns-before", before)
    check_prefix(rr, "ns-after", after)
    with pytest.raises(redis.ReadOnlyError, match="You can't write against a read only replica."):
        rr.set("nope", 1)
    with pytest.raises(redis.ResponseError, match="WAIT cannot be used with replica instances"):
        rr.wait(1, 10)
    # ROLE and INFO name the same offsets on both sides once acknowledged
    wait_until(lambda: rp.execute_command("ROLE")[2] and
               int(rp.execute_command("ROLE")[2][0][2]) == rp.execute_command("ROLE")[1], what="the ack")
    role_p, role_r = rp.execute_command("ROLE"), rr.execute_command("ROLE")
    assert role_p[0] == b"master" and role_p[2][0][1] == str(replica.port).encode()
    assert role_r[:4] == [b"slave", b"127.0.0.1", primary.port, b"connected"] and role_r[4] == role_p[1]
    ip, ir = rp.info("replication"), rr.info("replication")
    assert ip["role"] == "master" and ip["connected_slaves"] == 1 and ip["slave0"]["state"] == "online"
    assert ir["role"] == "slave" and ir["master_repl_offset"] == ip["master_repl_offset"]
    assert ir["master_replid"] == ip["master_replid"] and ip["repl_backlog_active"] == 1
    assert rp.info("stats")["sync_full"] == 1


def test_replica_killed_catches_up_with_a_partial_resync_and_keeps_what_it_acked(cluster):
    primary = cluster("a", "--repl-backlog-size", "8mb")
    rp = redis.Redis(port=primary.port, socket_timeout=30)
    replica = cluster("b", "--replicaof", "127.0.0.1", str(primary.port))
    rr = redis.Redis(port=replica.port, socket_timeout=30)
    wait_until(lambda: link_up(rr), what="the replica's link")
    fill(rp, "a", 500)
    stored = store_prefix(rp, "ns1")
    assert rp.wait(1, 10_000) == 1
    replica.kill9()
    fill(rp, "b", 500)  # written while the replica is down: in the backlog
    replica.start()
    wait_until(lambda: link_up(rr), what="the replica's link after the restart")
    assert rp.wait(1, 10_000) == 1
    assert rr.get("a:499") == b"499" and rr.get("b:499") == b"499" and rr.dbsize() == rp.dbsize()
    check_prefix(rr, "ns1", stored)
    stats = rp.info("stats")
    assert stats["sync_full"] == 1 and stats["sync_partial_ok"] == 1, stats
    # the replica alone (primary stopped): what it acknowledged is on its own disk
    fill(rp, "c", 300)
    assert rp.wait(1, 10_000) == 1
    primary.stop()
    replica.kill9()
    replica.start()
    assert rr.get("c:299") == b"299" and rr.get("a:0") == b"0"
    check_prefix(rr, "ns1", stored)
    assert rr.info("replication")["master_link_status"] == "down"


def test_a_replica_far_behind_gets_a_full_resync(cluster):
    primary = cluster("a", "--repl-backlog-size", "16kb")
    rp = redis.Redis(port=primary.port, socket_timeout=30)
    replica = cluster("b", "--replicaof", "127.0.0.1", str(primary.port))
    rr = redis.Redis(port=replica.port, socket_timeout=30)
    wait_until(lambda: link_up(rr), what="the replica's link")
    fill(rp, "a", 100)
    assert rp.wait(1, 10_000) == 1
    replica.kill9()
    rp.delete("a:0")
    fill(rp, "b", 3000)  # far more than the backlog holds
    replica.start()
    wait_until(lambda: link_up(rr), what="the link after the restart")
    assert rp.wait(1, 10_000) == 1
    assert rr.get("a:0") is None and rr.get("b:2999") == b"2999" and rr.dbsize() == rp.dbsize()
    stats = rp.info("stats")
    assert stats["sync_full"] == 2 and stats["sync_partial_err"] == 1


def test_primary_killed_promote_the_replica_and_the_old_primary_follows_it(cluster):
    primary = cluster("a")
    rp = redis.Redis(port=primary.port, socket_timeout=30)
    replica = cluster("b", "--replicaof", "127.0.0.1", str(primary.port))
    rr = redis.Redis(port=replica.port, socket_timeout=30)
    wait_until(lambda: link_up(rr), what="the replica's link")
    fill(rp, "a", 300)
    stored = store_prefix(rp, "ns1")
    assert rp.wait(1, 10_000) == 1
    primary.kill9()
    wait_until(lambda: not link_up(rr), what="the link to go down")
    assert rr.get("a:299") == b"299"
    assert rr.replicaof("NO", "ONE")
    assert rr.execute_command("ROLE")[0] == b"master"
    rr.set("after-failover", "yes")
    # the old primary comes back as a replica of the new one (its own data is replaced)
    primary.extra = ["--replicaof", "127.0.0.1", str(replica.port)]
    primary.start()
    wait_until(lambda: link_up(rp), what="the old primary's link")
    assert rr.wait(1, 10_000) == 1
    assert rp.get("after-failover") == b"yes" and rp.get("a:0") == b"0"
    check_prefix(rp, "ns1", stored)


def test_three_servers_wait_counts_both_replicas_and_redis_py_reads_each(cluster):
    primary = cluster("a")
    rp = redis.Redis(port=primary.port, socket_timeout=30)
    replicas = [cluster(name, "--replicaof", "127.0.0.1", str(primary.port)) for name in ("b", "c")]
    clients = [redis.Redis(port=srv.port, socket_timeout=30) for srv in replicas]
    for client in clients:
        wait_until(lambda client=client: link_up(client), what="a replica's link")
    fill(rp, "k", 1000)
    rp.hset("h", "f", "v")
    assert rp.wait(2, 10_000) == 2
    assert rp.wait(3, 200) == 2  # only two exist: the timeout answers the count
    rp.set("aof", "1")
    assert rp.execute_command("WAITAOF", 1, 2, 10_000) == [1, 2]
    assert rp.execute_command("WAITAOF", 0, 3, 100) == [1, 2]
    for client in clients:
        assert client.get("k:999") == b"999" and client.hget("h", "f") == b"v"
        assert client.dbsize() == rp.dbsize()
    assert rp.info("replication")["connected_slaves"] == 2
    assert len(rp.execute_command("ROLE")[2]) == 2


def test_masterauth_and_replicaof_at_runtime(cluster):
    primary = cluster("a", "--requirepass", "s3cret")
    rp = redis.Redis(port=primary.port, password="s3cret", socket_timeout=30)
    rp.set("x", "1")
    replica = cluster("b", "--masterauth", "wrong")
    rr = redis.Redis(port=replica.port, socket_timeout=30)
    assert rr.execute_command("ROLE")[0] == b"master"
    assert rr.replicaof("127.0.0.1", primary.port)
    wait_until(lambda: "refused masterauth" in replica.log(), what="the refusal in the log")
    assert rr.info("replication")["master_link_status"] == "down" and rr.get("x") is None
    assert rr.config_set("masterauth", "s3cret")  # the next retry uses it
    wait_until(lambda: link_up(rr), what="the link with masterauth")
    assert rr.get("x") == b"1"
    assert rr.execute_command("REPLICAOF", "127.0.0.1", primary.port) == b"OK Already connected to specified master"
    assert rp.wait(1, 10_000) == 1
    assert rr.replicaof("NO", "ONE") and rr.set("local", "ok")
    with pytest.raises(redis.ResponseError, match="Invalid master port"):
        rr.replicaof("127.0.0.1", 70000)


def test_replicaof_in_the_config_file_and_as_a_flag(tmp_path):
    from pion.cli.server_main import build_settings

    conf = tmp_path / "pion.conf"
    conf.write_text("replicaof 10.0.0.5 1974\nmasteruser repl\nmasterauth pw\nrepl-backlog-size 4mb\n")
    settings = build_settings([str(conf)])
    assert (settings.replicaof, settings.masteruser, settings.masterauth) == ("10.0.0.5 1974", "repl", "pw")
    assert settings.repl_backlog_size == 4 * 1024 * 1024
    assert build_settings(["--replicaof", "h", "7000"]).replicaof == "h 7000"
    assert build_settings(["--slaveof", "h", "7000"]).replicaof == "h 7000"  # the alias sets the same field
    assert build_settings(["--replicaof", "no", "one"]).replicaof == ""


def test_masteruser_authenticates_as_an_acl_user(cluster):
    primary = cluster("a", "--requirepass", "s3cret")
    rp = redis.Redis(port=primary.port, password="s3cret", socket_timeout=30)
    assert rp.acl_setuser("repl", enabled=True, passwords=["+replpw"],
                          commands=["+psync", "+replconf", "+ping", "+sync"])
    rp.set("x", "1")
    replica = cluster("b", "--replicaof", "127.0.0.1", str(primary.port), "--masteruser", "repl",
                      "--masterauth", "replpw")
    rr = redis.Redis(port=replica.port, socket_timeout=30)
    wait_until(lambda: link_up(rr), what="the link as user repl")
    rp.set("y", "2")
    assert rp.wait(1, 10_000) == 1 and rr.get("x") == b"1" and rr.get("y") == b"2"
    assert any("user=repl" in line for line in rp.execute_command("CLIENT", "LIST").decode().splitlines())


def test_a_full_resync_whose_own_snapshot_fails_is_done_again_not_continued(cluster, monkeypatch):
    """The replica loads the primary's data, then its own snapshot of it fails (a full disk):
    its files still hold the old data set, so the stream must not go on on top of them. The next
    attempt is a full resync again; killed afterwards, the replica has the whole data set."""
    primary = cluster("a", "--repl-backlog-size", "8mb")
    rp = redis.Redis(port=primary.port, socket_timeout=30)
    fill(rp, "a", 300)
    monkeypatch.setenv("PION_FAULTS", "snapshot.write=ENOSPC:1")
    replica = cluster("b", "--replicaof", "127.0.0.1", str(primary.port))
    monkeypatch.delenv("PION_FAULTS")
    rr = redis.Redis(port=replica.port, socket_timeout=30)
    wait_until(lambda: link_up(rr), what="the replica's link")
    fill(rp, "b", 100)
    assert rp.wait(1, 10_000) == 1
    assert rp.info("stats")["sync_full"] == 2  # the first load was not continued
    replica.kill9()
    replica.extra = []  # restart it alone: its own files must hold everything
    replica.start()
    assert rr.get("a:0") == b"0" and rr.get("a:299") == b"299" and rr.get("b:99") == b"99"
    assert rr.dbsize() == 400
