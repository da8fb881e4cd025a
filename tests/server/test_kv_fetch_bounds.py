"""V.FETCH cannot be made to allocate more than was stored (issue #13, item 3): a range with rows
never stored is refused (not zero-filled), a reply is bounded by its total size over every layer,
and it is counted with the replies other clients still hold against maxmemory and the tenant
quota before anything is rendered."""

from __future__ import annotations

import numpy as np
import pytest
import redis
from tests.compat.test_tenants import ADMIN_PW, connect

TOP = 1 << 24  # MAX_TOKENS


def _rss_kb() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))


def test_the_sparse_session_attack_is_refused_without_allocating(r):
    """Issue #13: two 32-byte rows at position 2^24-1 and BATCH 0 16777216 2 made a 1 GiB reply
    and +1 GB of server memory in 2 s."""
    r.execute_command("V.CREATE", "sparse", 8, "VQUANT", "fp32")
    for layer in (0, 1):
        r.execute_command("V.STOREBATCH", "sparse", layer, TOP - 1, 1, np.ones(8, np.float32).tobytes())
    before = _rss_kb()
    with pytest.raises(redis.ResponseError, match="does not hold rows"):
        r.execute_command("V.FETCH", "sparse", "BATCH", 0, TOP, 2)
    with pytest.raises(redis.ResponseError, match="does not hold rows"):
        r.execute_command("V.FETCH", "sparse", 0, "RANGE", 0, TOP)
    assert _rss_kb() - before < 64 * 1024
    got = r.execute_command("V.FETCH", "sparse", "BATCH", TOP - 1, TOP, 2)  # what was stored is served
    assert got == [np.ones(8, np.float32).tobytes()] * 2


def test_many_layers_of_one_row_cannot_make_a_huge_reply(r):
    r.execute_command("V.CREATE", "wide", 8, "VQUANT", "fp32")
    for layer in range(0, 4096, 512):
        r.execute_command("V.STOREBATCH", "wide", layer, TOP - 1, 1, np.ones(8, np.float32).tobytes())
    with pytest.raises(redis.ResponseError, match="does not hold rows"):
        r.execute_command("V.FETCH", "wide", "BATCH", 0, TOP)


def test_a_reply_is_bounded_by_its_total_size_not_per_layer(make_server):
    srv = make_server(proto_max_bulk_len=1024 * 1024)
    r = redis.Redis(port=srv.port)
    r.execute_command("V.CREATE", "s", 256, "VQUANT", "fp32")
    rows = np.ones((600, 256), np.float32)  # 600 KB a layer: each under the limit, the pair over it
    for layer in (0, 1):
        r.execute_command("V.STOREBATCH", "s", layer, 0, 600, rows.tobytes())
    assert len(r.execute_command("V.FETCH", "s", "BATCH", 0, 600, 1)[0]) == rows.nbytes
    with pytest.raises(redis.ResponseError, match="more than proto-max-bulk-len"):
        r.execute_command("V.FETCH", "s", "BATCH", 0, 600)


def test_a_reply_that_would_pass_maxmemory_is_refused(make_server):
    srv = make_server(maxmemory=6 * 1024 * 1024)
    r = redis.Redis(port=srv.port)
    r.execute_command("V.CREATE", "s", 1024, "VQUANT", "int8")
    rows = np.random.default_rng(1).standard_normal((2048, 1024)).astype(np.float32)
    r.execute_command("V.STOREBATCH", "s", 0, 0, 2048, rows.tobytes())  # ~2 MB int8, 8 MB as F32
    assert len(r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 2048, "FMT", "RAW")) < 3 * 1024 * 1024
    with pytest.raises(redis.exceptions.OutOfMemoryError, match="reply"):
        r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 2048)  # 8 MB of F32: over the 6 MB maxmemory
    assert r.ping()


def test_a_tenants_reply_counts_against_its_quota(make_server):
    srv = make_server(requirepass=ADMIN_PW, tenants=("bob:bpw:quota=8mb",))
    bob = connect(srv, "bob", "bpw")
    bob.execute_command("V.CREATE", "s", 1024, "VQUANT", "int8")
    rows = np.ones((1800, 1024), np.float32)
    bob.execute_command("V.STOREBATCH", "s", 0, 0, 1800, rows.tobytes())  # 1.9 MB held as int8
    assert bob.execute_command("V.FETCH", "s", 0, "RANGE", 0, 500) is not None  # 2 MB reply: fits in 8 MB
    with pytest.raises(redis.exceptions.OutOfMemoryError, match="tenant 'bob'.*the reply"):
        bob.execute_command("V.FETCH", "s", 0, "RANGE", 0, 1800)  # 7.4 MB reply + 1.9 MB of rows: over 8 MiB


def test_the_id_form_still_zero_fills_like_the_reference(r):
    r.execute_command("V.CREATE", "s", 8, "VQUANT", "fp32")
    r.execute_command("V.STOREBATCH", "s", 0, 0, 1, np.ones(8, np.float32).tobytes())
    got = np.frombuffer(r.execute_command("V.FETCH", "s", 0, 0, 5), np.float32)
    assert got[:8].tolist() == [1.0] * 8 and not got[8:].any()
