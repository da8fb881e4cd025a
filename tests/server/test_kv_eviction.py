"""--kv-maxmemory on a live server: LRU whole prefixes, leaves first, pins, logged drops, OOM."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from pion.server.durability.journal import Journal

TOKENS, DIM = 16, 32
PREFIX_BYTES = 2 * TOKENS * DIM * 2  # K and V, one fp16 layer


class Recorder(Journal):
    def __init__(self):
        super().__init__()
        self.records: list[list[list[bytes]]] = []

    def append(self, effects):
        self.records.append([argv for _, argv in effects])
        return super().append(effects)


def put(r, ns: str, chain: list[int] | None = None) -> None:
    extra = ("CHAIN", 4, np.asarray(chain, "<u4").tobytes()) if chain is not None else ()
    r.execute_command("KV.PREFIX.REGISTER", ns, DIM, "fp16", *extra)
    for side in ("_pk", "_pv"):
        r.execute_command("V.STOREBATCH", ns + side, 0, 0, TOKENS, np.ones((TOKENS, DIM), np.float32).tobytes())


def alive(r, ns: str) -> bool:
    return r.execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT"


@pytest.fixture
def budget_server(make_server):
    srv = make_server(kv_maxmemory=3 * PREFIX_BYTES)
    recorder = Recorder()
    srv.call(setattr, srv.server, "journal", recorder)
    srv.recorder = recorder
    return srv


def test_the_least_recently_used_prefix_is_evicted_and_the_drop_logged(budget_server):
    r = redis.Redis(port=budget_server.port)
    for ns in ("a", "b", "c"):
        put(r, ns)
    assert alive(r, "a")  # touch a: b is now the oldest
    put(r, "d")
    assert [alive(r, ns) for ns in "abcd"] == [True, False, True, True]
    info = r.execute_command("KV.PREFIX.INFO").decode()
    assert "vstore_evictions:1\r\n" in info and f"vstore_bytes:{3 * PREFIX_BYTES}\r\n" in info
    record = next(rec for rec in budget_server.recorder.records if rec[0][0] == b"KV.PREFIX.DROP")
    assert record[0] == [b"KV.PREFIX.DROP", b"b"] and record[1][0] == b"V.STOREBATCH"


def test_a_chain_is_evicted_leaf_first_and_pins_hold(budget_server):
    r = redis.Redis(port=budget_server.port)
    put(r, "root", chain=list(range(TOKENS)))
    put(r, "leaf", chain=list(range(TOKENS)) + [7] * 4)
    put(r, "pinned")
    assert r.execute_command("KV.PREFIX.PIN", "pinned") == 1
    assert alive(r, "root")  # the root is touched last, yet it has a child
    put(r, "new")
    assert [alive(r, ns) for ns in ("root", "leaf", "pinned", "new")] == [True, False, True, True]
    put(r, "newer")
    assert [alive(r, ns) for ns in ("root", "pinned", "new", "newer")] == [False, True, True, True]


def test_a_store_that_cannot_fit_is_refused_with_oom(budget_server):
    r = redis.Redis(port=budget_server.port)
    for ns in ("a", "b", "c"):
        put(r, ns)
        r.execute_command("KV.PREFIX.PIN", ns)
    r.execute_command("KV.PREFIX.REGISTER", "d", DIM, "fp16")
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command("V.STOREBATCH", "d_pk", 0, 0, TOKENS, np.ones((TOKENS, DIM), np.float32).tobytes())
    assert str(exc.value).startswith("command not allowed: the K/V cache is over kv-maxmemory")
    assert all(alive(r, ns) for ns in "abc") and not alive(r, "d")
    r.execute_command("KV.PREFIX.UNPIN", "a")
    put(r, "d")
    assert not alive(r, "a") and alive(r, "d")
