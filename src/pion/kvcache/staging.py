"""Staged stores: a prefix with a manifest becomes readable all at once, or not at all.

Why: a manifest vouches for rows. If rows could be written into a namespace independently of
its registration, one writer's rows could land under another's manifest (a refused REGISTER
followed by its pipelined V.STOREBATCHes, or two models racing to fill one namespace) and a
reader would load them as a clean hit. So a *manifest-owned* namespace (one registered with a
manifest) changes only through a staged store:

1. ``KV.PREFIX.REGISTER ns ... MANIFEST json STAGE token [REPLACE]`` opens a ``Staging``: two
   detached sessions (not reachable by any ``V.*`` name), an SSM slot map, and the
   registration it will publish. Its byte size is known from the manifest (``n_layers``,
   ``token_count``, codecs, ``kv_dim``): it is refused up front when it can never fit
   ``--kv-maxmemory``, else room is made for it (reserved) before the first row arrives.
2. ``V.STOREBATCH ... TOKEN token`` and ``SSM.PREFIX.STORE ... TOKEN token`` write into it.
3. ``KV.PREFIX.PUBLISH ns token`` checks it is complete (every row of every layer and side,
   every declared state slot) and swaps it in as the namespace's entry in one step; or
   discards it: the namespace already holds an equal complete entry (a concurrent identical
   store), or holds another one and REPLACE was not given.

A staging that sees no write for ``STAGE_IDLE_S`` is discarded (its writer died). Everything is
logged (REGISTER ... STAGE, the TOKEN writes, PUBLISH, ABORT), so replay rebuilds the same
stagings and publishes the same entries; snapshots carry open stagings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pion.kvcache.layer import LayerSpec
from pion.kvcache.prefix import Chain, manifest_codecs
from pion.kvcache.vstore import Session
from pion.protocol.errors import ReplyError

if TYPE_CHECKING:
    from pion.kvcache.space import KVSpace

#: a staging with no write for this long is discarded (its writer is gone)
STAGE_IDLE_S = 60.0
MAX_TOKEN_BYTES = 64
#: open stagings per space (each holds reserved bytes and two detached sessions)
MAX_STAGINGS = 1024


@dataclass(eq=False)
class Staging:
    """One staged store: the registration to publish and the rows and state written so far."""

    token: bytes
    ns: bytes
    spec: LayerSpec
    manifest: dict
    manifest_raw: bytes
    chain: Chain | None
    #: REGISTER's other options: ``blocks``, ``prefill_us``, ``parent``
    options: dict
    replace: bool
    k: Session
    v: Session
    n_layers: int
    token_count: int
    state_layers: tuple[int, ...]
    #: bytes made room for at REGISTER (the declared rows), consumed as rows arrive
    reserved: int = 0
    ssm: dict[int, bytes | memoryview] = field(default_factory=dict)
    ssm_bytes: int = 0
    touched: float = field(default_factory=time.monotonic)

    @property
    def row_bytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    @property
    def outstanding(self) -> int:
        """Reserved bytes not yet taken by rows (the budget counts them as used)."""
        return max(0, self.reserved - self.row_bytes)

    def session(self, sid: bytes) -> Session | None:
        if sid == self.ns + b"_pk":
            return self.k
        if sid == self.ns + b"_pv":
            return self.v
        return None

    def check_rows(self, layer: int, start: int, count: int, where: str) -> None:
        """A staged write stays inside the declared prefix (layers and tokens)."""
        if layer >= self.n_layers:
            raise ReplyError(f"ERR {where}: the staged prefix declares {self.n_layers} layers (layer {layer} given)")
        if start + count > self.token_count:
            raise ReplyError(f"ERR {where}: the staged prefix declares {self.token_count} tokens "
                             f"(rows up to {start + count} given)")

    def missing(self) -> str | None:
        """Why the staging cannot be published yet; None when every row and state is in."""
        for side, session in (("K", self.k), ("V", self.v)):
            for index in range(self.n_layers):
                layer = session.layer(index)
                held = 0 if layer is None else layer.tokens
                if layer is None or not layer.covers(self.token_count):
                    return f"layer {index} of {side} holds {held} of {self.token_count} rows"
        for slot in self.state_layers:
            if slot not in self.ssm:
                return f"recurrent state slot {slot} was not stored"
        if self.n_layers == 0 and not self.state_layers:
            return "it declares no K/V layer and no state slot"
        return None


def declared_bytes(specs: list[LayerSpec], token_count: int) -> int:
    """Bytes the rows of these layers take for ``token_count`` tokens."""
    return sum(spec.codec().bytes_per_row(spec.dim) * token_count for spec in specs)


def session_specs(spec: LayerSpec, codecs: dict[str, list[str]] | None, n_layers: int,
                  ) -> tuple[tuple[LayerSpec, tuple[LayerSpec, ...] | None], tuple[LayerSpec, tuple[LayerSpec, ...] | None]]:
    """``((default, schema), (default, schema))`` of the K and V sessions of a staged store.

    ``vquant`` for every layer of both sides (the manifest's codecs, when given, agreeing) makes
    uniform sessions; anything else makes SCHEMA sessions, as ``V.CREATE ... SCHEMA`` would.
    """
    names = {}
    for side in ("k", "v"):
        names[side] = ((codecs or {}).get(side) or [spec.fmt] * n_layers) if n_layers else []
        if len(names[side]) != n_layers:
            raise ReplyError(f"ERR KV.PREFIX.REGISTER: MANIFEST codecs.{side} lists {len(names[side])} layers, "
                             f"n_layers is {n_layers}")
    if set(names["k"]) | set(names["v"]) <= {spec.fmt}:
        return (spec, None), (spec, None)
    k, v = (tuple(LayerSpec(spec.dim, name) for name in names[side]) for side in ("k", "v"))
    return (LayerSpec(0, "int8"), k), (LayerSpec(0, "int8"), v)


def layer_specs(default: LayerSpec, schema: tuple[LayerSpec, ...] | None, n_layers: int) -> list[LayerSpec]:
    return list(schema) if schema is not None else [default] * n_layers


def check_token(token: bytes) -> bytes:
    if not 1 <= len(token) <= MAX_TOKEN_BYTES:
        raise ReplyError(f"ERR STAGE/TOKEN must be 1..{MAX_TOKEN_BYTES} bytes")
    return token


def manifest_ints(manifest: dict) -> tuple[int, int, tuple[int, ...]]:
    """``(n_layers, token_count, state_layers)`` a staged manifest must declare."""
    n_layers, count = manifest.get("n_layers"), manifest.get("token_count")
    if not isinstance(n_layers, int) or not isinstance(count, int) or count < 1:
        raise ReplyError("ERR KV.PREFIX.REGISTER: STAGE needs a MANIFEST with integer n_layers and token_count >= 1")
    states = manifest.get("state_layers", [])
    if not isinstance(states, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                               for s in states):
        raise ReplyError("ERR KV.PREFIX.REGISTER: MANIFEST state_layers must be a list of non-negative integers")
    return n_layers, count, tuple(sorted(set(states)))


# -- operations on a space -----------------------------------------------------------------------


def open_staging(space: KVSpace, token: bytes, ns: bytes, spec: LayerSpec, options: dict, manifest: dict,
                 chain: Chain | None) -> Staging:
    """A new staging for ``ns`` (the caller checked the registration and made room for it)."""
    if token in space.stagings:
        raise ReplyError("ERR KV.PREFIX.REGISTER: this STAGE token is already open")
    if len(space.stagings) >= MAX_STAGINGS:
        raise ReplyError(f"ERR KV.PREFIX.REGISTER: {MAX_STAGINGS} staged stores are open; publish or abort some first")
    n_layers, count, states = manifest_ints(manifest)
    (k_default, k_schema), (v_default, v_schema) = session_specs(spec, manifest_codecs(manifest), n_layers)
    pk, pv = space_sides(ns)
    staging = Staging(
        token=token, ns=ns, spec=spec, manifest=manifest, manifest_raw=bytes(options["manifest"]), chain=chain,
        options={key: options[key] for key in ("blocks", "prefill_us", "parent") if key in options},
        replace=bool(options.get("replace")), k=space.vstore.detached(pk, k_default, k_schema),
        v=space.vstore.detached(pv, v_default, v_schema), n_layers=n_layers, token_count=count, state_layers=states,
    )
    space.stagings[token] = staging
    return staging


def staged_size(spec: LayerSpec, manifest: dict) -> int:
    """The bytes a staged store's rows will take (both sides, every layer)."""
    n_layers, count, _ = manifest_ints(manifest)
    (k_default, k_schema), (v_default, v_schema) = session_specs(spec, manifest_codecs(manifest), n_layers)
    specs = layer_specs(k_default, k_schema, n_layers) + layer_specs(v_default, v_schema, n_layers)
    return declared_bytes(specs, count)


def discard(space: KVSpace, token: bytes) -> bool:
    """Drop an open staging and everything written into it; True if there was one."""
    staging = space.stagings.pop(token, None)
    if staging is None:
        return False
    space.vstore.discard(staging.k)
    space.vstore.discard(staging.v)
    staging.ssm.clear()
    staging.ssm_bytes = 0
    return True


def occupant(space: KVSpace, ns: bytes) -> str | None:
    """What already holds ``ns`` (a registry entry, sessions or state), in words; None when free."""
    if space.registry.get(ns) is not None:
        return "a registered prefix"
    if any(space.vstore.get(sid) is not None for sid in space_sides(ns)) or ns in space.ssm.sessions:
        return "sessions stored without a manifest"
    return None


def conflict(space: KVSpace, ns: bytes, manifest: dict, chain: Chain | None, replace: bool) -> str | None:
    """Why publishing this registration without REPLACE would overwrite another prefix; None if not."""
    if replace:
        return None
    existing = space.registry.get(ns)
    if existing is None:
        held = occupant(space, ns)
        return None if held is None else f"holds {held}"
    if existing.manifest is None:
        return "holds a prefix registered without a manifest"
    if existing.manifest != manifest:
        return "holds another prefix (a different manifest)"
    if chain is not None and existing.chain is not None and not existing.chain.same(chain):
        return "holds another prefix (a different token chain)"
    return None


def publish(space: KVSpace, ns: bytes, token: bytes, seq: int) -> bool:
    """KV.PREFIX.PUBLISH: install the staging as ``ns``'s entry; False when an equal complete entry
    is already there (the staging is dropped). Raises, after discarding it, when it may not."""
    staging = space.stagings.get(token)
    if staging is None or staging.ns != ns:
        raise ReplyError(f"ERR KV.PREFIX.PUBLISH: no open staged store of '{_name(ns)}' with this token "
                         f"(it was published, aborted, or idle for {int(STAGE_IDLE_S)} s)")
    missing = staging.missing()
    if missing is not None:
        discard(space, token)
        raise ReplyError(f"ERR KV.PREFIX.PUBLISH: the staged prefix is incomplete ({missing}); it was discarded")
    taken = conflict(space, ns, staging.manifest, staging.chain, staging.replace)
    if taken is not None:
        discard(space, token)
        raise ReplyError(f"ERR KV.PREFIX.PUBLISH: namespace '{_name(ns)}' {taken}; the staged prefix was discarded "
                         "(REGISTER ... REPLACE overwrites)")
    existing = space.registry.get(ns)
    if existing is not None and not staging.replace and space.completeness(ns)[0]:
        discard(space, token)  # an equal complete prefix is already there (a concurrent identical store)
        space.touch(ns)
        return False
    install(space, staging, seq)
    return True


def install(space: KVSpace, staging: Staging, seq: int) -> None:
    """Swap the staging in as the namespace's entry: sessions, state, registration, in one step."""
    from pion.kvcache.prefix import Prefix

    ns = staging.ns
    pinned = ns in space.evictor.pinned
    space.drop_prefix(ns)
    space.stagings.pop(staging.token, None)
    for session in (staging.k, staging.v):
        space.vstore.adopt(session)
    for slot, blob in staging.ssm.items():
        space.ssm.store(ns, slot, blob)
    staging.ssm_bytes = 0
    prefix = Prefix(ns, staging.spec.dim, staging.spec.fmt, prefill_us=staging.options.get("prefill_us"),
                    manifest=staging.manifest, manifest_raw=staging.manifest_raw, published_seq=seq)
    if "blocks" in staging.options:
        prefix.set_blocks(*staging.options["blocks"])
    space.registry.add(prefix)
    if staging.chain is not None:
        space.registry.attach_chain(prefix, staging.chain)
    parent = staging.options.get("parent")
    if parent is not None and space.registry.get(parent) is None:
        parent = None  # the parent went meanwhile: the link only orders eviction
    if parent is None and staging.chain is not None:
        parent = space.registry.find_parent(staging.chain, ns)
    if parent is not None:
        space.registry.link(prefix, parent)
    if pinned:
        space.evictor.pinned.add(ns)
    space.touch(ns)


def idle(space: KVSpace, now: float | None = None) -> list[Staging]:
    """Open stagings with no write for ``STAGE_IDLE_S`` (their writers are gone)."""
    now = time.monotonic() if now is None else now
    return [st for st in space.stagings.values() if now - st.touched >= STAGE_IDLE_S]


def space_sides(ns: bytes) -> tuple[bytes, bytes]:
    return ns + b"_pk", ns + b"_pv"


def _name(ns: bytes) -> str:
    return ns.decode("utf-8", "replace")
