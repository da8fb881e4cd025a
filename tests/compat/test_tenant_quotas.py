"""Every byte a tenant causes counts against its quota (issue #13, item 6): keys, K/V rows, STATE
buffers, V.EXPORT files, replies it has not read, and the bytes a request brings. On main a tenant
with quota=10mb wrote 512 MiB of STATE buffers (usage 0) and put 512 MiB of F32 exports of 5 MiB
of rows into /dev/shm."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from tests.compat.test_tenants import ADMIN_PW, connect

OOM = redis.exceptions.OutOfMemoryError


@pytest.fixture
def bob(make_server):
    srv = make_server(requirepass=ADMIN_PW, tenants=("bob:bpw:quota=10mb", "alice:apw"))
    return connect(srv, "bob", "bpw"), connect(srv, "alice", "apw")


def used(client: redis.Redis) -> int:
    return client.info("memory")["used_memory"]


def test_state_buffers_count_and_cannot_pass_the_quota(bob):
    bob, alice = bob
    bob.execute_command("STATE.ALLOC", "a", 4 * 1024 * 1024)
    assert used(bob) >= 4 * 1024 * 1024
    with pytest.raises(OOM, match="tenant 'bob'.*STATE buffer"):
        bob.execute_command("STATE.ALLOC", "b", 8 * 1024 * 1024)  # 4 + 8 > 10 MB
    for i in range(3):  # one buffer after another may not creep past it either
        try:
            bob.execute_command("STATE.ALLOC", f"c{i}", 2 * 1024 * 1024)
        except OOM:
            break
    assert used(bob) <= 10 * 1024 * 1024
    assert alice.execute_command("STATE.ALLOC", "big", 64 * 1024 * 1024) == b"OK"  # no quota: no limit


def test_exports_count_and_cannot_pass_the_quota(bob):
    bob, _ = bob
    rows = np.ones((256, 1024), np.float32)  # 256 tokens of 8 heads x 128: 0.5 MB as fp16
    for sid in ("ns_pk", "ns_pv"):
        bob.execute_command("V.CREATE", sid, 1024, "VQUANT", "fp16")
        for layer in range(4):
            bob.execute_command("V.STOREBATCH", sid, layer, 0, 256, rows.tobytes(), "FMT", "F32")
    base = used(bob)
    bob.execute_command("V.EXPORT", "ns_pk", "ns_pv", 0, 256, 4, 8, 128)  # 4 MB fp16
    assert used(bob) >= base + 4 * 1024 * 1024
    with pytest.raises(OOM, match="export file"):
        bob.execute_command("V.EXPORT", "ns_pk", "ns_pv", 0, 256, 4, 8, 128, "DTYPE", "F32")  # 8 MB more


def test_a_request_that_would_pass_the_quota_is_refused_before_it_runs(bob):
    bob, _ = bob
    bob.set("k", "x" * (6 * 1024 * 1024))
    with pytest.raises(OOM, match="tenant 'bob'"):
        bob.set("k2", "y" * (6 * 1024 * 1024))  # under the quota before it, over after it
    assert bob.exists("k2") == 0


def test_search_indexes_count_and_cannot_pass_the_quota(bob):
    """An index costs more than the keys it covers: 1,000 distinct words make a 6 KB hash and
    about 120 KB of postings. Keys alone would fit 1,600 times in 10 MB; the index does not."""
    bob, alice = bob
    words = " ".join(f"w{i}" for i in range(1000))
    for client in (bob, alice):
        client.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", 1, "d:", "SCHEMA", "body", "TEXT")
    stored = 0
    with pytest.raises(OOM, match="tenant 'bob'"):
        for i in range(200):
            bob.hset(f"d:{i}", "body", words)
            stored += 1
    assert 10 < stored < 100
    bob.execute_command("FT.SEARCH", "idx", "w1", "LIMIT", 0, 0)  # the index has caught up
    assert used(bob) <= 10 * 1024 * 1024 + 256 * 1024  # at most one document's postings past it
    assert bob.execute_command("FT.DROPINDEX", "idx") == b"OK"
    bob.hset("after-drop", "body", words)  # dropping the index gave its bytes back
    for i in range(200):  # another tenant's index is its own: alice has no quota
        alice.hset(f"d:{i}", "body", words)
    assert alice.execute_command("FT.SEARCH", "idx", "w1", "LIMIT", 0, 0)[0] == 200


def test_warm_attention_views_count_and_are_not_kept_past_the_quota(bob):
    """ATTEND.PREFIX.STORE keeps the rows (fp32, in the V-store) and a warm view of them (another
    copy): both are the tenant's bytes. A view the quota has no room for serves its query only."""
    bob, _ = bob
    side = np.ones((2, 2048, 64), np.float32)  # 1 MiB a side: rows 2 MiB, warm view 2 MiB
    bob.execute_command("ATTEND.PREFIX.STORE", "p", 0, 2, 2048, 64, side.tobytes(), side.tobytes())
    assert used(bob) >= 4 * 1024 * 1024
    assert bob.execute_command("ATTEND.PREFIX.LOOKUP", "p", 0) == b"HIT"
    big = np.ones((2, 4096, 64), np.float32)  # rows fit (4 + 4 MiB), a warm view of them does not
    bob.execute_command("ATTEND.PREFIX.STORE", "p", 1, 2, 4096, 64, big.tobytes(), big.tobytes())
    assert bob.execute_command("ATTEND.PREFIX.LOOKUP", "p", 1) == b"COLD"
    assert used(bob) <= 10 * 1024 * 1024
    assert bob.execute_command("KV.PREFIX.WARM", "p", 2, 64) == b"1 over_budget=1"
    with pytest.raises(OOM, match="tenant 'bob'"):
        bob.execute_command("ATTEND.PREFIX.STORE", "p", 2, 2, 4096, 64, big.tobytes(), big.tobytes())
