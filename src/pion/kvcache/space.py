"""One tenant's K/V engine state (``KVSpace``) and the engine that holds the spaces (``KVEngine``).

Everything the prompt cache keeps lives in a ``KVSpace``: V-store sessions, the prefix
registry, SSM blobs, STATE buffers and the LRU clock. Today the server has one space; a
per-tenant server gives each tenant its own, so their namespaces can never meet. This module
holds the operations that span those parts: registering a prefix, deciding whether it is
complete (LOOKUP's HIT), dropping and evicting whole prefixes.
"""

from __future__ import annotations

from pion.codecs import CodecError
from pion.kvcache.eviction import Evictor, unit_of
from pion.kvcache.export import ExportBase, ExportCache
from pion.kvcache.integrity import BlobCheck, drop_damaged
from pion.kvcache.layer import LayerSpec
from pion.kvcache.prefix import Chain, Prefix, PrefixRegistry, manifest_codecs, parse_manifest
from pion.kvcache.ssm import SSMStore
from pion.kvcache.staging import Staging
from pion.kvcache.state import StateStore
from pion.kvcache.stats import Ledger
from pion.kvcache.vstore import Session, VStore
from pion.protocol.errors import ReplyError

REG = "ERR KV.PREFIX.REGISTER:"
OOM_TEXT = "OOM command not allowed: the K/V cache is over kv-maxmemory and nothing more can be evicted"


def sides(ns: bytes) -> tuple[bytes, bytes]:
    return ns + b"_pk", ns + b"_pv"


