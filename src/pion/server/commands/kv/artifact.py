"""``KV.PREFIX.EXPORT`` / ``KV.PREFIX.IMPORT``: a stored prefix as a portable file and back.

EXPORT answers a prefix (rows in their stored codecs, recurrent state, manifest, token chain) as
the bytes of a ``pion.codecs.artifact`` safetensors file with a SHA-256 over all of it. IMPORT
checks that checksum and that the artifact agrees with itself (the manifest's layers, tokens,
codecs and state slots against the tensors it carries), then installs it as a staged store
(REGISTER ... STAGE, the TOKEN writes, PUBLISH), run as nested commands: it is all or nothing,
obeys the same rules as any store (a namespace holding another prefix refuses it unless
REPLACE, ``--kv-maxmemory`` refuses it up front), and is logged as those commands, so it
survives kill -9 like any store. Whether the prefix suits the *importing model* is the client's
check (``PionPromptCache.import_``): the server does not know the model.
"""

from __future__ import annotations

import secrets
from functools import partial

from pion.codecs import get_codec
from pion.codecs.artifact import Artifact, ArtifactError, pack, unpack
from pion.kvcache.space import sides
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.json_input import loads_bounded
from pion.server.args import arg, check_ns
from pion.server.commands.kv.vstore import DEFER_MIN
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command

IMPORT = "ERR KV.PREFIX.IMPORT:"


@command("KV.PREFIX.EXPORT", 2, "readonly", categories="@read @pion", group="pion", since="0.2.0")
def kv_prefix_export(ctx, argv):
    """KV.PREFIX.EXPORT ns: the prefix as a portable artifact (safetensors bytes with its manifest and a checksum).

    Only a complete prefix registered with a manifest can be exported (the manifest is what an
    importer checks its model against).
    """
    ns = check_ns(argv[1])
    sp = ctx.kv_space()
    art = collect(sp, ns)
    size = sum(len(k) + len(v) for k, v in art.rows) + sum(len(b) for b in art.states.values())
    if size + 65536 > ctx.server.settings.proto_max_bulk_len:
        raise ReplyError(f"ERR KV.PREFIX.EXPORT: the artifact ({size} bytes) exceeds proto-max-bulk-len")
    sp.touch(ns)
    if size >= DEFER_MIN and can_defer(ctx):
        return Deferred([partial(pack, art)], lambda ctx, results: results[0])
    return pack(art)


def collect(sp, ns: bytes) -> Artifact:
    """What an artifact of ``ns`` holds (views of the stored rows; nothing is copied here)."""
    prefix = sp.registry.get(ns)
    if prefix is None or prefix.manifest is None:
        raise ReplyError(f"ERR KV.PREFIX.EXPORT: '{ns.decode('utf-8', 'replace')}' is not a prefix registered with "
                         "a manifest")
    complete, _ = sp.completeness(ns)
    if not complete:
        raise ReplyError(f"ERR KV.PREFIX.EXPORT: '{ns.decode('utf-8', 'replace')}' is not complete (a part of it "
                         "was dropped or evicted)")
    count = prefix.token_count() or 0
    n_layers = prefix.layer_count() or 0
    pk, pv = (sp.vstore.get(sid) for sid in sides(ns))
    rows, k_codecs, v_codecs = [], [], []
    for index in range(n_layers):
        k_layer, v_layer = pk.layer(index), pv.layer(index)
        rows.append((k_layer.read(0, count), v_layer.read(0, count)))
        k_codecs.append(pk.spec(index).fmt)
        v_codecs.append(pv.spec(index).fmt)
    states = {slot: sp.ssm.fetch(ns, slot) for slot in prefix.state_layers()}
    chain = prefix.chain
    if chain is None:
        raise ReplyError(f"ERR KV.PREFIX.EXPORT: '{ns.decode('utf-8', 'replace')}' has no token chain (it was "
                         "registered without CHAIN): the artifact would not say its tokens")
    return Artifact(
        ns=ns, kv_dim=prefix.kv_dim, vquant=prefix.vquant, manifest_raw=bytes(prefix.manifest_raw),
        tokens=chain.tokens, k_codecs=k_codecs, v_codecs=v_codecs, rows=rows, states=states,
        block_size=chain.block_size, seed=chain.seed, prefill_us=prefix.prefill_us,
    )


