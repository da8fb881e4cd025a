"""Staged stores on the wire: ``KV.PREFIX.REGISTER ... STAGE``, the ``TOKEN`` writes,
``KV.PREFIX.PUBLISH`` and ``KV.PREFIX.ABORT``, and the rule that guards manifest-owned namespaces.

The rule (``pion.kvcache.staging`` says why): a namespace registered with a manifest changes only
through a staged store. Its sessions (``ns_pk``, ``ns_pv``) and SSM state refuse token-less
writes (``V.STOREBATCH``, ``V.TRUNCATE``, ``V.RESTORE``, ``V.CREATE`` of a missing side,
``SSM.PREFIX.STORE``) and token-less REGISTERs that would change what it holds; deletions
(``V.DROP``, ``SSM.PREFIX.DROP``, ``KV.PREFIX.DROP``) stay allowed: a prefix missing a part is a
miss, never a wrong hit. Sessions of namespaces without a manifest keep the reference's meaning.
Log replay applies records as they were accepted, so it skips these checks.
"""

from __future__ import annotations

from pion.codecs import CodecError
from pion.kvcache.prefix import Chain, manifest_codecs, parse_manifest
from pion.kvcache.staging import (
    Staging,
    check_token,
    conflict,
    discard,
    idle,
    layer_specs,
    manifest_ints,
    open_staging,
    publish,
    session_specs,
    staged_size,
)
from pion.kvcache.vstore import check_spec
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.args import arg, check_ns
from pion.server.context import kv_engine
from pion.server.registry import command

REG = "ERR KV.PREFIX.REGISTER:"


def owned_error(where: str, sid: bytes, ns: bytes) -> ReplyError:
    return ReplyError(
        f"ERR {where}: '{_name(sid)}' belongs to the prefix '{_name(ns)}', registered with a manifest; it changes "
        "only through a staged store (KV.PREFIX.REGISTER ... STAGE token, writes with TOKEN token, KV.PREFIX.PUBLISH)"
    )


def refuse_if_owned(ctx, sp, sid: bytes, where: str, ssm: bool = False) -> None:
    """The rule: a token-less write into a manifest-owned namespace is refused (never on replay)."""
    if sp.registry.prefixes and not ctx.replaying:
        ns = sp.manifest_owner(sid, ssm)
        if ns is not None:
            raise owned_error(where, sid, ns)


def split_token(words: list, where: str) -> tuple[list, bytes | None]:
    """Split a trailing ``TOKEN <token>`` off the arguments."""
    if len(words) >= 2 and len(words[-2]) == 5 and arg(words[-2]).upper() == b"TOKEN":
        return words[:-2], check_token(arg(words[-1]))
    return words, None


def staging_for(sp, token: bytes, sid: bytes, where: str, ssm: bool = False) -> Staging:
    """The open staging ``token`` names, which must be the one of ``sid``'s namespace."""
    staging = sp.stagings.get(token)
    if staging is None:
        raise ReplyError(f"ERR {where}: no open staged store with this TOKEN (KV.PREFIX.REGISTER ... STAGE opens "
                         "one; it ends at KV.PREFIX.PUBLISH, at KV.PREFIX.ABORT or when idle)")
    if (staging.ns != sid) if ssm else (staging.session(sid) is None):
        raise ReplyError(f"ERR {where}: the staged store of this TOKEN is for '{_name(staging.ns)}', not '{_name(sid)}'")
    return staging


# -- REGISTER ----------------------------------------------------------------------------------


def check_plain_register(sp, ns: bytes, options: dict) -> None:
    """A token-less REGISTER: no MANIFEST (that needs STAGE), and no change to a manifest-owned entry."""
    if "manifest" in options:
        raise ReplyError(f"{REG} MANIFEST needs STAGE token: a prefix with a manifest is stored as a staged store "
                         "(STAGE token, writes with TOKEN token, then KV.PREFIX.PUBLISH ns token)")
    prefix = sp.registry.get(ns)
    if prefix is not None and prefix.manifest is not None and any(k in options for k in ("blocks", "chain", "parent")):
        raise ReplyError(f"{REG} namespace '{_name(ns)}' is registered with a manifest; its BLOCKS, CHAIN and PARENT "
                         "change only through a staged store (STAGE token [REPLACE])")


