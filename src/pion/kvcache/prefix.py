"""The prefix registry: what ``KV.PREFIX.REGISTER`` attaches to a namespace beyond its sessions.

A namespace ``ns`` is a prefix whose K rows live in session ``ns_pk`` and V rows in ``ns_pv``.
The registry keeps, per namespace: kv_dim and codec, the reference's u64 block table
(``BLOCKS``, for ``MEMBERSHIP``), the measured prefill time (``PREFILL_MS``), an optional JSON
**manifest** (the model and token fingerprint a client checks before loading: fail closed), and
an optional **token chain** (``CHAIN``: the token ids and their 16-byte block hashes, seeded by
``SEED``, indexed for ``KV.PREFIX.MATCH``). Re-registering with a different codec, dim,
manifest or chain (tokens, block size or seed) is refused.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field

import numpy as np

from pion.codecs.chain import ROOT, block_hashes
from pion.protocol.errors import ReplyError
from pion.protocol.json_input import MAX_DEPTH, loads_bounded

MAX_MANIFEST_BYTES = 64 * 1024
#: registry entries' generations: every entry ever added gets a new one (never reused, even
#: across DEBUG RELOAD), so a reader can tell "the same entry" from "an equal-looking new one"
_generations = itertools.count(1)


@dataclass(slots=True)
class Chain:
    """A prefix's token ids and block hashes; ``seed`` (16 bytes, ``SEED``) starts the hashes, so
    chains of other models (other seeds) never share a hash nor become parent and child."""

    block_size: int
    tokens: np.ndarray  # uint32 token ids
    hashes: list[bytes]
    seed: bytes = ROOT

    @classmethod
    def build(cls, block_size: int, token_blob: bytes, seed: bytes = ROOT) -> Chain:
        tokens = np.frombuffer(token_blob, dtype="<u4").astype(np.uint32)
        seed = bytes(seed)
        return cls(block_size, tokens, block_hashes(token_blob, block_size, seed), seed)

    def same(self, other: Chain) -> bool:
        same_shape = self.block_size == other.block_size and self.seed == other.seed
        return same_shape and np.array_equal(self.tokens, other.tokens)


@dataclass(slots=True)
class Prefix:
    ns: bytes
    kv_dim: int
    vquant: str
    block_size: int = 0
    block_hashes: np.ndarray | None = None  # u64, token order (the reference's BLOCKS)
    sorted_hashes: np.ndarray | None = None
    prefill_us: int | None = None
    manifest_raw: bytes | None = None
    manifest: dict | None = None
    chain: Chain | None = None
    parent: bytes | None = None
    children: set[bytes] = field(default_factory=set)
    #: journal sequence of the KV.PREFIX.PUBLISH that installed it (0: registered the reference's way)
    published_seq: int = 0
    #: stamped by ``PrefixRegistry.add``; ``KV.PREFIX.GENERATION`` answers it (a fetch's consistency check)
    generation: int = 0
    #: KV.PREFIX.LOOKUP HITs of this entry and the wall-clock second of the last one (the
    #: dashboard's columns; kept in memory only, like the LRU clock: a restart starts them at 0)
    hits: int = 0
    last_hit: float = 0.0

    def note_hit(self, when: float) -> None:
        self.hits += 1
        self.last_hit = when

    def token_count(self) -> int | None:
        """How many tokens the prefix holds, when the registration says (chain, then manifest)."""
        if self.chain is not None:
            return len(self.chain.tokens)
        if self.manifest is not None and isinstance(self.manifest.get("token_count"), int):
            return self.manifest["token_count"]
        return None

    def layer_count(self) -> int | None:
        if self.manifest is not None and isinstance(self.manifest.get("n_layers"), int):
            return self.manifest["n_layers"]
        return None

    def state_layers(self) -> tuple[int, ...]:
        """The recurrent-state slots the manifest declares (SSM.PREFIX blobs a hit needs)."""
        states = self.manifest.get("state_layers") if self.manifest is not None else None
        if not isinstance(states, list):
            return ()
        return tuple(s for s in states if isinstance(s, int) and not isinstance(s, bool) and s >= 0)

    def set_blocks(self, block_size: int, blob: bytes) -> None:
        hashes = np.frombuffer(blob, dtype="<u8").copy()
        self.block_size = block_size
        self.block_hashes = hashes
        self.sorted_hashes = np.sort(hashes)

    def blocks_reply(self) -> bytes:
        """``[u32 block_size][u32 count][count x u64]``, little-endian."""
        hashes = self.block_hashes if self.block_hashes is not None else np.zeros(0, "<u8")
        head = np.array([self.block_size, len(hashes)], dtype="<u4").tobytes()
        return head + hashes.astype("<u8").tobytes()

    def membership(self, probe_blob: bytes) -> bytes:
        """Bitmap, LSB-first: bit i set iff probe hash i is in the block table."""
        probes = np.frombuffer(probe_blob, dtype="<u8")
        table = self.sorted_hashes if self.sorted_hashes is not None else np.zeros(0, np.uint64)
        if len(table) == 0 or len(probes) == 0:
            return bytes((len(probes) + 7) // 8)
        pos = np.minimum(np.searchsorted(table, probes), len(table) - 1)
        return np.packbits(table[pos] == probes, bitorder="little").tobytes()


def parse_manifest(raw: bytes, kv_dim: int, chain: Chain | None) -> dict:
    """A JSON object; the fields the server understands must agree with the registration."""
    where = "ERR KV.PREFIX.REGISTER: MANIFEST"
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ReplyError(f"{where} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = loads_bounded(raw)
    except ValueError as exc:  # UnicodeDecodeError too
        deep = "nested deeper" in str(exc)
        raise ReplyError(f"{where} is nested deeper than {MAX_DEPTH} levels" if deep
                         else f"{where} is not valid JSON") from None
    if not isinstance(manifest, dict):
        raise ReplyError(f"{where} must be a JSON object")
    for key in ("n_layers", "token_count", "n_kv_heads", "head_dim"):
        value = manifest.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ReplyError(f"{where} field '{key}' must be a non-negative integer")
    heads, head_dim = manifest.get("n_kv_heads"), manifest.get("head_dim")
    if heads is not None and head_dim is not None and heads * head_dim != kv_dim:
        raise ReplyError(f"{where} n_kv_heads*head_dim ({heads}*{head_dim}) != kv_dim ({kv_dim})")
    if chain is not None:
        count = manifest.get("token_count")
        if count is not None and count != len(chain.tokens):
            raise ReplyError(f"{where} token_count {count} != CHAIN tokens {len(chain.tokens)}")
        digest = manifest.get("tokens_sha256")
        if digest is not None and digest != hashlib.sha256(chain.tokens.astype("<u4").tobytes()).hexdigest():
            raise ReplyError(f"{where} tokens_sha256 does not match the CHAIN tokens")
    return manifest


def short_key(chain: Chain) -> tuple[bytes, int]:
    return chain.seed, int(chain.tokens[0])


def manifest_codecs(manifest: dict) -> dict[str, list[str]] | None:
    """``{"k": [...], "v": [...]}`` from the manifest's ``codecs`` field, when it is well formed."""
    codecs = manifest.get("codecs")
    if not isinstance(codecs, dict):
        return None
    out: dict[str, list[str]] = {}
    for side in ("k", "v"):
        value = codecs.get(side)
        if isinstance(value, str):
            out[side] = [value.lower()] * int(manifest.get("n_layers") or 1)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[side] = [v.lower() for v in value]
    return out or None


