"""The engine's snapshot extension: dump then load gives back the same state."""

from __future__ import annotations

import numpy as np

from pion.codecs.chain import ROOT, block_hashes
from pion.kvcache import KVEngine, persist
from pion.kvcache.layer import LayerSpec
from pion.storage.serialize import pack_tree, unpack_tree
from tests.unit.kvcache.helpers import fill, manifest, register, tokens_blob


def test_dump_and_load_round_trip_everything():
    engine = KVEngine()
    sp = engine.default
    register(sp, b"root", chain=(4, tokens_blob(range(8))), manifest=manifest(), prefill_us=1000,
             blocks=(16, np.array([3, 1], "<u8").tobytes()))
    register(sp, b"leaf", chain=(4, tokens_blob(range(12))))
    fill(sp, b"root", 8)
    fill(sp, b"leaf", 12)
    session = sp.vstore.get(b"leaf_pk")
    sp.vstore.store(session, 0, 2, 2, np.zeros((2, 32), np.float16).tobytes(), 0)  # split a chunk
    sp.vstore.create(b"het", LayerSpec(0, "int8"), (LayerSpec(64, "turbo4"), LayerSpec(96, "bf16_rope_fp8_body", 32)))
    sp.ssm.store(b"leaf", 1, b"state")
    sp.state.alloc(b"buf", 4, "ring")
    sp.state.write(b"buf", 1, b"xy")
    sp.evictor.pinned.add(b"root")
    engine.space(b"tenant2")
    data = persist.dump(engine)

    again = KVEngine()
    persist.load(again, data)
    sp2 = again.default
    assert set(again.spaces) == {b"", b"tenant2"}
    assert persist.dump(again) == data
    for sid, session in sp.vstore.sessions.items():
        other = sp2.vstore.get(sid)
        assert other.index == session.index and other.schema == session.schema
        for index, layer in session.layers.items():
            assert bytes(other.layer(index).read(0, layer.tokens)) == bytes(layer.read(0, layer.tokens))
    assert sp2.completeness(b"leaf")[0] and sp2.registry.get(b"leaf").parent == b"root"
    assert sp2.registry.get(b"root").manifest_raw == manifest()
    assert sp2.registry.get(b"root").prefill_us == 1000
    assert sp2.ssm.fetch(b"leaf", 1) == b"state" and sp2.state.read(b"buf", 0, 4) == b"\0xy\0"
    assert sp2.evictor.pinned == {b"root"} and sp2.nbytes == sp.nbytes
    assert sp2.registry.chain_index.keys() == sp.registry.chain_index.keys()
    assert len(persist.dump(engine)) < 2 * sp.nbytes + 4096  # split chunks share one copy of their blob


def test_a_chain_seed_survives_a_snapshot_and_an_old_item_without_one_means_root():
    seed = bytes(range(16))
    engine = KVEngine()
    register(engine.default, b"seeded", chain=(4, tokens_blob(range(8)), seed))
    register(engine.default, b"plain", chain=(4, tokens_blob(range(8))))
    tree = unpack_tree(persist.dump(engine))
    again = KVEngine()
    persist.load(again, pack_tree(tree))
    registry = again.default.registry
    assert registry.get(b"seeded").chain.seed == seed
    assert registry.get(b"seeded").chain.hashes == block_hashes(range(8), 4, seed)
    assert registry.get(b"plain").chain.seed == ROOT
    # a snapshot written before SEED existed: (block_size, tokens) only
    items = tree[b"spaces"][b""][b"prefixes"]
    tree[b"spaces"][b""][b"prefixes"] = [(*item[:7], item[7][:2], *item[8:]) for item in items]
    old = KVEngine()
    persist.load(old, pack_tree(tree))
    for ns in (b"seeded", b"plain"):
        assert old.default.registry.get(ns).chain.seed == ROOT
        assert old.default.registry.get(ns).chain.hashes == block_hashes(range(8), 4)
