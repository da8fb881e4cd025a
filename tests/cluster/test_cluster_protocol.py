"""The Redis Cluster client protocol on Pion nodes: hashing equal to Redis's, topology replies,
redirects (MOVED/ASK/CROSSSLOT/TRYAGAIN/CLUSTERDOWN), resharding with SETSLOT + MIGRATE, the
config file, and redis-py's ``RedisCluster`` unchanged against 1 and 3 nodes."""

from __future__ import annotations

import random

import pytest
import redis
from redis.cluster import RedisCluster

from pion.protocol.keyslot import key_slot
from tests.support.clusters import PionThreadCluster, wait_agreed

EDGE_KEYS = [b"", b"{", b"}", b"{}", b"{}a", b"a{}", b"foo{}{bar}", b"foo{{bar}}zap", b"foo{bar}{zap}",
             b"{user1000}.following", b"{user1000}.followers", b"a{b", b"a}b{c}", b"\x00{\xff}", b"{{}}"]


def _random_keys(count: int) -> list[bytes]:
    rng = random.Random(22)
    alphabet = b"ab{}xyz:\x00\xff"
    keys = list(EDGE_KEYS)
    while len(keys) < count:
        keys.append(bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) if rng.random() < 0.5
                    else rng.randbytes(rng.randint(1, 24)))
    return keys


def test_keyslot_equals_redis_on_10k_keys(pion1, redis3):
    keys = _random_keys(10_000)
    ref = redis.Redis(port=redis3.ports[0])
    pion = redis.Redis(port=pion1.ports[0])
    pipe_ref, pipe_pion = ref.pipeline(transaction=False), pion.pipeline(transaction=False)
    for key in keys:
        pipe_ref.execute_command("CLUSTER", "KEYSLOT", key)
        pipe_pion.execute_command("CLUSTER", "KEYSLOT", key)
    expected = pipe_ref.execute()
    assert pipe_pion.execute() == expected
    assert [key_slot(k) for k in keys] == expected


@pytest.mark.parametrize("protocol", [2, 3])
def test_one_node_topology_replies(pion1, protocol):
    r = redis.Redis(port=pion1.ports[0], protocol=protocol)
    myid = r.execute_command("CLUSTER", "MYID")
    assert len(myid) == 40
    slots = r.execute_command("CLUSTER SLOTS") if protocol == 3 else r.execute_command("CLUSTER", "SLOTS")
    assert slots == [[0, 16383, [b"127.0.0.1", pion1.ports[0], myid]]]
    shards = r.execute_command("CLUSTER", "SHARDS")
    shard = shards[0] if protocol == 3 else dict(zip(shards[0][::2], shards[0][1::2], strict=True))
    assert shard[b"slots"] == [0, 16383]
    node = shard[b"nodes"][0]
    node = node if protocol == 3 else dict(zip(node[::2], node[1::2], strict=True))
    assert node[b"id"] == myid and node[b"port"] == pion1.ports[0] and node[b"role"] == b"master"
    info = r.execute_command("CLUSTER", "INFO")
    assert b"cluster_state:ok" in info and b"cluster_slots_assigned:16384" in info
    assert r.info("cluster")["cluster_enabled"] == 1
    line = r.execute_command("CLUSTER", "NODES").decode().split("\n")[0].split()
    assert line[0] == myid.decode() and line[2] == "myself,master" and line[8] == "0-16383"


def test_errors_match_redis(pion1, redis3):
    """Error replies Redis 7.0.15 gives for bad CLUSTER calls, compared text for text."""
    calls = [
        ("CLUSTER", "ADDSLOTS", "1"), ("CLUSTER", "ADDSLOTS", "99999"), ("CLUSTER", "ADDSLOTSRANGE", "5", "2"),
        ("CLUSTER", "SETSLOT", "1", "IMPORTING", "nosuch"), ("CLUSTER", "SETSLOT", "1", "BOGUS"),
        ("CLUSTER", "MEET", "1.2.3.4", "x"), ("CLUSTER", "FORGET", "nosuch"), ("CLUSTER", "COUNTKEYSINSLOT", "99999"),
        ("CLUSTER", "GETKEYSINSLOT", "1", "-1"), ("CLUSTER", "KEYSLOT"), ("MSET", "a", "1", "b", "2"),
        ("CLUSTER", "SETSLOT", "1", "NODE", "nosuch"), ("SELECT", "1"), ("CLUSTER", "COUNTKEYSINSLOT", "x"),
    ]
    for protocol in (2, 3):
        pion, ref = redis.Redis(port=pion1.ports[0], protocol=protocol), redis.Redis(port=redis3.ports[0], protocol=protocol)
        for call in calls:
            answers = []
            for client in (ref, pion):
                try:
                    answers.append(("ok", client.execute_command(*call)))
                except redis.ResponseError as exc:
                    answers.append(("err", str(exc)))
            assert answers[1] == answers[0], call
        with pytest.raises(redis.ResponseError, match="not supported"):
            pion.execute_command("CLUSTER", "FAILOVER")
        with pytest.raises(redis.ResponseError, match="myself"):
            pion.execute_command("CLUSTER", "FORGET", pion.execute_command("CLUSTER", "MYID"))


