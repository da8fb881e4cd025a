"""The K/V engine's state in a snapshot (the persistence engine's ``SnapshotExtension``).

Everything a ``KVEngine`` holds except in-memory rollback snapshots, as one ``pack_tree``:
row blobs and SSM blobs go through ``pack_blob``, so inside a snapshot an arena-backed blob is a
25-byte reference (and stays live through compaction) rather than a copy. Each distinct blob is
written once even when overwrites split it into several chunks.
"""

from __future__ import annotations

import json

from pion.codecs.chain import ROOT
from pion.kvcache.layer import Chunk, LayerSpec
from pion.kvcache.prefix import Chain, Prefix
from pion.kvcache.space import KVEngine, KVSpace
from pion.kvcache.staging import Staging, open_staging
from pion.kvcache.vstore import Session
from pion.storage.arena import pack_blob, unpack_blob
from pion.storage.serialize import pack_tree, unpack_tree

VERSION = 1


class _Blobs:
    """Dedupes blob buffers by identity while dumping."""

    def __init__(self) -> None:
        self.tokens: list[bytes] = []
        self.index: dict[int, int] = {}

    def add(self, buf) -> int:
        found = self.index.get(id(buf))
        if found is None:
            found = self.index[id(buf)] = len(self.tokens)
            self.tokens.append(pack_blob(buf))
        return found

    def chunk(self, chunk: Chunk) -> int:
        """A chunk's blob: by its arena view when it has one (a 25-byte ref in a snapshot)."""
        return self.add(chunk.durable if chunk.durable is not None else chunk.base)


def _spec(spec: LayerSpec) -> tuple:
    return (spec.dim, spec.fmt.encode(), spec.rope)


def _unspec(item: tuple) -> LayerSpec:
    return LayerSpec(item[0], item[1].decode(), item[2])


def dump_space(space: KVSpace) -> dict:
    blobs = _Blobs()
    sessions = [_dump_session(session, blobs) for session in space.vstore.sessions.values()]
    prefixes = [_dump_prefix(p) for p in space.registry.prefixes.values()]
    stagings = [_dump_staging(st, blobs) for st in space.stagings.values()]
    ssm = [(sid, layer, blobs.add(blob)) for sid, layers in space.ssm.sessions.items() for layer, blob in layers.items()]
    state = [(sid, b.mode.encode(), bytes(b.data), b.writes) for sid, b in space.state.buffers.items()]
    # blobs only a V.SNAPSHOT (rollback point, not persisted) still uses: referenced so that the
    # snapshot keeps their arena ranges live through compaction; ignored on load
    rollback = [
        blobs.chunk(chunk)
        for session in space.vstore.sessions.values()
        for snap in session.snapshots.values()
        for chunks in snap.layers.values()
        for chunk in chunks
        if chunk.durable is not None
    ]
    evictor = space.evictor
    return {
        b"sessions": sessions, b"prefixes": prefixes, b"ssm": ssm, b"state": state, b"blobs": blobs.tokens,
        b"rollback_blobs": rollback, b"stagings": stagings,
        b"lru": [(unit, used) for unit, used in evictor.last_use.items()], b"clock": evictor.clock,
        b"pinned": sorted(evictor.pinned), b"evictions": evictor.evictions, b"next_snap": space.next_snap_id,
    }


def _dump_session(session: Session, blobs: _Blobs) -> tuple:
    layers = [
        (index, [(c.start, c.count, blobs.chunk(c), c.offset, c.nbytes) for c in layer.chunks])
        for index, layer in session.layers.items()
    ]
    schema = None if session.schema is None else [_spec(s) for s in session.schema]
    return (session.sid, session.index, _spec(session.default), schema, layers)


def _dump_staging(st: Staging, blobs: _Blobs) -> tuple:
    """An open staged store: its registration, its two detached sessions and its state blobs."""
    chain = None if st.chain is None else (st.chain.block_size, st.chain.tokens.astype("<u4").tobytes(), st.chain.seed)
    options = json.dumps({"prefill_us": st.options.get("prefill_us"), "replace": st.replace,
                          "parent": None if st.options.get("parent") is None else st.options["parent"].hex(),
                          "reserved": st.reserved}).encode()
    blocks = st.options.get("blocks")
    return (st.token, st.ns, _spec(st.spec), st.manifest_raw, chain, options,
            None if blocks is None else (blocks[0], bytes(blocks[1])),
            _dump_session(st.k, blobs), _dump_session(st.v, blobs),
            [(slot, blobs.add(blob)) for slot, blob in st.ssm.items()])


