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