def test_redis_py_cluster_client_one_node(pion1):
    rc = RedisCluster(host="127.0.0.1", port=pion1.ports[0])
    try:
        assert rc.set("alpha", "1") and rc.get("alpha") == b"1"
        assert rc.mset_nonatomic({"a": 1, "b": 2, "c": 3}) and rc.mget_nonatomic(["a", "b", "c"]) == [b"1", b"2", b"3"]
        assert rc.mset({"{t}1": "x", "{t}2": "y"}) and rc.mget(["{t}1", "{t}2"]) == [b"x", b"y"]
        with pytest.raises(redis.exceptions.RedisClusterException):
            rc.mget(["a", "b"])  # redis-py refuses cross-slot before sending
        pipe = rc.pipeline()
        pipe.set("p", 1).incr("p").get("p")
        assert pipe.execute() == [True, 2, b"2"]
        assert rc.keyslot("foo") == 12182 == rc.cluster_keyslot("foo")
        assert rc.hset("h{x}", mapping={"f": "v"}) == 1 and rc.hgetall("h{x}") == {b"f": b"v"}
        assert rc.cluster_countkeysinslot(rc.keyslot("{t}1")) == 2
        assert sorted(rc.cluster_get_keys_in_slot(rc.keyslot("{t}1"), 10)) == ["{t}1", "{t}2"]
        assert rc.eval("return redis.call('get', KEYS[1])", 1, "alpha") == b"1"
    finally:
        rc.close()


def test_crossslot_where_redis_gives_it(pion1, redis3):
    """Multi-key commands, MULTI/EXEC and scripts across slots: same reply as a Redis node."""
    pion = redis.Redis(port=pion1.ports[0])
    ref_nodes = [redis.Redis(port=p) for p in redis3.ports]
    calls = [("MSET", "a", "1", "b", "2"), ("DEL", "a", "b"), ("SUNIONSTORE", "{x}d", "{x}a", "{y}b"),
             ("EVAL", "return 1", "2", "a", "b"), ("RENAME", "{q}a", "{r}b"), ("BLPOP", "a", "b", "0.01"),
             ("MGET", "{z}a", "{z}b"), ("EVAL", "return 1", "0")]
    for call in calls:
        for ref in ref_nodes:  # the node that owns the first key answers without a redirect
            try:
                want = ("ok", ref.execute_command(*call))
            except redis.exceptions.MovedError:
                continue
            except redis.ResponseError as exc:
                want = ("err", str(exc))
            break
        try:
            got = ("ok", pion.execute_command(*call))
        except redis.ResponseError as exc:
            got = ("err", str(exc))
        assert got == want, call
    pipe = pion.pipeline(transaction=True)
    pipe.set("a", 1).set("b", 2)
    with pytest.raises(redis.exceptions.ClusterCrossSlotError):  # a bare -CROSSSLOT, as a Redis node answers
        pipe.execute()


def test_three_nodes_redirects_and_redis_py(pion3):
    ports = pion3.ports
    direct = [redis.Redis(port=p) for p in ports]
    slot = key_slot("foo")  # 12182: the third node's
    owner = next(i for i, (s, e) in enumerate([(0, 5460), (5461, 10922), (10923, 16383)]) if s <= slot <= e)
    other = (owner + 1) % 3
    with pytest.raises(redis.exceptions.MovedError, match=f"{slot} 127.0.0.1:{ports[owner]}"):
        direct[other].set("foo", "bar")
    rc = RedisCluster(host="127.0.0.1", port=ports[0])
    try:
        values = {f"key:{i}": str(i) for i in range(300)}
        rc.mset_nonatomic(values)
        assert rc.mget_nonatomic(list(values)) == [v.encode() for v in values.values()]
        assert all(direct[i].dbsize() > 50 for i in range(3))  # spread over all three
        assert sum(d.dbsize() for d in direct) == 300
        assert len(rc.get_nodes()) == 3
        pipe = rc.pipeline()
        for key in list(values)[:50]:
            pipe.incr(key)
        assert pipe.execute() == [int(v) + 1 for v in list(values.values())[:50]]
    finally:
        rc.close()