class PrefixRegistry:
    """Namespace -> Prefix, plus the chain index ``MATCH`` reads."""

    def __init__(self) -> None:
        self.prefixes: dict[bytes, Prefix] = {}
        #: block_size -> 16-byte chain hash -> [(ns, block index)]
        self.chain_index: dict[int, dict[bytes, list[tuple[bytes, int]]]] = {}
        #: chains too short for one full block, by (seed, first token): MATCH ... SEED finds them
        self.short_index: dict[tuple[bytes, int], set[bytes]] = {}

    def get(self, ns: bytes) -> Prefix | None:
        return self.prefixes.get(ns)

    def add(self, prefix: Prefix) -> None:
        """Make ``prefix`` the namespace's entry, with a generation no entry ever had."""
        prefix.generation = next(_generations)
        self.prefixes[prefix.ns] = prefix

    def attach_chain(self, prefix: Prefix, chain: Chain) -> None:
        prefix.chain = chain
        index = self.chain_index.setdefault(chain.block_size, {})
        for position, digest in enumerate(chain.hashes):
            index.setdefault(digest, []).append((prefix.ns, position))
        if not chain.hashes and len(chain.tokens):
            self.short_index.setdefault(short_key(chain), set()).add(prefix.ns)

    def find_parent(self, chain: Chain, ns: bytes) -> bytes | None:
        """The longest other registered prefix whose whole token run is a block-aligned head of ``chain``."""
        index = self.chain_index.get(chain.block_size, {})
        for position in range(len(chain.hashes) - 1, -1, -1):
            for other, other_pos in index.get(chain.hashes[position], ()):
                other_prefix = self.prefixes.get(other)
                if other == ns or other_pos != position or other_prefix is None or other_prefix.chain is None:
                    continue
                if other_prefix.chain.seed != chain.seed:  # equal hashes imply it; a collision must not link models
                    continue
                if len(other_prefix.chain.tokens) == (position + 1) * chain.block_size < len(chain.tokens):
                    return other
        return None

    def link(self, child: Prefix, parent_ns: bytes | None) -> None:
        if child.parent is not None and child.parent in self.prefixes:
            self.prefixes[child.parent].children.discard(child.ns)
        child.parent = parent_ns
        if parent_ns is not None and parent_ns in self.prefixes:
            self.prefixes[parent_ns].children.add(child.ns)

    def remove(self, ns: bytes) -> Prefix | None:
        prefix = self.prefixes.pop(ns, None)
        if prefix is None:
            return None
        if prefix.chain is not None:
            index = self.chain_index.get(prefix.chain.block_size, {})
            for digest in prefix.chain.hashes:
                entries = [entry for entry in index.get(digest, ()) if entry[0] != ns]
                if entries:
                    index[digest] = entries
                else:
                    index.pop(digest, None)
            if not index:
                self.chain_index.pop(prefix.chain.block_size, None)
            if not prefix.chain.hashes and len(prefix.chain.tokens):
                key = short_key(prefix.chain)
                held = self.short_index.get(key, set())
                held.discard(ns)
                if not held:
                    self.short_index.pop(key, None)
        if prefix.parent is not None and prefix.parent in self.prefixes:
            self.prefixes[prefix.parent].children.discard(ns)
        for child in prefix.children:
            if child in self.prefixes:
                self.prefixes[child].parent = None
        return prefix