class KVSpace:
    def __init__(self, blob_ok: BlobCheck | None = None) -> None:
        #: the arena store's crc check of a mapped blob (``pion.kvcache.integrity``), if any
        self.blob_ok = blob_ok
        self.vstore = VStore()
        self.registry = PrefixRegistry()
        self.ssm = SSMStore()
        self.state = StateStore()
        self.evictor = Evictor()
        self.exports = ExportCache()
        self.next_snap_id = 0
        #: open staged stores by token (``pion.kvcache.staging``)
        self.stagings: dict[bytes, Staging] = {}

    # -- accounting --------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes the budget covers: encoded rows and SSM blobs (STATE buffers have their own cap),
        staged ones included, and the room staged stores reserved for rows still to come."""
        staged = sum(st.ssm_bytes + st.outstanding for st in self.stagings.values()) if self.stagings else 0
        return self.vstore.nbytes + self.ssm.nbytes + staged

    def unit_bytes(self, unit: bytes) -> int:
        total = self.ssm.session_bytes(unit)
        for sid in (unit, *sides(unit)):
            session = self.vstore.get(sid)
            total += session.nbytes if session is not None else 0
        return total

    def evictable_bytes(self, protect: frozenset[bytes]) -> int:
        """Bytes eviction could free: every unit but the pinned and protected ones and their ancestors."""
        blocked: set[bytes] = set()
        for unit in (*self.evictor.pinned, *protect):
            blocked.update(self._lineage(unit))
        return sum(self.unit_bytes(unit) for unit in self.units() if unit not in blocked)

    def manifest_owner(self, sid: bytes, ssm: bool = False) -> bytes | None:
        """The namespace whose manifest owns V-store session (or, ``ssm``, SSM session) ``sid``."""
        ns = sid if ssm else (sid[:-3] if len(sid) > 3 and sid[-3:] in (b"_pk", b"_pv") else None)
        prefix = self.registry.get(ns) if ns is not None else None
        return ns if prefix is not None and prefix.manifest is not None else None

    def units(self) -> set[bytes]:
        units = {unit_of(sid) for sid in self.vstore.sessions}
        units.update(self.ssm.sessions)
        units.update(self.registry.prefixes)
        return units

    def touch(self, sid: bytes) -> None:
        """The session's prefix and its ancestors were used now (eviction goes least recent first)."""
        self.evictor.touch(self._lineage(unit_of(sid)))

    def _lineage(self, unit: bytes) -> list[bytes]:
        """``unit``, its parent, the parent's parent... (a loop in the chain ends it)."""
        seen: list[bytes] = []
        current: bytes | None = unit
        while current is not None and current not in seen:
            seen.append(current)
            prefix = self.registry.get(current)
            current = None if prefix is None else prefix.parent
        return seen

    def _has_children(self, unit: bytes) -> bool:
        prefix = self.registry.get(unit)
        return bool(prefix is not None and prefix.children)

    # -- completeness --------------------------------------------------------------------------

    def completeness(self, ns: bytes, tokens: int | None = None) -> tuple[bool, int]:
        """``(every layer of both sides holds rows [0, tokens), last write's journal seq)``.

        ``tokens`` defaults to the registered count (CHAIN, else manifest), else to the K side's
        layer 0; the layers to the manifest's ``n_layers``, else to the sessions' own count.
        """
        prefix = self.registry.get(ns)
        seq = prefix.published_seq if prefix is not None else 0
        states = prefix.state_layers() if prefix is not None else ()
        if states and not all(self.ssm.fetch(ns, slot) is not None for slot in states):
            return False, 0
        if states and prefix is not None and prefix.layer_count() == 0:  # recurrent state only
            return (prefix.token_count() or 0) > 0, seq
        pk, pv = (self.vstore.get(sid) for sid in sides(ns))
        if pk is None or pv is None:
            return False, 0
        if tokens is None and prefix is not None:
            tokens = prefix.token_count()
        if tokens is None:
            first = pk.layer(0)
            tokens = first.tokens if first is not None else 0
        layers = prefix.layer_count() if prefix is not None else None
        if layers is None:
            layers = pk.num_layers
            if pv.num_layers != layers:
                return False, 0
        if tokens <= 0 or layers <= 0:
            return False, 0
        if self.blob_ok is not None:  # damaged rows are missing rows: never a HIT
            for session in (pk, pv):
                drop_damaged(self.vstore, session, range(layers), self.blob_ok)
        for session in (pk, pv):
            for index in range(layers):
                layer = session.layer(index)
                if layer is None or not layer.covers(tokens):
                    return False, 0
        return True, max(pk.seq(), pv.seq(), seq)

    def hit_tokens(self, ns: bytes) -> int:
        prefix = self.registry.get(ns)
        count = prefix.token_count() if prefix is not None else None
        if count is None:
            first = self.vstore.sessions[sides(ns)[0]].layer(0)
            count = first.tokens if first is not None else 0
        return count

    # -- registration ----------------------------------------------------------------------------

    def register(self, ns: bytes, spec: LayerSpec, options: dict) -> bool:
        """KV.PREFIX.REGISTER after parsing: check everything, then create/attach; True if changed."""
        try:
            spec.codec().check_dim(spec.dim)
        except CodecError:
            raise ReplyError(f"{REG} vquant '{spec.fmt}' needs kv_dim divisible by 32 (got {spec.dim})") from None
        chain = Chain.build(*options["chain"]) if "chain" in options else None
        manifest_raw = options.get("manifest")
        manifest = parse_manifest(manifest_raw, spec.dim, chain) if manifest_raw is not None else None
        existing = self.registry.get(ns)
        sessions = [self.vstore.get(sid) for sid in sides(ns)]
        for session in sessions:
            if session is not None:
                _check_session(ns, session, spec)
        _check_existing(ns, existing, manifest, chain)
        if manifest is not None:
            _check_manifest_codecs(manifest, sessions, spec)
        parent = options.get("parent")
        if parent is not None and (parent == ns or self.registry.get(parent) is None):
            raise ReplyError(f"{REG} PARENT '{parent.decode('utf-8', 'replace')}' is not a registered namespace")
        return self._apply_register(ns, spec, existing, sessions, options, manifest, chain)

    def _apply_register(self, ns, spec, existing, sessions, options, manifest, chain) -> bool:
        changed = existing is None
        for sid, session in zip(sides(ns), sessions, strict=True):
            if session is None:
                self.vstore.create(sid, spec)
                changed = True
        prefix = existing or Prefix(ns, spec.dim, spec.fmt)
        self.registry.add(prefix)
        if "blocks" in options:
            prefix.set_blocks(*options["blocks"])
            changed = True
        if options.get("prefill_us") is not None and options["prefill_us"] != prefix.prefill_us:
            prefix.prefill_us = options["prefill_us"]
            changed = True
        if manifest is not None and prefix.manifest is None:
            prefix.manifest, prefix.manifest_raw = manifest, bytes(options["manifest"])
            changed = True
        if chain is not None and prefix.chain is None:
            self.registry.attach_chain(prefix, chain)
            changed = True
        parent = options.get("parent")
        if parent is None and chain is not None and prefix.parent is None:
            parent = self.registry.find_parent(chain, ns)
        if parent is not None and parent != prefix.parent:
            self.registry.link(prefix, parent)
            changed = True
        self.touch(ns)
        return changed

    # -- dropping and evicting -------------------------------------------------------------------

    def drop_prefix(self, ns: bytes) -> bool:
        """KV.PREFIX.DROP of one namespace: both sides, its SSM state and its registry entry."""
        held = False
        for sid in sides(ns):
            held = self.vstore.drop(sid) or held
        held = self.ssm.drop(ns) or held
        held = self.registry.remove(ns) is not None or held
        if held:
            self.evictor.forget(ns)
        return held

    def drop_unit(self, unit: bytes) -> list[list[bytes]]:
        """Evict a unit; returns the commands that replay the eviction."""
        effects: list[list[bytes]] = []
        if self.drop_prefix(unit):
            effects.append([b"KV.PREFIX.DROP", unit])
        if self.vstore.drop(unit):
            effects.append([b"V.DROP", unit])
        self.evictor.forget(unit)
        self.evictor.evictions += 1
        return effects

    def make_room(self, budget: int, incoming: int, protect: bytes | frozenset[bytes]) -> list[list[bytes]]:
        """Evict until ``incoming`` more bytes fit in ``budget`` (0 = no budget); returns the effects.
        ``protect``: the prefix (or prefixes) the write is for, never evicted for it.

        Raises OOM when the rest is pinned, protected or a parent of something kept.
        """
        effects: list[list[bytes]] = []
        if not budget or self.nbytes + incoming <= budget:
            return effects
        if isinstance(protect, bytes):
            protect = frozenset((protect,))
        if self.nbytes + incoming - self.evictable_bytes(protect) > budget:
            raise ReplyError(OOM_TEXT)  # it cannot fit: evict nothing
        while self.nbytes + incoming > budget:
            victim = self.evictor.victim([u for u in self.units() if not self._has_children(u)], protect)
            if victim is None:
                raise ReplyError(OOM_TEXT)
            effects.extend(self.drop_unit(victim))
        return effects


