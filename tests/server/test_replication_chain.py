"""Chained replication: a replica of a replica (P -> M -> S) receives the primary's stream as M
received it, so replication ids and offsets are equal down the chain (Redis's proxied master
stream); S survives kill -9 with a partial resync from M; promoting M keeps S (a partial resync
to M's new id) and cuts both from P."""

from __future__ import annotations

import redis
from tests.server.test_replication import check_prefix, cluster, fill, link_up, store_prefix, wait_until

__all__ = ["cluster"]  # the fixture, imported for the tests below


def _repl(r: redis.Redis) -> dict:
    return r.info("replication")


def _same_offsets(*clients: redis.Redis) -> bool:
    offsets = [_repl(c)["master_repl_offset"] for c in clients]
    return len(set(offsets)) == 1 and offsets[0] > 0


def test_a_replica_of_a_replica(cluster):
    primary = cluster("p", "--repl-backlog-size", "8mb")
    rp = redis.Redis(port=primary.port, socket_timeout=30)
    fill(rp, "before", 300)
    rp3 = redis.Redis(port=primary.port, db=3, socket_timeout=30)
    rp3.set("db3:first", "1")  # the primary's stream is now in database 3 (no SELECT until it changes)
    middle = cluster("m", "--replicaof", "127.0.0.1", str(primary.port), "--repl-backlog-size", "8mb")
    rm = redis.Redis(port=middle.port, socket_timeout=30)
    wait_until(lambda: link_up(rm), what="the middle's link")
    rp3.set("db3:second", "2")
    sub = cluster("s", "--replicaof", "127.0.0.1", str(middle.port))
    rs = redis.Redis(port=sub.port, socket_timeout=30)
    wait_until(lambda: link_up(rs), what="the sub-replica's link")
    rp3.set("db3:third", "3")  # still database 3: the sub-replica must know it from the full sync
    stored = store_prefix(rp, "chained")
    with rp.pipeline(transaction=True) as pipe:
        pipe.incr("counter").set("after", "yes").execute()
    assert rp.wait(1, 10_000) == 1  # the middle: the primary's only replica
    wait_until(lambda: rs.get("after") == b"yes", what="the write at the end of the chain")
    rs3 = redis.Redis(port=sub.port, db=3, socket_timeout=30)
    assert [rs3.get(f"db3:{k}") for k in ("first", "second", "third")] == [b"1", b"2", b"3"]
    assert rs.get("before:299") == b"299" and rs.get("counter") == b"1" and rs.dbsize() == rp.dbsize()
    check_prefix(rs, "chained", stored)
    wait_until(lambda: _same_offsets(rp, rm, rs), what="equal offsets on the three")
    p_info, m_info, s_info = _repl(rp), _repl(rm), _repl(rs)
    assert m_info["role"] == "slave" and m_info["connected_slaves"] == 1 and p_info["connected_slaves"] == 1
    assert m_info["master_replid"] == s_info["master_replid"] == p_info["master_replid"]
    assert s_info["master_port"] == middle.port and s_info["master_link_status"] == "up"
    assert m_info["slave0"]["port"] == sub.port and m_info["slave0"]["state"] == "online"
    assert rs.execute_command("ROLE")[:4] == [b"slave", b"127.0.0.1", middle.port, b"connected"]
    assert rm.info("stats")["sync_full"] == 1

    # kill -9 of the sub-replica: it continues from the middle's backlog
    sub.kill9()
    fill(rp, "while-down", 200)
    sub.start()
    wait_until(lambda: link_up(rs), what="the sub-replica's link after its restart")
    wait_until(lambda: rs.get("while-down:199") == b"199", what="the writes made while it was down")
    assert rm.info("stats")["sync_partial_ok"] == 1 and rm.info("stats")["sync_full"] == 1

    # promote the middle: the sub-replica follows it (a partial resync to its new id), the primary is cut off
    old_id = _repl(rm)["master_replid"]
    assert rm.replicaof("NO", "ONE")
    wait_until(lambda: link_up(rs) and _repl(rs)["master_replid"] == _repl(rm)["master_replid"],
               what="the sub-replica on the promoted middle's new id")
    m_info = _repl(rm)
    assert m_info["role"] == "master" and m_info["master_replid"] != old_id and m_info["master_replid2"] == old_id
    assert rm.info("stats")["sync_partial_ok"] == 2 and rm.info("stats")["sync_full"] == 1
    rm.set("from-middle", "1")
    rp.set("from-primary", "1")
    assert rm.wait(1, 10_000) == 1
    assert rs.get("from-middle") == b"1" and rs.get("from-primary") is None and rm.get("from-primary") is None
    wait_until(lambda: _same_offsets(rm, rs), what="equal offsets on the new pair")