def test_reshard_with_setslot_and_migrate(pion3):
    """The steps ``redis-cli --cluster reshard`` takes: IMPORTING, MIGRATING, ASK while keys move,
    MIGRATE ... KEYS, then NODE on every node; redis-py follows ASK and MOVED throughout."""
    ports = pion3.ports
    src, dst = redis.Redis(port=ports[0]), redis.Redis(port=ports[1])
    src_id, dst_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
    tag = next(f"t{i}" for i in range(1000) if key_slot(f"t{i}") <= 5460)
    slot = key_slot(tag)
    keys = [f"{{{tag}}}:{i}" for i in range(10)]
    for key in keys:
        src.set(key, key)
    rc = RedisCluster(host="127.0.0.1", port=ports[2])
    try:
        assert dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        assert src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        with pytest.raises(redis.exceptions.AskError, match=f"{slot} 127.0.0.1:{ports[1]}"):
            src.get(f"{{{tag}}}:absent")
        assert src.get(keys[0]) == keys[0].encode()  # present here: still served
        src.execute_command("MIGRATE", "127.0.0.1", ports[1], "", 0, 5000, "KEYS", *keys[:5])
        assert rc.get(keys[0]) == keys[0].encode()  # ASK followed to the importer
        with pytest.raises(redis.exceptions.MovedError, match=f"{slot}"):
            dst.get(keys[0])  # without ASKING the importer redirects
        pipe = dst.pipeline(transaction=False)
        pipe.execute_command("ASKING").get(keys[0])
        assert pipe.execute() == [True, keys[0].encode()]
        pipe = dst.pipeline(transaction=False)
        pipe.execute_command("ASKING").mget(keys[0], keys[9])
        with pytest.raises(redis.exceptions.TryAgainError):
            pipe.execute()
        src.execute_command("MIGRATE", "127.0.0.1", ports[1], "", 0, 5000, "REPLACE", "KEYS", *keys[5:])
        assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
        for port in ports:
            redis.Redis(port=port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        wait_agreed([redis.Redis(port=p) for p in ports])
        with pytest.raises(redis.exceptions.MovedError, match=f"{slot} 127.0.0.1:{ports[1]}"):
            src.get(keys[0])
        assert [rc.get(k) for k in keys] == [k.encode() for k in keys]
        assert dst.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 10
    finally:
        rc.close()


def test_migrate_copy_and_auth(tmp_path):
    cluster = PionThreadCluster(tmp_path, 2, requirepass="s3cret", masterauth="s3cret")
    try:
        a, b = (redis.Redis(port=p, password="s3cret") for p in cluster.ports)
        key = next(f"k{i}" for i in range(1000) if key_slot(f"k{i}") <= 8191)
        slot = key_slot(key)
        a.set(key, "v")
        b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", a.execute_command("CLUSTER", "MYID"))
        a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", b.execute_command("CLUSTER", "MYID"))
        a.execute_command("MIGRATE", "127.0.0.1", cluster.ports[1], key, 0, 5000, "COPY", "AUTH", "s3cret")
        assert a.get(key) == b"v"  # COPY keeps it here
        pipe = b.pipeline(transaction=False)
        pipe.execute_command("ASKING").get(key)
        assert pipe.execute() == [True, b"v"]
    finally:
        cluster.stop()


def test_topology_survives_restart(tmp_path):
    from tests.support.clusters import PionProcessCluster

    cluster = PionProcessCluster(tmp_path, 2)
    try:
        r = redis.Redis(port=cluster.ports[0])
        before = sorted(r.execute_command("CLUSTER", "SLOTS"))
        r.set("{a}x", 1) if key_slot("a") <= 8191 else redis.Redis(port=cluster.ports[1]).set("{a}x", 1)
        cluster.nodes[0].kill9()
        cluster.nodes[0].start()
        wait_agreed([redis.Redis(port=p) for p in cluster.ports])
        assert sorted(r.execute_command("CLUSTER", "SLOTS")) == before
        conf = (tmp_path / "node0" / "nodes.conf").read_text()
        assert "myself,master" in conf and "vars currentEpoch" in conf
    finally:
        cluster.stop()


def test_msetex_keys_are_hashed_like_mset(pion1):
    """MSETEX (Redis 8.4, no reference node here) finds its keys from numkeys: two slots answer
    CROSSSLOT, one hash tag is served, and COMMAND GETKEYS lists the keys as cluster clients read them."""
    pion = redis.Redis(port=pion1.ports[0])
    with pytest.raises(redis.ResponseError, match="hash to the same slot"):  # -CROSSSLOT Keys in request ...
        pion.execute_command("MSETEX", 2, "a", "1", "b", "2", "EX", 10)
    assert pion.execute_command("MSETEX", 2, "{t}a", "1", "{t}b", "2", "EX", 10) == 1
    assert pion.command_getkeys("MSETEX", 2, "{t}a", "1", "{t}b", "2", "NX") == ["{t}a", "{t}b"]