@command("KV.PREFIX.IMPORT", -2, "write denyoom", categories="@write @pion", group="pion", since="0.2.0")
def kv_prefix_import(ctx, argv):
    """KV.PREFIX.IMPORT artifact [REPLACE]: verify a KV.PREFIX.EXPORT artifact and store it; its namespace.

    The checksum and the artifact's own consistency are checked before anything is stored; the
    store itself is a staged store (all or nothing, logged), refused when the namespace holds
    another prefix unless REPLACE.
    """
    if len(argv) > 3 or (len(argv) == 3 and arg(argv[2]).upper() != b"REPLACE"):
        raise ReplyError(SYNTAX)
    replace = len(argv) == 3
    blob = argv[1]
    if len(blob) >= DEFER_MIN and can_defer(ctx):
        return Deferred([partial(verified, blob)], lambda ctx, results: install(ctx, results[0], replace))
    return install(ctx, verified(blob), replace)


def verified(blob) -> Artifact:
    """The artifact, checksum and structure checked (a pool job for large ones)."""
    try:
        art = unpack(blob)
    except ArtifactError as exc:
        raise ReplyError(f"{IMPORT} {exc}") from None
    check_artifact(art)
    return art


def check_artifact(art: Artifact) -> None:
    """The artifact agrees with itself: the manifest's counts, the codecs' row sizes, the state slots."""
    try:
        manifest = loads_bounded(art.manifest_raw)
    except ValueError:
        raise ReplyError(f"{IMPORT} its manifest is not JSON") from None
    count, n_layers = manifest.get("token_count"), manifest.get("n_layers")
    if count != len(art.tokens) or n_layers != len(art.rows) or len(art.v_codecs) != len(art.k_codecs):
        raise ReplyError(f"{IMPORT} the manifest declares {n_layers} layers and {count} tokens, the artifact holds "
                         f"{len(art.rows)} layers and {len(art.tokens)} tokens")
    for index, ((k, v), kc, vc) in enumerate(zip(art.rows, art.k_codecs, art.v_codecs, strict=True)):
        for side, data, name in (("K", k, kc), ("V", v, vc)):
            try:
                expected = get_codec(name).bytes_per_row(art.kv_dim) * count
            except Exception:
                raise ReplyError(f"{IMPORT} layer {index} {side}: unknown codec {name!r}") from None
            if len(data) != expected:
                raise ReplyError(f"{IMPORT} layer {index} {side}: {len(data)} bytes, {expected} expected for "
                                 f"{count} {name} rows of {art.kv_dim}")
    declared = sorted(manifest.get("state_layers") or [])
    if declared != sorted(art.states):
        raise ReplyError(f"{IMPORT} the manifest declares state slots {declared}, the artifact holds {sorted(art.states)}")


def install(ctx, art: Artifact, replace: bool):
    """Store the artifact as nested staged-store commands (logged as themselves); its namespace."""
    ctx.no_propagate()  # the nested commands log what they do; the artifact itself is not logged again
    token = b"import-" + secrets.token_hex(12).encode()
    ns = art.ns
    register = [b"KV.PREFIX.REGISTER", ns, b"%d" % art.kv_dim, art.vquant.encode()]
    if art.prefill_us is not None:
        register += [b"PREFILL_MS", b"%d" % (art.prefill_us // 1000)]
    register += [b"MANIFEST", art.manifest_raw]
    if art.block_size:
        register += [b"CHAIN", b"%d" % art.block_size, art.tokens.astype("<u4").tobytes(), b"SEED", art.seed]
    register += [b"STAGE", token] + ([b"REPLACE"] if replace else [])
    pk, pv = sides(ns)
    count = b"%d" % len(art.tokens)
    commands = [register]
    for index, (k, v) in enumerate(art.rows):
        commands += [[b"V.STOREBATCH", sid, b"%d" % index, b"0", count, data, b"FMT", b"RAW", b"TOKEN", token]
                     for sid, data in ((pk, k), (pv, v))]
    commands += [[b"SSM.PREFIX.STORE", ns, b"%d" % slot, blob, b"TOKEN", token] for slot, blob in art.states.items()]
    commands.append([b"KV.PREFIX.PUBLISH", ns, token])
    dispatcher = ctx.server.dispatcher
    for position, argv in enumerate(commands):
        reply = dispatcher.call(ctx.client, dispatcher.lookup(argv), argv)
        if isinstance(reply, ReplyError):
            if 0 < position < len(commands) - 1:
                abort = [b"KV.PREFIX.ABORT", ns, token]
                dispatcher.call(ctx.client, dispatcher.lookup(abort), abort)
            message = reply.message.split(": ", 1)[-1] if reply.message.startswith("ERR ") else reply.message
            raise ReplyError(f"{IMPORT} {message}" if reply.message.startswith("ERR ") else reply.message)
    ctx.dirty()
    return ns
