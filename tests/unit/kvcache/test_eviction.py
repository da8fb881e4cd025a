"""Eviction under a byte budget: LRU whole prefixes, leaves before roots, pins never."""

from __future__ import annotations

import pytest

from pion.kvcache.space import KVSpace
from pion.protocol.errors import ReplyError
from tests.unit.kvcache.helpers import fill, register, tokens_blob


def make(space: KVSpace, ns: bytes, tokens: int = 8, **options) -> None:
    register(space, ns, **options)
    fill(space, ns, tokens, layers=1)


def prefix_bytes(tokens: int = 8) -> int:
    return 2 * tokens * 32 * 2  # two sides, fp16


def test_least_recently_used_prefix_goes_first():
    sp = KVSpace()
    for ns in (b"a", b"b", b"c"):
        make(sp, ns)
    sp.touch(b"a")
    effects = sp.make_room(3 * prefix_bytes(), prefix_bytes(), frozenset())
    assert effects == [[b"KV.PREFIX.DROP", b"b"]]
    assert sp.registry.get(b"b") is None and sp.evictor.evictions == 1
    assert sp.nbytes == 2 * prefix_bytes()


def test_leaves_of_a_chain_go_before_their_root():
    sp = KVSpace()
    make(sp, b"root", chain=(4, tokens_blob(range(8))))
    make(sp, b"mid", chain=(4, tokens_blob(range(12))))
    make(sp, b"leaf", chain=(4, tokens_blob(range(16))))
    make(sp, b"solo")
    sp.touch(b"solo")
    sp.touch(b"root")  # the root is now the newest, but the chain goes leaf first anyway
    assert sp.registry.get(b"leaf").parent == b"mid"
    order = []
    while sp.units():
        order.extend(e[1] for e in sp.make_room(sp.nbytes - 1, 0, frozenset()))
    assert order == [b"leaf", b"mid", b"solo", b"root"]


def test_touching_a_leaf_touches_its_ancestors():
    sp = KVSpace()
    make(sp, b"root", chain=(4, tokens_blob(range(8))))
    make(sp, b"leaf", chain=(4, tokens_blob(range(12))))
    make(sp, b"other")
    sp.touch(b"leaf")
    assert sp.evictor.last_use[b"root"] == sp.evictor.last_use[b"leaf"] > sp.evictor.last_use[b"other"]


def test_pinned_and_protected_prefixes_are_never_evicted():
    sp = KVSpace()
    make(sp, b"a")
    make(sp, b"b")
    sp.evictor.pinned.add(b"a")
    with pytest.raises(ReplyError, match="^OOM "):
        sp.make_room(prefix_bytes(), prefix_bytes(), frozenset({b"b"}))
    assert sp.registry.get(b"a") is not None and sp.registry.get(b"b") is not None
    assert sp.make_room(2 * prefix_bytes(), 1, frozenset()) == [[b"KV.PREFIX.DROP", b"b"]]


def test_no_budget_means_no_eviction():
    sp = KVSpace()
    make(sp, b"a")
    assert sp.make_room(0, 10**12, frozenset()) == []


def test_ssm_state_is_evicted_with_its_prefix_and_raw_sessions_by_v_drop():
    from pion.kvcache.layer import LayerSpec

    sp = KVSpace()
    make(sp, b"a")
    sp.ssm.store(b"a", 0, b"x" * 100)
    sp.vstore.create(b"raw", LayerSpec(4, "fp32"))
    sp.touch(b"raw")
    sp.vstore.store(sp.vstore.get(b"raw"), 0, 0, 1, b"\0" * 16, 0)
    effects = sp.make_room(1, 0, frozenset())
    assert effects == [[b"KV.PREFIX.DROP", b"a"], [b"V.DROP", b"raw"]]
    assert sp.ssm.nbytes == 0 and sp.nbytes == 0