def _dump_prefix(p: Prefix) -> tuple:
    blocks = None if p.block_hashes is None else p.block_hashes.astype("<u8").tobytes()
    # (block_size, tokens, seed): an item of an older snapshot has no seed, which means ROOT
    chain = None if p.chain is None else (p.chain.block_size, p.chain.tokens.astype("<u4").tobytes(), p.chain.seed)
    return (p.ns, p.kv_dim, p.vquant.encode(), p.block_size, blocks, p.prefill_us, p.manifest_raw, chain, p.parent)


def load_space(space: KVSpace, tree: dict) -> None:
    blobs = [unpack_blob(token) for token in tree[b"blobs"]]
    store = space.vstore
    for sid, index, default, schema, layers in tree[b"sessions"]:
        session = store.create(sid, _unspec(default), None if schema is None else tuple(_unspec(s) for s in schema), index)
        _load_layers(store, session, layers, blobs)
    for item in tree.get(b"stagings", ()):  # a snapshot of an older server has none
        _load_staging(space, item, blobs)
    for item in tree[b"prefixes"]:
        _load_prefix(space, item)
    for item in tree[b"prefixes"]:
        if item[8] is not None:
            space.registry.link(space.registry.prefixes[item[0]], item[8])
    for sid, layer, b in tree[b"ssm"]:
        space.ssm.store(sid, layer, blobs[b])
    for sid, mode, data, writes in tree[b"state"]:
        space.state.alloc(sid, len(data), mode.decode())
        space.state.buffers[sid].data[:] = data
        space.state.buffers[sid].writes = writes
    evictor = space.evictor
    evictor.last_use = dict(tree[b"lru"])
    evictor.clock, evictor.evictions = tree[b"clock"], tree[b"evictions"]
    evictor.pinned = set(tree[b"pinned"])
    space.next_snap_id = tree[b"next_snap"]


def _load_layers(store, session: Session, layers, blobs: list) -> None:
    for layer_index, chunks in layers:
        layer = session.layer_for_write(layer_index)
        layer.replace_chunks([
            Chunk(start, count, blobs[b], offset, nbytes, _view(blobs[b])) for start, count, b, offset, nbytes in chunks
        ])
        session.nbytes += layer.nbytes
        store.nbytes += layer.nbytes


def _load_staging(space: KVSpace, item: tuple, blobs: list) -> None:
    token, ns, spec, manifest_raw, chain, options_raw, blocks, k_item, v_item, ssm = item
    options = json.loads(options_raw)
    parsed: dict = {"manifest": manifest_raw, "replace": options["replace"]}
    if options.get("prefill_us") is not None:
        parsed["prefill_us"] = options["prefill_us"]
    if options.get("parent") is not None:
        parsed["parent"] = bytes.fromhex(options["parent"])
    if blocks is not None:
        parsed["blocks"] = (blocks[0], blocks[1])
    built = None if chain is None else Chain.build(chain[0], chain[1], chain[2])
    st = open_staging(space, token, ns, _unspec(spec), parsed, json.loads(manifest_raw), built)
    st.reserved = options.get("reserved", 0)
    for session, dumped in ((st.k, k_item), (st.v, v_item)):
        _load_layers(space.vstore, session, dumped[4], blobs)
    for slot, b in ssm:
        st.ssm[slot] = blobs[b]
        st.ssm_bytes += len(blobs[b])


def _view(blob) -> memoryview | None:
    return blob if blob.__class__ is memoryview else None


def _load_prefix(space: KVSpace, item: tuple) -> None:
    ns, kv_dim, vquant, block_size, blocks, prefill_us, manifest_raw, chain, _parent = item
    prefix = Prefix(ns, kv_dim, vquant.decode(), prefill_us=prefill_us)
    if blocks is not None:
        prefix.set_blocks(block_size, blocks)
    if manifest_raw is not None:
        prefix.manifest_raw, prefix.manifest = manifest_raw, json.loads(manifest_raw)
    space.registry.add(prefix)
    if chain is not None:
        space.registry.attach_chain(prefix, Chain.build(chain[0], chain[1], chain[2] if len(chain) > 2 else ROOT))


def dump(engine: KVEngine) -> bytes:
    """The whole engine (every tenant's space) as snapshot bytes."""
    spaces = {tenant: dump_space(space) for tenant, space in engine.spaces.items()}
    return pack_tree({b"version": VERSION, b"spaces": spaces})


def load(engine: KVEngine, data: bytes) -> None:
    """Replace the engine's state with a snapshot's (called before the log is replayed)."""
    tree = unpack_tree(data)
    if tree.get(b"version") != VERSION:
        raise ValueError(f"K/V snapshot version {tree.get(b'version')} is not {VERSION}")
    engine.spaces.clear()
    for tenant, space_tree in tree[b"spaces"].items():
        space = engine.space(tenant)
        load_space(space, space_tree)
    engine.default = engine.space(b"")