def _check_session(ns: bytes, session: Session, spec: LayerSpec) -> None:
    name = ns.decode("utf-8", "replace")
    specs = list(session.schema) if session.schema else [session.default]
    if any(s.dim != spec.dim for s in specs):
        raise ReplyError(f"{REG} namespace '{name}' exists with a different kv_dim ({specs[0].dim} != {spec.dim})")
    if session.schema is None and session.default.fmt != spec.fmt:
        raise ReplyError(f"{REG} namespace '{name}' exists with a different vquant ({session.default.fmt} != {spec.fmt})")
    if session.schema is not None and spec.fmt not in {s.fmt for s in specs}:
        raise ReplyError(f"{REG} namespace '{name}' exists with a different vquant (schema without {spec.fmt})")


def _check_existing(ns: bytes, existing: Prefix | None, manifest: dict | None, chain: Chain | None) -> None:
    if existing is None:
        return
    name = ns.decode("utf-8", "replace")
    if manifest is not None and existing.manifest is not None and manifest != existing.manifest:
        raise ReplyError(f"{REG} namespace '{name}' exists with a different manifest")
    if chain is not None and existing.chain is not None and not existing.chain.same(chain):
        raise ReplyError(f"{REG} namespace '{name}' exists with a different token chain")


def _check_manifest_codecs(manifest: dict, sessions: list[Session | None], spec: LayerSpec) -> None:
    codecs = manifest_codecs(manifest)
    if codecs is None:
        return
    for side, session in zip(("k", "v"), sessions, strict=True):
        for index, name in enumerate(codecs.get(side, ())):
            actual = session.spec(index).fmt if session is not None else spec.fmt
            if name != actual:
                raise ReplyError(f"{REG} MANIFEST codec of {side} layer {index} is {name}, the session stores {actual}")


class KVEngine:
    """What the server wires in as ``server.parts.kvcache``: the spaces and their ledgers,
    one of each per tenant (b"" is the server's own)."""

    def __init__(self) -> None:
        self.default = KVSpace()
        self.spaces: dict[bytes, KVSpace] = {b"": self.default}
        self.ledger = Ledger()
        self.ledgers: dict[bytes, Ledger] = {b"": self.ledger}
        #: where every space's V.EXPORT directory lives (made at the first export)
        self.export_base: ExportBase | None = None
        self.blob_ok: BlobCheck | None = None

    def export_root(self, data_dir: str):
        """This server's export base directory, created and recorded at the first call."""
        if self.export_base is None:
            self.export_base = ExportBase(data_dir)
        return self.export_base.ensure()

    def check_blobs_with(self, blob_ok: BlobCheck) -> None:
        """Check mapped rows against their arena crc before they are used (every space)."""
        self.blob_ok = blob_ok
        for space in self.spaces.values():
            space.blob_ok = blob_ok

    def close_exports(self) -> None:
        """Delete every space's V.EXPORT files and the base (the server is stopping)."""
        for space in self.spaces.values():
            space.exports.close()
        if self.export_base is not None:
            self.export_base.close()
            self.export_base = None

    def ledger_of(self, tenant: bytes = b"") -> Ledger:
        """A tenant's PION.STATS counters (its own, as its space is)."""
        found = self.ledgers.get(tenant)
        if found is None:
            found = self.ledgers[tenant] = Ledger()
        return found

    def reset_ledgers(self) -> None:
        """CONFIG RESETSTAT: every ledger back to zero."""
        for ledger in self.ledgers.values():
            ledger.reset()

    def space(self, tenant: bytes = b"") -> KVSpace:
        found = self.spaces.get(tenant)
        if found is None:
            found = self.spaces[tenant] = KVSpace(self.blob_ok)
        return found