def stage_register(ctx, argv: list, ns: bytes, spec, options: dict):
    """REGISTER ... STAGE token: check the whole registration, make room for its rows, open the staging."""
    sp = ctx.kv_space()
    if "manifest" not in options:
        raise ReplyError(f"{REG} STAGE needs MANIFEST (the manifest says what the staged rows are)")
    try:
        spec.codec().check_dim(spec.dim)
    except CodecError:
        raise ReplyError(f"{REG} vquant '{spec.fmt}' needs kv_dim divisible by 32 (got {spec.dim})") from None
    chain = Chain.build(*options["chain"]) if "chain" in options else None
    manifest = parse_manifest(options["manifest"], spec.dim, chain)
    n_layers, count, _ = manifest_ints(manifest)
    if chain is not None and len(chain.tokens) != count:
        raise ReplyError(f"{REG} MANIFEST token_count {count} != CHAIN tokens {len(chain.tokens)}")
    for default, schema in session_specs(spec, manifest_codecs(manifest), n_layers):
        for index, layer_spec in enumerate(layer_specs(default, schema, n_layers)):
            check_spec(layer_spec, f"{REG} MANIFEST codec of layer {index}")
    parent = options.get("parent")
    if parent is not None and (parent == ns or sp.registry.get(parent) is None):
        raise ReplyError(f"{REG} PARENT '{_name(parent)}' is not a registered namespace")
    token = options["stage"]
    if token in sp.stagings:
        raise ReplyError(f"{REG} this STAGE token is already open")
    effects: list = []
    needed = staged_size(spec, manifest)
    if not ctx.replaying:
        why = conflict(sp, ns, manifest, chain, bool(options.get("replace")))
        if why is not None:
            raise ReplyError(f"{REG} namespace '{_name(ns)}' {why}; REPLACE overwrites it")
        check_fits(sp, needed, ctx.server.settings.kv_maxmemory, ns)
        effects = sp.make_room(ctx.kv_budget, needed, ns)
    staging = open_staging(sp, token, ns, spec, options, manifest, chain)
    staging.reserved = needed
    ctx.log_with(effects, [arg(a) for a in argv])
    return OK


def check_fits(sp, needed: int, budget: int, ns: bytes) -> None:
    """Refuse, before evicting anything, a staged prefix that can never fit ``--kv-maxmemory``."""
    if not budget:
        return
    if needed > budget:
        raise ReplyError(f"OOM the prefix needs {needed} bytes, more than kv-maxmemory ({budget}); "
                         "nothing was evicted or stored")
    free = budget - sp.nbytes + sp.evictable_bytes(frozenset((ns,)))
    if needed > free:
        raise ReplyError(f"OOM the prefix needs {needed} bytes, but at most {max(free, 0)} of kv-maxmemory ({budget}) "
                         "can be freed (the rest is pinned or being stored); nothing was evicted or stored")


# -- PUBLISH, ABORT ------------------------------------------------------------------------------


@command("KV.PREFIX.PUBLISH", 3, "write", categories="@write @pion", group="pion", since="0.2.0")
def kv_prefix_publish(ctx, argv):
    """KV.PREFIX.PUBLISH ns token: make a complete staged store the namespace's prefix, in one step.

    +OK once it is readable (or an equal complete prefix already was, a concurrent identical
    store); an incomplete staging, or one that would overwrite another prefix without REPLACE, is
    discarded and refused. The reply waits, like every write, until the record is durable.
    """
    ns = check_ns(argv[1])
    token = check_token(arg(argv[2]))
    sp = ctx.kv_space()
    try:
        publish(sp, ns, token, ctx.write_seq())
    except ReplyError:
        if token not in sp.stagings:  # discarded: log that, so replay discards it too
            ctx.dirty()
            ctx.rewrite([b"KV.PREFIX.ABORT", ns, token])
        raise
    ctx.dirty()
    return OK


@command("KV.PREFIX.ABORT", 3, "write fast", categories="@write @pion", group="pion", since="0.2.0")
def kv_prefix_abort(ctx, argv):
    """KV.PREFIX.ABORT ns token: discard an open staged store and its rows; 1 if there was one."""
    ns = check_ns(argv[1])
    token = check_token(arg(argv[2]))
    sp = ctx.kv_space()
    staging = sp.stagings.get(token)
    if staging is None or staging.ns != ns:
        return 0
    discard(sp, token)
    ctx.dirty()
    return 1


@command("KV.PREFIX.GENERATION", 2, "readonly fast", categories="@read @pion", group="pion", since="0.2.0")
def kv_prefix_generation(ctx, argv):
    """KV.PREFIX.GENERATION ns: the id of the namespace's current entry (0 when none); never reused.

    Why: a pipeline is not a transaction. Between a reader's ``LOOKUP`` and its last ``V.FETCH``
    another client may publish a replacement (``REPLACE``), or the prefix may be evicted and
    another stored there; every row read would then be a clean-looking row of another prefix.
    A reader asks this first and last: equal and non-zero, every reply in between came from one
    entry (its rows change only through a publish, which makes a new entry).
    """
    prefix = ctx.kv_space().registry.get(check_ns(argv[1]))
    return 0 if prefix is None else prefix.generation


def abort_idle(server) -> None:
    """Cron: discard stagings whose writer went quiet, logging an ABORT for each (as key expiry logs DEL)."""
    if server.loading:
        return
    kv = kv_engine(server)
    for tenant, sp in kv.spaces.items():
        stale = idle(sp) if sp.stagings else []
        if not stale:
            continue
        dbs = server.tenant_dbs.get(tenant.decode()) if tenant else server.dbs
        if not dbs:
            continue
        for staging in stale:
            discard(sp, staging.token)
            server.dirty += 1
            server.dispatcher.pending.append((dbs[0].id, [b"KV.PREFIX.ABORT", staging.ns, staging.token]))
    if server.dispatcher.pending and server.dispatcher.depth == 0:
        server.dispatcher.finish_command(None)


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")
